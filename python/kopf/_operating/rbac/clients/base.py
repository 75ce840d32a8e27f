"""What a client library's module is given and gives back: a call as `introspecting` sees it
(its arguments' values, where it is), and the requests it finds in it."""

from __future__ import annotations

import ast
import dataclasses
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from kopf._operating.rbac.uses import (
    ALL,
    DEFAULT,
    OBJECT,
    UNKNOWN,
    Namespace,
    Scope,
    Site,
    Target,
    Unresolved,
    Use,
)
from kopf._operating.rbac.values import OBJECT_NAMESPACE, OPAQUE, Body, Instance, Live, Value, Values, strings


@dataclasses.dataclass
class CallSite:
    """A call: its arguments' values (positional, then by keyword), its expressions (for the
    messages), and where it is; what a library finds in it goes to ``found``."""
    site: Site
    args: list[Values]
    keywords: dict[str, Values]
    arg_nodes: list[ast.expr]
    keyword_nodes: dict[str, ast.expr]
    starred: bool  # *args or **kwargs at the call: the positions past them are not known
    found: Callable[[Use | Unresolved], None]
    handed: str | None = None  # the call is made later by what the function was handed to (its text)

    def arg(self, index: int | None, name: str | None = None) -> Values | None:
        """An argument's values, by its position or its keyword; None: not given (or not known)."""
        if name is not None and name in self.keywords:
            return self.keywords[name]
        if index is not None and index < len(self.args):
            return self.args[index]
        return None

    def given(self, index: int | None, name: str | None = None) -> bool:
        return self.arg(index, name) is not None or self.starred

    def text(self, index: int | None, name: str | None = None) -> str:
        node = self.keyword_nodes.get(name) if name is not None else None
        if node is None and index is not None and index < len(self.arg_nodes):
            node = self.arg_nodes[index]
        return ast.unparse(node) if node is not None else '?'

    def string(self, index: int | None, name: str | None = None) -> list[str] | None:
        """The literal strings an argument can be; None: not literal (or not given)."""
        return strings(self.arg(index, name))

    def namespaces(self, index: int | None, name: str | None = None,
                   everywhere: Iterable[Any] = ()) -> list[Namespace]:
        """Where a namespace argument points: named literally, the handled object's own, every
        namespace (``everywhere``: the library's markers for it), or not known."""
        values = self.arg(index, name)
        if values is None:
            # Not given; or by *args/**kwargs, or later (a partial): not seen here.
            return [Namespace(UNKNOWN.scope, text='not among the arguments seen here') if self.starred else DEFAULT]
        markers = list(everywhere)
        found: list[Namespace] = []
        for value in values:
            if isinstance(value, Live) and any(value.obj is marker or (isinstance(marker, str) and value.obj == marker)
                                               for marker in markers):
                found.append(ALL)
            elif isinstance(value, Live) and isinstance(value.obj, str):
                found.append(Namespace.literal(value.obj))
            elif isinstance(value, Live) and value.obj is None:
                found.append(DEFAULT)
            elif value == OBJECT_NAMESPACE:
                found.append(OBJECT)
            elif isinstance(value, Body):  # the object's spec, status, labels: what its users write
                found.append(Namespace(Scope.DATA, text=self.text(index, name)))
            else:
                found.append(Namespace(UNKNOWN.scope, text=self.text(index, name)))
        return sorted(set(found), key=str)

    def use(self, verbs: Sequence[str], target: Target, namespaces: Iterable[Namespace], via: str) -> None:
        via = f"{via} handed to {self.handed}" if self.handed is not None else via
        for namespace in namespaces:
            self.found(Use(tuple(verbs), target, namespace, via, self.site))

    def unresolved(self, text: str) -> None:
        self.found(Unresolved(self.site, text))

    def shifted(self, by: int) -> CallSite:
        """The same call without its first positional arguments (a request method given to
        another function, e.g. a watch's ``stream(api.list_..., namespace)``)."""
        return dataclasses.replace(self, args=self.args[by:], arg_nodes=self.arg_nodes[by:])


class Library:
    """How one client library makes requests; each method answers None where it does not know
    the value (another library, or the interpreter itself, then does)."""
    name = ''

    def owns(self, value: Value) -> bool:
        """Whether the value is one of the library's clients or objects (whose methods request)."""
        return False

    def attribute(self, value: Value, attr: str) -> Values | None:
        """An attribute with a meaning of the library's own (e.g. a query manager)."""
        return None

    def call(self, call: CallSite, callee: Value) -> Values | None:
        """A call of the library's: the requests it makes (into ``call``) and its result."""
        return None

    def reference(self, site: Site, value: Value) -> list[Use]:
        """A request method named without a call (kept in a table, handed to an executor)."""
        return []

    def iterate(self, value: Value, site: Site) -> tuple[Values, list[Use]] | None:
        """What iterating over the library's value gives, and the requests that makes."""
        return None

    def named(self, attr: str) -> Values | None:
        """A method known by its name alone, called on an object not known statically (a
        client kept in the memo, in a container, in an attribute set where it is not seen)."""
        return None


def receiver_class(value: Value) -> type | None:
    """The class of a method's receiver, or the class itself (for classmethods)."""
    if isinstance(value, Instance):
        return value.cls
    if isinstance(value, Live):
        return value.obj if isinstance(value.obj, type) else type(value.obj)
    return None


def mro_modules(cls: type) -> set[str]:
    return {getattr(base, '__module__', '') or '' for base in getattr(cls, '__mro__', ())}


__all__ = ['OPAQUE', 'CallSite', 'Library', 'mro_modules', 'receiver_class']
