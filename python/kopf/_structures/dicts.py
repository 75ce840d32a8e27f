"""Fields of nested dicts, by paths like ``spec.x`` (Kopf's ``kopf._cogs.structs.dicts`` re-exports them)."""

from __future__ import annotations

import collections.abc
import enum
from collections.abc import Callable, Iterable, Iterator, Mapping, MutableMapping
from typing import Any

from kopf._structures import structs as _structs
from kopf._structures.structs import FieldPath, FieldSpec

__all__ = ['FieldPath', 'FieldSpec', 'MappingView', 'MutableMappingView', 'cherrypick', 'ensure',
           'parse_field', 'remove', 'resolve', 'resolve_obj', 'walk']


class _UNSET(enum.Enum):
    token = enum.auto()


def plain(value: Any) -> Any:
    """JSON-like data as plain dicts and lists: the handlers' views (``Body``, ``Spec``, ...)
    copied into what a model validates, a patch holds, or JSON writes."""
    if isinstance(value, Mapping):
        return {key: plain(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [plain(item) for item in value]
    return value


def parse_field(field: str | collections.abc.Collection[str] | None) -> tuple[str, ...]:
    """A field's path as a tuple of keys: ``'spec.x'``, ``['spec', 'x']`` or ``None`` (no keys)."""
    if field is None:
        return ()
    if isinstance(field, str):
        return tuple(field.split('.')) if field else ()
    return tuple(field)


def resolve(d: Mapping[Any, Any] | None, field: FieldSpec | None, default: Any = _UNSET.token) -> Any:
    """The value at the field's path. Without a default, an absent key raises ``KeyError``
    and a value that is not a mapping on the way raises ``TypeError``; with a default, both
    give the default (corrupted structures are then read as absent)."""
    value: Any = d
    for key in parse_field(field):
        if not isinstance(value, Mapping):
            if default is _UNSET.token:
                raise TypeError(f"The structure is not a dict with field {key!r}: {value!r}")
            return default
        if key not in value:
            if default is _UNSET.token:
                raise KeyError(key)
            return default
        value = value[key]
    return value


def resolve_obj(d: Any, field: FieldSpec | None, default: Any = _UNSET.token) -> Any:
    """The same for a mix of mappings and objects with attributes (API clients' models: a
    model's attribute is found by its name in the API when it has an ``attribute_map``)."""
    value = d
    for key in parse_field(field):
        if isinstance(value, Mapping):
            if key in value:
                value = value[key]
                continue
        elif isinstance(value, (tuple, list, set, frozenset, str, bytes)):
            if default is _UNSET.token:
                raise TypeError(f"The structure has no field {key!r}: {value!r}")
            return default
        else:
            names = getattr(value, 'attribute_map', None) or {}
            attribute = next((name for name, api_name in names.items() if api_name == key), key)
            if hasattr(value, attribute):
                value = getattr(value, attribute)
                continue
        if default is _UNSET.token:
            raise KeyError(key) if isinstance(value, Mapping) else AttributeError(key)
        return default
    return value


def ensure(d: MutableMapping[Any, Any], field: FieldSpec | None, value: Any) -> None:
    """Set the field's value, creating the missing parents as empty dicts."""
    path = parse_field(field)
    if not path:
        raise ValueError("Setting a root of a dict is impossible. Provide the specific fields.")
    parent = d
    for key in path[:-1]:
        if key not in parent:
            parent[key] = {}
        parent = parent[key]
    parent[path[-1]] = value


def remove(d: MutableMapping[Any, Any], field: FieldSpec | None) -> None:
    """Remove the field if present, and the parents that it leaves empty."""
    path = parse_field(field)
    if not path:
        raise ValueError("Removing a root of a dict is impossible. Provide a specific field.")
    head, rest = path[0], path[1:]
    if head not in d:
        return
    if not rest:
        del d[head]
        return
    child = d[head]
    if isinstance(child, MutableMapping):
        remove(child, rest)
        if child == {}:
            del d[head]


def cherrypick(src: Mapping[Any, Any], dst: MutableMapping[Any, Any], fields: Iterable[FieldSpec] | None,
               picker: Callable[[Any], Any] | None = None) -> None:
    """Copy these fields (those present) from one dict to another, through the picker if any."""
    absent = object()
    for field in fields or ():
        value = resolve(src, field, absent)
        if value is not absent:
            ensure(dst, field, picker(value) if picker is not None else value)


def walk(objs: Any, *, nested: Iterable[FieldSpec] | None = None) -> Iterator[Any]:
    """The objects of a possibly nested iterable, flattened (mappings count as objects, not as
    iterables), each followed by its ``nested`` fields that exist."""
    if objs is None:
        return
    if hasattr(objs, 'obj') and isinstance(objs.obj, Mapping) and hasattr(objs, 'api'):
        yield from walk(objs.obj, nested=nested)  # a pykube object: its dict
    elif isinstance(objs, Mapping) or hasattr(objs, 'attribute_map'):
        yield objs
        read = resolve if isinstance(objs, Mapping) else resolve_obj
        absent = object()
        for field in nested or ():
            value = read(objs, field, absent)
            if value is not absent:
                yield value
    elif isinstance(objs, collections.abc.Iterable) and not isinstance(objs, (str, bytes)):
        for obj in objs:
            yield from walk(obj, nested=nested)
    else:
        yield objs


class MappingView(_structs.MappingView):
    """A live, read-only view of a sub-dict (which may appear later) of a source mapping."""

    def __init__(self, src: Mapping[str, Any], path: FieldSpec | None = None) -> None:
        super().__init__(src, *parse_field(path))


class MutableMappingView(_structs.MutableMappingView):
    """A live view of a sub-dict that is created on the first write."""

    def __init__(self, src: MutableMapping[str, Any], path: FieldSpec | None = None) -> None:
        super().__init__(src, *parse_field(path))
