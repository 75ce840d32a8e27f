"""In-memory indices (``@kopf.index``) as handlers read them.

The core keeps the indices: keys and values are stored there (see ``src/indices``) and
converted to Python on each read, so an index costs the operator no Python objects. What
the core cannot keep by value (instances of the operator's own classes, say) stays here,
in a table of opaque objects that the core refers to by number.
"""

from __future__ import annotations

import threading
from collections.abc import Collection, ItemsView, Iterator, Mapping, ValuesView
from typing import Any, Generic, TypeVar

from kopf._bridge.services import IndexView  # one index of the core, read as it is now
from kopf._structures import structs as _structs

_K = TypeVar('_K')
_V = TypeVar('_V')


class Store(Collection[_V], Generic[_V]):
    """The values of all objects indexed under one key of an index (read-only).

    It reads the index as it is: once the key has left the index, the store is empty.
    """

    def __init__(self, view: IndexView, key: Any, values: list[Any] | None = None) -> None:
        self._view = view
        self._key = key
        # The values as the index had them when this store was read from it: the first read
        # uses them (a scan of the index costs one call to the core), later reads are live.
        self._fetched = values

    def _values(self) -> list[Any]:
        fetched, self._fetched = self._fetched, None
        if fetched is not None:
            return fetched
        return self._view.values(self._key) or []

    def __repr__(self) -> str:
        return repr(self._values())

    def __bool__(self) -> bool:
        return len(self) > 0

    def __len__(self) -> int:
        if self._fetched is not None:
            return len(self._fetched)
        return self._view.count(self._key)

    def __iter__(self) -> Iterator[_V]:
        return iter(self._values())

    def __contains__(self, obj: object) -> bool:
        return any(value == obj for value in self._values())

    # Each read makes a new store object: equal if it is the same key's store, as Kopf's one
    # store object per key is equal to itself only (so an index equals itself, as in Kopf).
    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Store):
            return NotImplemented
        return other._view is self._view and other._key == self._key

    def __hash__(self) -> int:
        return hash((id(self._view), self._key))


class Index(Mapping[_K, Store[_V]], Generic[_K, _V]):
    """A read-only mapping of the keys that an indexing function has returned to the
    stores of values indexed under them; the handlers get it as a kwarg named by the
    index's id. The core fills it as the objects come and go, between any two reads."""

    def __init__(self, view: IndexView) -> None:
        self._view = view

    def __repr__(self) -> str:
        return repr(dict(self.items()))

    def __bool__(self) -> bool:
        return len(self._view) > 0

    def __len__(self) -> int:
        return len(self._view)

    def __iter__(self) -> Iterator[_K]:
        return iter(self._view.keys())

    def __getitem__(self, key: _K) -> Store[_V]:
        values = self._view.values(key)
        if values is None:
            raise KeyError(key)
        return Store(self._view, key, values)

    def __contains__(self, key: object) -> bool:
        return self._view.contains(key)

    # The core may remove a key between listing the keys and reading it: no KeyError then.
    def items(self) -> ItemsView[_K, Store[_V]]:
        return _Items(self)

    def values(self) -> ValuesView[Store[_V]]:
        return _Values(self)


class _Items(ItemsView[_K, Store[_V]]):
    _mapping: Index[_K, _V]

    def __iter__(self) -> Iterator[tuple[_K, Store[_V]]]:
        view = self._mapping._view
        for key, values in view.items():
            yield key, Store(view, key, values)


class _Values(ValuesView[Store[_V]]):
    _mapping: Index[Any, _V]

    def __iter__(self) -> Iterator[Store[_V]]:
        view = self._mapping._view
        for key, values in view.items():
            yield Store(view, key, values)


Indices = Mapping[str, Index[Any, Any]]
"""All indices of an operator, by their ids."""


# -- what the core cannot keep by value (called by the core, see src/binding/indices.rs) ---------

_VIEWS: dict[str, Any] = {
    'Body': _structs.Body,
    'Spec': _structs.Spec,
    'Status': _structs.Status,
    'Labels': _structs.Labels,
    'Annotations': _structs.Annotations,
    'Meta': lambda content: _structs.Meta({'metadata': content}),
}

_lock = threading.Lock()  # the core converts on the loop's thread and on its own threads
_objects: dict[int, Any] = {}  # the kept objects by their numbers
_counts: dict[int, int] = {}  # how many of the core's values refer to each number
_numbers: dict[Any, int] = {}  # equal hashable objects share a number: a key finds its values
_hashed: dict[int, bool] = {}  # which numbers are in `_numbers`
_last = 0  # 0 is never given out: a key that is not kept matches nothing


def keep(obj: Any) -> int:
    """Keep an object for the core; the same number for an equal hashable object."""
    global _last
    try:
        hash(obj)
    except TypeError:
        hashable = False
    else:
        hashable = True
    with _lock:
        number = _numbers.get(obj) if hashable else None
        if number is None:
            _last += 1
            number = _last
            _objects[number] = obj
            if hashable:
                _numbers[obj] = number
                _hashed[number] = True
        _counts[number] = _counts.get(number, 0) + 1
        return number


def lookup(key: Any) -> int | None:
    """The number of an object equal to this key, if one is kept."""
    with _lock:
        return _numbers.get(key)


def get(number: int) -> Any:
    return _objects[number]


def release(number: int) -> None:
    """One value of the core that referred to this object is gone."""
    with _lock:
        left = _counts.get(number, 0) - 1
        if left > 0:
            _counts[number] = left
            return
        _counts.pop(number, None)
        obj = _objects.pop(number, None)
        if _hashed.pop(number, False):
            del _numbers[obj]


def view(kind: str, content: dict[str, Any]) -> Any:
    """A body's view (``kopf.Body``, ``kopf.Spec``, ...) as it was indexed."""
    return _VIEWS[kind](content)
