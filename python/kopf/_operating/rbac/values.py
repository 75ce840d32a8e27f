"""The values that `introspecting` reasons about, without running the code: a live object of
the imported operator (a module, a class, a constant), an instance of a class, a method bound
to one, containers of such values, parts of the handled object's body, or nothing known.

An expression has a set of them (it may be one of several values): ``Values``."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from typing import Any


class Value:
    """One thing an expression may be."""


class _Opaque(Value):
    def __repr__(self) -> str:
        return 'OPAQUE'


OPAQUE = _Opaque()  # nothing is known of it
Values = frozenset[Value]
NOTHING: Values = frozenset({OPAQUE})
MOST = 16  # more possibilities than this: nothing is known


def plain(obj: Any) -> bool:
    if isinstance(obj, tuple):
        return all(plain(item) for item in obj)
    return obj is None or isinstance(obj, (str, bytes, int, float, bool))


@dataclasses.dataclass(frozen=True, eq=False)
class Live(Value):
    """An object of the imported operator or its libraries, as it is (compared by value for
    plain constants, by identity for the rest)."""
    obj: Any

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Live):
            return False
        if self.obj is other.obj:
            return True
        return plain(self.obj) and type(self.obj) is type(other.obj) and self.obj == other.obj

    def __hash__(self) -> int:
        return hash((type(self.obj), self.obj)) if plain(self.obj) else id(self.obj)


@dataclasses.dataclass(frozen=True)
class Instance(Value):
    """An instance of a class, made by the code (not a live one); `init`: the arguments its
    class's ``__init__`` (the operator's own) was called with, by parameter, where known."""
    cls: type
    init: tuple[tuple[str, Values], ...] = ()


@dataclasses.dataclass(frozen=True, eq=False)
class Method(Value):
    """A function of a class bound to a receiver (an instance, or the class for classmethods)."""
    receiver: Value
    fn: Any
    owner: type

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Method):
            return False
        return self.receiver == other.receiver and self.fn is other.fn and self.owner is other.owner

    def __hash__(self) -> int:
        return hash((self.receiver, id(self.fn), self.owner))


@dataclasses.dataclass(frozen=True)
class Seq(Value):
    """A tuple or list made by the code, item by item."""
    items: tuple[Values, ...]


@dataclasses.dataclass(frozen=True)
class Mapping(Value):
    """A dict made by the code, key by key."""
    keys: tuple[Values, ...]
    values: tuple[Values, ...]


@dataclasses.dataclass(frozen=True)
class Body(Value):
    """The handled object's body, or a part of it (``('metadata', 'namespace')``)."""
    path: tuple[str, ...]


OBJECT_NAMESPACE = Body(('metadata', 'namespace'))


@dataclasses.dataclass(frozen=True)
class Bound(Value):
    """A method of a value that is not a class instance: a container's or a body's
    (``.get``, ``.items``, ...)."""
    of: Value
    name: str


@dataclasses.dataclass(frozen=True)
class Client(Value):
    """Something that a client library module defines for itself (a query, an object of a
    resource it cannot name by a class); only that module reads its ``data``."""
    library: str
    what: str
    data: tuple[Any, ...]


def union(*many: Iterable[Value]) -> Values:
    found: set[Value] = set()
    for values in many:
        found.update(values)
    if len(found) > MOST:
        return NOTHING
    return frozenset(found) if found else NOTHING


def live(obj: Any) -> Values:
    return frozenset({Live(obj)})


def literals(values: Values) -> list[Any] | None:
    """The plain constants that these values are, if they are all such."""
    found = []
    for value in values:
        if not isinstance(value, Live) or not plain(value.obj):
            return None
        found.append(value.obj)
    return found


def strings(values: Values | None) -> list[str] | None:
    """The strings that these values are, if they all are."""
    if values is None:
        return None
    found = literals(values)
    if found is None or not all(isinstance(item, str) for item in found):
        return None
    return sorted(found)
