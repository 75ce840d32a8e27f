#!/usr/bin/env python3
"""Fails on an import cycle in the Rust core (`src/`, `crates/*/src/`) or in the Python
package (`python/kopf`), on a Rust module that uses a layer above its own in the floor plan
(src/lib.rs), on a layer in another crate than the plan says, on a layer whose doc's `Uses:`
line does not say what its modules use, and on a Python module that imports the compiled core
outside the bridge (`kopf._bridge`), imports one of Kopf's paths kept for operators, or imports
a group above its own (the groups' order: docs/architecture.md's table); and on
docs/architecture.md's tables of Rust layers and Python groups that differ from the code.

Rust: every `crate::...` path (in `use` lines, grouped ones included, and inline in code) and
`super::...` path is resolved to the module file it names; a module is a node, and a file's
uses are its edges. Python: every `import`/`from ... import` of a `kopf` module, at the top of
a file or inside a function alike, is an edge. ``python checks/layering.py`` prints the layers.
"""

from __future__ import annotations

import ast
import re
import sys
import tomllib
from collections.abc import Iterable
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

# The core's floor plan is kept in one place, src/lib.rs's doc (`# Floor plan`: one line per
# layer, bottom-up, with its crate if not src/'s); each layer's own doc ends with what it uses
# (`Uses: ...`). Both are read here and checked against the code. The compiler keeps the
# crates apart; the layers within a crate are kept here. Every crate names the layers below
# it at its root (src/ re-exports them), so `crate::util` means the same module in all.
PLAN = ROOT / "src" / "lib.rs"
ROOT_MODULES = {"lib"}  # the crates' roots declare (or re-export) the layers; they use none


def floor_plan(lib: Path = PLAN) -> list[tuple[str, str]]:
    """The layers, bottom-up, and their crates, as the floor plan in src/lib.rs lists them."""
    _, _, plan = lib.read_text().partition("//! # Floor plan")
    layers = [(name, folder or "src") for name, folder in
              re.findall(r"^//! - `(\w+)`(?: \(`([\w/]+)`\))?", plan, re.M)]
    if not layers:
        raise SystemExit(f"{lib}: no floor plan (`//! - `layer`` or `//! - `layer` (`crate`)`, bottom-up)")
    return layers


PLANNED = floor_plan()
LAYERS: list[tuple[str, ...]] = [(name,) for name, _ in PLANNED]
# The crates that hold layers, bottom-up as the plan names them, with their sources.
CRATES = {folder: ROOT / folder / "src" if folder != "src" else ROOT / "src" for _, folder in PLANNED}
# The workspace's crates below every layer (no layers of their own: the allocator).
BELOW_LAYERS = {"crates/region"}


def layer_file(layer: str) -> Path | None:
    """The layer's module file (`mod.rs` of its folder, or its own file) in whichever crate."""
    for src in CRATES.values():
        for path in (src / layer / "mod.rs", src / f"{layer}.rs"):
            if path.exists():
                return path
    return None


def crate_problems(manifest: Path = ROOT / "Cargo.toml") -> Iterable[str]:
    """Each layer in the crate the plan names; a crate's layers together in the plan (else it
    would say that a layer may use one that the compiler keeps out of its reach); the plan's
    crates the workspace's members."""
    passed: list[str] = []  # the crates whose layers the plan has listed, in order
    for name, folder in PLANNED:
        path = layer_file(name)
        if path is not None and not path.is_relative_to(CRATES[folder]):
            yield f"{name}: the floor plan (src/lib.rs) puts it in {folder}, but it is {path.relative_to(ROOT)}"
        if folder in passed[:-1]:
            yield f"{name}: in {folder}, listed after a layer of a crate above it"
        if not passed or passed[-1] != folder:
            passed.append(folder)
    members = set(tomllib.loads(manifest.read_text())["workspace"]["members"]) - BELOW_LAYERS
    if members != set(CRATES) - {"src"}:
        yield f"the workspace's members ({sorted(members)}) are not the floor plan's crates ({sorted(CRATES)})"


def declared_uses(path: Path, before: list[str]) -> set[str] | None:
    """The layers that a layer's doc says it uses (`//! Uses: `a`, `b`.`, `nothing`, or
    `every layer before it`); None if it does not say."""
    head = "\n".join(line for line in path.read_text().splitlines() if line.startswith("//!"))
    match = re.search(r"^//! Uses: (.*)$", head, re.M)
    if match is None:
        return None
    if match[1].startswith("every layer before it"):
        return set(before)
    return set(re.findall(r"`(\w+)`", match[1]))


def architecture_problems(page: Path = ROOT / "docs" / "architecture.md") -> Iterable[str]:
    """The documentation's table of layers (docs/architecture.md) in the floor plan's order."""
    listed = re.findall(r"^\| `(\w+)(?:/|\.rs)` \|", page.read_text(), re.M)
    planned = [name for names in LAYERS for name in names]
    if listed != planned:
        yield f"docs/architecture.md's table of layers lists {listed}, the floor plan (src/lib.rs) {planned}"


