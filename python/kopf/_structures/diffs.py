"""What has changed between two states of a dict (Kopf's ``kopf._cogs.structs.diffs`` re-exports it).

The engine compares objects in its core; these are the same rules in Python, for the
operators that compare things themselves.
"""

from __future__ import annotations

import enum
from collections.abc import Iterator, Mapping
from typing import Any

from kopf._structures import dicts
from kopf._structures.structs import Diff, DiffItem, DiffOperation, FieldPath

__all__ = ['EMPTY', 'Diff', 'DiffItem', 'DiffOperation', 'DiffScope', 'diff', 'diff_iter', 'reduce', 'reduce_iter']


class DiffScope(enum.Flag):
    """Which side's fields count: the right one's (the new state), the left one's, or both."""
    RIGHT = enum.auto()
    LEFT = enum.auto()
    FULL = LEFT | RIGHT


def diff_iter(a: Any, b: Any, path: FieldPath = (), *, scope: DiffScope = DiffScope.FULL) -> Iterator[DiffItem]:
    """The differences from ``a`` to ``b`` as ``(op, field, old, new)``; lists and other values
    are compared as a whole, mappings key by key."""
    if a == b:
        return
    if a is None:
        yield DiffItem(DiffOperation.ADD, path, a, b)
    elif b is None:
        yield DiffItem(DiffOperation.REMOVE, path, a, b)
    elif isinstance(a, Mapping) and isinstance(b, Mapping):
        if DiffScope.RIGHT in scope:
            for key in b.keys() - a.keys():
                yield from diff_iter(None, b[key], path + (key,), scope=scope)
        if DiffScope.LEFT in scope:
            for key in a.keys() - b.keys():
                yield from diff_iter(a[key], None, path + (key,), scope=scope)
        for key in a.keys() & b.keys():
            yield from diff_iter(a[key], b[key], path + (key,), scope=scope)
    else:
        yield DiffItem(DiffOperation.CHANGE, path, a, b)


def diff(a: Any, b: Any, path: FieldPath = (), *, scope: DiffScope = DiffScope.FULL) -> Diff:
    return Diff(diff_iter(a, b, path, scope=scope))


def reduce_iter(d: Diff, path: FieldPath) -> Iterator[DiffItem]:
    """The diff as seen from a field: the items within it, relative to it; an item of a
    field's parent becomes the diff of the field's values inside the old and new ones."""
    path = tuple(path)
    for op, field, old, new in d:
        field = tuple(field)
        if field[:len(path)] == path:
            yield DiffItem(op, field[len(path):], old, new)
        elif path[:len(field)] == field:
            tail = path[len(field):]
            yield from diff_iter(dicts.resolve(old, tail, None), dicts.resolve(new, tail, None))


def reduce(d: Diff, path: FieldPath) -> Diff:
    return Diff(reduce_iter(d, path))


EMPTY = diff(None, None)
