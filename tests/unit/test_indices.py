"""`kopf.Index` and `kopf.Store` as handlers read them, over a stand-in for the core's index;
and the table of the objects that the core keeps by number (no cluster needed)."""

from __future__ import annotations

from typing import Any

import kopf
import pytest
from kopf._engine import Operator
from kopf._structures import indices as _indices


class FakeView:
    """What `kopf._engine.IndexView` answers, from a dict of keys to lists of values."""

    def __init__(self, data: dict[Any, list[Any]]) -> None:
        self.data = data

    def __len__(self) -> int:
        return len(self.data)

    def keys(self) -> list[Any]:
        return list(self.data)

    def contains(self, key: Any) -> bool:
        return key in self.data

    def values(self, key: Any) -> list[Any] | None:
        return list(self.data[key]) if key in self.data else None

    def items(self) -> list[tuple[Any, list[Any]]]:
        return [(key, list(values)) for key, values in self.data.items()]

    def count(self, key: Any) -> int:
        return len(self.data.get(key, []))


def test_an_index_is_a_read_only_mapping_of_stores() -> None:
    view = FakeView({("ns", "a"): [True], "k": [1, 2]})
    index: kopf.Index[Any, Any] = kopf.Index(view)
    assert len(index) == 2 and bool(index)
    assert list(index) == [("ns", "a"), "k"]
    assert ("ns", "a") in index and "zzz" not in index
    assert list(index["k"]) == [1, 2] and len(index["k"]) == 2 and 2 in index["k"] and 3 not in index["k"]
    assert index.get("zzz") is None
    with pytest.raises(KeyError):
        index["zzz"]
    assert repr(index) == "{('ns', 'a'): [True], 'k': [1, 2]}"
    assert isinstance(index["k"], kopf.Store)
    assert not hasattr(index, "__setitem__") and not hasattr(index["k"], "append")


def test_equality_as_in_kopf() -> None:
    view = FakeView({"k": [1, 2]})
    index: kopf.Index[Any, Any] = kopf.Index(view)
    assert index == index and index["k"] == index["k"] and len({index["k"], index["k"]}) == 1
    assert index["k"] != [1, 2]  # a store is not its values
    assert index != kopf.Index(FakeView({"k": [1, 2]}))  # nor is another index's store
    assert kopf.Index(FakeView({})) == {}


def test_an_empty_index_is_falsy() -> None:
    index: kopf.Index[Any, Any] = kopf.Index(FakeView({}))
    assert not index and len(index) == 0 and repr(index) == "{}"


def test_stores_read_the_index_as_it_is_now() -> None:
    view = FakeView({"k": [1]})
    index: kopf.Index[Any, Any] = kopf.Index(view)
    store = index["k"]
    view.data["k"].append(2)
    assert list(store) == [1]  # the first read: the values as they were when it was taken
    assert list(store) == [1, 2]  # then, as they are now
    del view.data["k"]
    assert not store and len(store) == 0 and list(store) == []


def test_keys_leaving_while_iterating_raise_nothing() -> None:
    view = FakeView({"a": [1], "b": [2]})
    index: kopf.Index[Any, Any] = kopf.Index(view)
    seen = []
    for key, store in index.items():  # one read of the whole index
        view.data.clear()  # the core removed them all meanwhile
        seen.append((key, list(store)))
    assert seen == [("a", [1]), ("b", [2])]
    assert "a" not in index and list(store) == []  # a store's later reads are live
    assert [list(store) for store in kopf.Index(FakeView({"a": [1]})).values()] == [[1]]


def test_equal_hashable_objects_share_a_number_until_released() -> None:
    key = ("operator's", "own", object())
    first = _indices.keep(key)
    second = _indices.keep(key)
    assert first == second and _indices.lookup(key) == first and _indices.get(first) is key
    _indices.release(first)
    assert _indices.lookup(key) == first  # one reference is left
    _indices.release(first)
    assert _indices.lookup(key) is None


def test_unhashable_objects_are_kept_apart_and_never_found() -> None:
    value = [object()]
    first, second = _indices.keep(value), _indices.keep(value)
    assert first != second and _indices.get(first) is value
    _indices.release(first)
    _indices.release(second)
    with pytest.raises(KeyError):
        _indices.get(first)


def test_views_come_back_as_the_classes_they_were() -> None:
    body = _indices.view("Body", {"metadata": {"name": "a"}, "spec": {"x": 1}})
    assert isinstance(body, kopf.Body) and body.meta.name == "a" and body.spec["x"] == 1
    meta = _indices.view("Meta", {"name": "a", "labels": {"l": "v"}})
    assert isinstance(meta, kopf.Meta) and meta.name == "a" and dict(meta.labels) == {"l": "v"}
    assert isinstance(_indices.view("Labels", {"l": "v"}), kopf.Labels)


def test_the_cores_indices_are_empty_until_the_operator_fills_them() -> None:
    index: kopf.Index[Any, Any] = kopf.Index(Operator().index("by_name"))
    assert len(index) == 0 and list(index) == [] and "x" not in index and index.get(("a", 1)) is None
    with pytest.raises(TypeError):
        ["unhashable"] in index  # noqa: B015 -- as a dict would