def python_groups(page: Path = ROOT / "docs" / "architecture.md") -> list[str]:
    """The Python package's groups, top-down, as docs/architecture.md's table lists them: its floor plan."""
    return re.findall(r"^\| `kopf\.(_\w+)` \|", page.read_text(), re.M)


def python_group_violations(graph: dict[str, set[str]], groups: list[str]) -> Iterable[str]:
    """A group's module that imports one of a group above its own, or one of the package's
    modules in no group (the public ones, Kopf's kept paths: the top row, which imports any)."""
    def rank(module: str) -> int | None:
        parts = module.split(".")
        return groups.index(parts[1]) if len(parts) > 1 and parts[1] in groups else None

    for module, used in sorted(graph.items()):
        own = rank(module)
        if own is None:
            continue
        for other in sorted(used):
            theirs = rank(other)
            if other == "kopf._engine":
                continue  # the compiled core, below every group (only the bridge imports it)
            if theirs is None:
                yield f"{module} imports {other}, which is in no group (the top row of the groups' table)"
            elif theirs < own:
                yield f"{module} imports {other}, of a group above its own in docs/architecture.md's table"


def python_groups_problems(page: Path = ROOT / "docs" / "architecture.md") -> Iterable[str]:
    """The documentation's table of the Python package's groups against its subpackages."""
    listed = set(python_groups(page))
    package = ROOT / "python" / "kopf"
    groups = {path.parent.name for path in package.glob("*/__init__.py")}
    groups -= {shim.removeprefix("kopf.") for shim in SHIMS}
    if listed != groups:
        yield f"docs/architecture.md's table of groups lists {sorted(listed)}, python/kopf has {sorted(groups)}"


def declaration_problems(graph: dict[str, set[str]]) -> Iterable[str]:
    """Each layer's `Uses:` line against the floor plan and against the code."""
    names = [name for names in LAYERS for name in names]
    for number, layer in enumerate(names):
        before = names[:number]
        path = layer_file(layer)
        if path is None:
            yield f"{layer}: in the floor plan (src/lib.rs), but no crate has {layer}/ or {layer}.rs"
            continue
        declared = declared_uses(path, before)
        if declared is None:
            yield f"{path.relative_to(ROOT)}: its doc does not end with what it uses (`//! Uses: ...`)"
            continue
        for other in sorted(declared - set(before)):
            yield f"{path.relative_to(ROOT)}: says it uses `{other}`, which is not before it in the floor plan"
        used = {other.split("::")[0] for module, uses in graph.items() if module.split("::")[0] == layer
                for other in uses} - {layer}
        for other in sorted(used - declared):
            yield f"{path.relative_to(ROOT)}: its layer uses `{other}`, which its `Uses:` line does not name"
        if "every layer before it" not in path.read_text():  # else it names none in particular
            for other in sorted(declared - used):
                yield f"{path.relative_to(ROOT)}: its `Uses:` line names `{other}`, which its layer does not use"


def rust_modules(sources: Iterable[Path]) -> dict[str, Path]:
    """Module paths (`engine::queueing`, `state` for `state/mod.rs`) to their files, in the
    crates' one namespace (each crate's root is `lib`)."""
    modules: dict[str, Path] = {}
    for src in sources:
        for path in sorted(src.rglob("*.rs")):
            parts = list(path.relative_to(src).with_suffix("").parts)
            if parts[-1] == "mod":
                parts.pop()
            name = "::".join(parts) or "lib"
            if name in modules and name != "lib":
                raise SystemExit(f"{path.relative_to(ROOT)}: also {modules[name].relative_to(ROOT)}")
            modules.setdefault(name, path)
    return modules


def _strip_comments(text: str) -> str:
    text = re.sub(r"//[^\n]*", "", text)
    return re.sub(r"/\*.*?\*/", "", text, flags=re.S)


def _expand(tree: str) -> list[str]:
    """`a::{b, c::{d, e}}` -> [`a::b`, `a::c::d`, `a::c::e`]."""
    tree = re.sub(r"\s+", "", tree)
    start = tree.find("{")
    if start < 0:
        return [tree]
    prefix, depth, items, current = tree[:start], 0, [], ""
    for char in tree[start + 1:tree.rfind("}")]:
        if char == "," and depth == 0:
            items.append(current)
            current = ""
            continue
        depth += (char == "{") - (char == "}")
        current += char
    items.append(current)
    return [prefix + leaf for item in items if item for leaf in _expand(item)]


def _cfg_test_free(text: str) -> str:
    """The code without its `#[cfg(test)] mod tests { ... }` (tests may look anywhere)."""
    match = re.search(r"#\[cfg\(test\)\]\s*mod\s+\w+\s*\{", text)
    if not match:
        return text
    depth, index = 1, match.end()
    while depth and index < len(text):
        depth += (text[index] == "{") - (text[index] == "}")
        index += 1
    return text[:match.start()] + _cfg_test_free(text[index:])


