"""The operator's own source, as `introspecting` reads it: which files are the operator's own
(followed into), how they are named in messages, and each file parsed once, its functions found
by their first lines and its classes by their qualified names."""

from __future__ import annotations

import ast
import dataclasses
import linecache
import os
import sys
import sysconfig
import types
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any


class Code:
    """Which files are the operator's own (followed into) and how they are named in messages:
    the package of each handler's module (its top package's folder), or a handler script's
    folder without the virtualenvs in it; never Kopf's, the standard library or site-packages."""

    def __init__(self, functions: Iterable[Callable[..., Any]], files: Iterable[str] = ()) -> None:
        self.roots: dict[Path, Path] = {}  # a folder of own code -> the base its files are named from
        excluded = {Path(sysconfig.get_paths()['stdlib']).resolve(), Path(__file__).resolve().parents[2]}
        skafos = sys.modules.get('skafos')
        if skafos is not None and getattr(skafos, '__file__', None):
            excluded.add(Path(skafos.__file__).resolve().parent)  # type: ignore[arg-type]
        self.excluded = excluded
        for fn in functions:
            module = sys.modules.get(getattr(fn, '__module__', '') or '')
            top = sys.modules.get((getattr(module, '__name__', '') or '').partition('.')[0])
            if top is not None and getattr(top, '__path__', None) and getattr(top, '__file__', None):
                folder = Path(top.__file__).resolve().parent  # type: ignore[arg-type]
                self.roots.setdefault(folder, folder.parent)
            else:
                self._script(getattr(getattr(fn, '__code__', None), 'co_filename', None))
        for filename in files:
            self._script(filename)

    def _script(self, filename: str | None) -> None:
        """A handlers' file that is no package's: its folder is the operator's own."""
        if filename and os.path.exists(filename):
            folder = Path(filename).resolve().parent
            if not any(folder.is_relative_to(root) for root in self.roots):
                self.roots.setdefault(folder, Path.cwd() if folder.is_relative_to(Path.cwd()) else folder)

    def owns(self, filename: str | None) -> bool:
        if not filename or filename.startswith('<'):
            return False
        path = Path(filename).resolve()
        if any(path.is_relative_to(excluded) for excluded in self.excluded):
            return False
        for root in self.roots:
            if path.is_relative_to(root):
                inner = path.relative_to(root).parts
                return not any(part in ('site-packages', 'dist-packages') for part in inner)
        return False

    def owns_function(self, fn: Any) -> bool:
        code = getattr(fn, '__code__', None)
        return isinstance(code, types.CodeType) and self.owns(code.co_filename)

    def owns_class(self, cls: type) -> bool:
        module = sys.modules.get(getattr(cls, '__module__', '') or '')
        return module is not None and self.owns(getattr(module, '__file__', None))

    def display(self, filename: str) -> str:
        path = Path(filename).resolve()
        for root, base in self.roots.items():
            if path.is_relative_to(root):
                return str(path.relative_to(base))
        return filename


@dataclasses.dataclass
class Parsed:
    """A source file, parsed once: its tree, each node's parent, its functions by first line."""
    tree: ast.Module
    parents: dict[int, ast.AST]
    functions: dict[int, list[ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda]]
    classes: dict[str, ast.ClassDef]  # by qualified name


FunctionNode = ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda


def _first_line(node: FunctionNode) -> int:
    decorators = getattr(node, 'decorator_list', [])
    return int(min([node.lineno, *(d.lineno for d in decorators)]))


class Sources:
    def __init__(self) -> None:
        self.parsed: dict[str, Parsed | None] = {}

    def of(self, filename: str, module_globals: dict[str, Any] | None = None) -> Parsed | None:
        if filename not in self.parsed:
            text = ''.join(linecache.getlines(filename, module_globals))
            try:
                tree = ast.parse(text, filename)
            except (SyntaxError, ValueError):
                self.parsed[filename] = None
                return None
            parents: dict[int, ast.AST] = {}
            functions: dict[int, list[FunctionNode]] = {}
            classes: dict[str, ast.ClassDef] = {}

            def visit(node: ast.AST, qualname: str) -> None:
                for child in ast.iter_child_nodes(node):
                    parents[id(child)] = node
                    inner = qualname
                    if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
                        functions.setdefault(_first_line(child), []).append(child)
                        name = getattr(child, 'name', '<lambda>')
                        inner = f"{qualname}{name}.<locals>."
                    elif isinstance(child, ast.ClassDef):
                        classes[f"{qualname}{child.name}"] = child
                        inner = f"{qualname}{child.name}."
                    visit(child, inner)

            visit(tree, '')
            self.parsed[filename] = Parsed(tree, parents, functions, classes)
        return self.parsed[filename]

    def function(self, fn: Any) -> tuple[FunctionNode, Parsed] | None:
        code = getattr(fn, '__code__', None)
        if not isinstance(code, types.CodeType):
            return None
        parsed = self.of(code.co_filename, getattr(fn, '__globals__', None))
        if parsed is None:
            return None
        for node in parsed.functions.get(code.co_firstlineno, []):
            name = getattr(node, 'name', '<lambda>')
            if name == code.co_name:
                return node, parsed
        return None

    def cls(self, cls: type) -> tuple[ast.ClassDef, Parsed] | None:
        module = sys.modules.get(cls.__module__)
        filename = getattr(module, '__file__', None)
        if filename is None:
            return None
        parsed = self.of(filename, vars(module))
        if parsed is None or cls.__qualname__ not in parsed.classes:
            return None
        return parsed.classes[cls.__qualname__], parsed
