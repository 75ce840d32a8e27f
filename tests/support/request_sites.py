"""Where an operator's own code names a request method of `kubernetes` or `kubernetes_asyncio`:
found apart from `kopf rbac generate` (any public method of the libraries' `*Api` classes,
wherever it is named), to check that the generator says something of each one, a rule or a
warning: nothing is dropped in silence.

Run as a script in the operator's virtualenv with `kopf rbac generate`'s arguments (the files
and ``-m`` modules are imported as the generator imports them): prints the sites as JSON."""

from __future__ import annotations

import ast
import importlib
import json
import os
import pkgutil
import re
import sys
from collections.abc import Iterable, Sequence
from pathlib import Path

Site = tuple[str, int, int, int, str]  # file as the generator names it, statement's first and last line, line, name

# Where the generator names a site: a rule's comment (`... at FILE:LINE, from ...`), a warning
# (`FILE:LINE (in ...)`), or a warning for a file (`FILE: ... NAME at line LINE in ...`).
RULE = re.compile(r" at (\S+?):(\d+), from ")
WARNING = re.compile(r"^(\S+?):(\d+) \(in ")
FILE_WARNING = re.compile(r"^(\S+?): request methods that no handler is seen to reach")
IN_FILE = re.compile(r"\w+ at line (\d+) in ")


def request_names() -> set[str]:
    """The public methods of the client libraries' API classes (those installed)."""
    names: set[str] = set()
    for package in ('kubernetes.client.api', 'kubernetes_asyncio.client.api'):
        try:
            api = importlib.import_module(package)
        except ImportError:
            continue
        # Each API class in a module of its own (imported lazily by newer versions' `client`).
        for info in pkgutil.iter_modules(api.__path__):
            module = importlib.import_module(f"{package}.{info.name}")
            for name, cls in vars(module).items():
                if name.endswith('Api') and isinstance(cls, type) and cls.__module__ == module.__name__:
                    names |= {attr for attr, value in vars(cls).items()
                              if not attr.startswith('_') and callable(value) and attr != 'close'}
    return names


def sites(files: Iterable[tuple[str, str]], names: set[str]) -> list[Site]:
    """The sites in these files (their paths and names as the generator names them)."""
    found: list[Site] = []
    for path, display in files:
        tree = ast.parse(Path(path).read_text(), path)
        for statement in ast.walk(tree):
            if not isinstance(statement, ast.stmt) or isinstance(statement, (ast.FunctionDef, ast.AsyncFunctionDef,
                                                                             ast.ClassDef)):
                continue
            for node in _expressions(statement):
                if isinstance(node, ast.Attribute) and node.attr in names:
                    end = statement.end_lineno or statement.lineno
                    found.append((display, statement.lineno, end, node.lineno, node.attr))
    return sorted(set(found))


def _expressions(statement: ast.stmt) -> Iterable[ast.AST]:
    """The nodes of a statement, without those of the statements inside it (an `if`'s body)."""
    for _, value in ast.iter_fields(statement):
        children = value if isinstance(value, list) else [value]
        for child in children:
            if isinstance(child, ast.AST) and not isinstance(child, ast.stmt):
                yield from ast.walk(child)


def silent(found: Sequence[Site], generated: str, warnings: Sequence[str]) -> list[str]:
    """The sites that the generated rules and the warnings say nothing of."""
    said: dict[str, set[int]] = {}
    for file, line in RULE.findall(generated):
        said.setdefault(file, set()).add(int(line))
    for warning in warnings:
        if (match := WARNING.match(warning)) is not None:
            said.setdefault(match[1], set()).add(int(match[2]))
        elif (match := FILE_WARNING.match(warning)) is not None:
            said.setdefault(match[1], set()).update(int(line) for line in IN_FILE.findall(warning))
    return [f"{file}:{line} {name}" for file, first, last, line, name in found
            if not any(first <= said_line <= last for said_line in said.get(file, ()))]


def _own_files(args: Sequence[str]) -> list[tuple[str, str]]:
    """The operator's own modules, as imported: under its packages' folders (or its files' folders)."""
    modules = [args[i + 1] for i, arg in enumerate(args[:-1]) if arg in ('-m', '--module')]
    scripts = [arg for arg in args if arg.endswith('.py') and os.path.isfile(arg)]
    from kopf._operating import loading  # (the operator's own kopf: as `kopf rbac generate` imports it)
    loading.preload(scripts, modules)
    roots: dict[Path, Path] = {}
    for name in modules:
        top = sys.modules[name.partition('.')[0]]
        folder = Path(top.__file__ or '').resolve().parent
        roots[folder] = folder.parent
    for script in scripts:
        folder = Path(script).resolve().parent
        roots.setdefault(folder, Path.cwd() if folder.is_relative_to(Path.cwd()) else folder)
    files: dict[str, str] = {}
    for module in list(sys.modules.values()):
        filename = getattr(module, '__file__', None)
        if not filename or not filename.endswith('.py'):
            continue
        path = Path(filename).resolve()
        for root, base in roots.items():
            if path.is_relative_to(root) and 'site-packages' not in path.relative_to(root).parts:
                files[str(path)] = str(path.relative_to(base))
    return sorted(files.items())


if __name__ == '__main__':
    print(json.dumps(sites(_own_files(sys.argv[1:]), request_names())))