def rust_uses(module: str, path: Path, modules: dict[str, Path]) -> set[str]:
    text = _cfg_test_free(_strip_comments(path.read_text()))
    paths: list[str] = []
    for statement in re.findall(r"\buse\s+([^;]+);", text):
        paths.extend(_expand(statement))
    paths.extend(re.findall(r"\b((?:crate|super)(?:::\w+)+)", text))
    # `super` is the parent of this module (of the folder's `mod.rs` for its files).
    parent = module.split("::")[:-1]
    used = set()
    for full in paths:
        parts = full.split(" as ")[0].split("::")
        if parts[0] == "super":
            parts = parent + parts[1:]
        elif parts[0] == "crate":
            parts = parts[1:]
        else:
            continue
        # The longest prefix that is a module (the rest are items in it).
        for length in range(len(parts), 0, -1):
            candidate = "::".join(parts[:length])
            if candidate in modules:
                if candidate != module:
                    used.add(candidate)
                break
    return used


# Python's floor plan. Kopf's internal paths (`SHIMS`) re-export the package's modules for
# operators that import them; nothing of the package imports them. The compiled core
# (`kopf._engine`) is imported only by the bridge (`kopf._bridge`: the protocol, and the
# core's functions and types named once); the rest of the package reaches the core through it.
# The groups' order is docs/architecture.md's table (`python_groups`).
SHIMS = ("kopf._core", "kopf._cogs", "kopf._kits")
BRIDGE = "kopf._bridge"


def python_plan_problems(graph: dict[str, set[str]]) -> Iterable[str]:
    """The shims imported by nothing of the package, `_engine` only by the bridge."""
    for module, used in sorted(graph.items()):
        if not module.startswith(SHIMS):
            for other in sorted(used):
                if other.startswith(SHIMS):
                    yield f"{module} imports {other}, one of Kopf's paths kept for operators"
        if "kopf._engine" in used and not module.startswith(BRIDGE):
            yield f"{module} imports kopf._engine: only {BRIDGE} may (its services.py names the core's services)"


def python_modules(package: Path) -> dict[str, Path]:
    # The compiled core: it imports nothing of the package.
    modules = {"kopf._engine": package / "_engine.pyi"}
    for path in sorted(package.rglob("*.py")):
        parts = ["kopf", *path.relative_to(package).with_suffix("").parts]
        if parts[-1] == "__init__":
            parts.pop()
        modules[".".join(parts)] = path
    return modules


def python_uses(path: Path, modules: dict[str, Path]) -> set[str]:
    used = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            # `from kopf import _engine`: the submodule if there is one, else the package.
            names = [f"{node.module}.{alias.name}" if f"{node.module}.{alias.name}" in modules
                     else node.module for alias in node.names]
        else:
            continue
        used.update(name for name in names if name in modules)
    return used


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components with more than one node (Tarjan's algorithm)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for other in sorted(graph.get(node, ())):
            if other not in index:
                visit(other)
                low[node] = min(low[node], low[other])
            elif other in stack:
                low[node] = min(low[node], index[other])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    sys.setrecursionlimit(10_000)
    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def layer_of(module: str) -> int | None:
    top = module.split("::")[0]
    for number, names in enumerate(LAYERS):
        if top in names:
            return number
    return None


def layer_violations(graph: dict[str, set[str]]) -> Iterable[str]:
    for module, used in sorted(graph.items()):
        if module in ROOT_MODULES:
            continue
        own = layer_of(module)
        if own is None:
            yield f"{module}: in no layer (add it to the floor plan in src/lib.rs)"
            continue
        for other in sorted(used):
            theirs = layer_of(other)
            if theirs is not None and theirs > own:
                yield f"{module} uses {other}, a layer above its own"


def main() -> int:
    rust = rust_modules(CRATES.values())
    rust_graph = {module: rust_uses(module, path, rust) for module, path in rust.items()}
    python = python_modules(ROOT / "python" / "kopf")
    python_graph = {module: python_uses(path, python) for module, path in python.items() if path.exists()}
    # The package's `__init__` gathers the public API from the modules: an edge from a module
    # back to `kopf` itself would close a cycle, which is reported.
    problems = [f"Rust import cycle: {' <-> '.join(c)}" for c in cycles(rust_graph)]
    problems += [f"Rust layering: {v}" for v in layer_violations(rust_graph)]
    problems += [f"Rust floor plan: {v}" for v in declaration_problems(rust_graph)]
    problems += [f"Rust floor plan: {v}" for v in crate_problems()]
    problems += [f"Rust floor plan: {v}" for v in architecture_problems()]
    problems += [f"Python import cycle: {' <-> '.join(c)}" for c in cycles(python_graph)]
    problems += [f"Python floor plan: {v}" for v in python_plan_problems(python_graph)]
    problems += [f"Python floor plan: {v}" for v in python_groups_problems()]
    problems += [f"Python floor plan: {v}" for v in python_group_violations(python_graph, python_groups())]
    if "-v" in sys.argv[1:]:
        for number, names in enumerate(LAYERS):
            members = sorted(m for m in rust if layer_of(m) == number)
            print(f"{number}. {', '.join(names)}: {', '.join(members)}")
    for problem in problems:
        print(problem, file=sys.stderr)
    if not problems:
        print(f"No import cycles: {len(rust)} Rust modules in {len(LAYERS)} layers, "
              f"{len(python)} Python modules.")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
