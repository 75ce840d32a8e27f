"""The data structures handlers receive: bodies and their parts, patches, diffs, memos."""

from __future__ import annotations

import collections.abc
import copy
import enum
import functools
from collections.abc import Callable, Iterable, Iterator, Mapping, MutableMapping
from typing import Any, Literal, NamedTuple, NewType, Self, TypedDict, cast

RawBody = MutableMapping[str, Any]
"""An object as the API sends it: a mapping of its fields, not wrapped in views."""
BodyEssence = Mapping[str, Any]
"""What of an object a change is judged by (its spec, labels, annotations; not the engine's own)."""
RawEventType = Literal[None, 'ADDED', 'MODIFIED', 'DELETED']
"""A watch event's type; ``None`` for an object of the initial listing."""
FieldPath = tuple[str, ...]
"""A field's place in an object, key by key: ``('spec', 'replicas')``."""
FieldSpec = str | FieldPath | list[str]
"""A field as the decorators take it: dotted (``'spec.replicas'``) or key by key."""
HandlerId = NewType('HandlerId', str)
"""A handler's id: its function's name or ``id=``, with its parents' for sub-handlers."""
PatchFn = Callable[[RawBody], None]
"""A function that changes an object in place, as a JSON-patch is computed from (``Patch.fns``)."""


class RawEvent(TypedDict, total=True):
    """A watch event as the API sends it: its type and the object (``on.event``'s ``event``)."""
    type: str | None
    object: RawBody


class ObjectReference(TypedDict, total=False):
    """What names an object to another (an Event's ``involvedObject``)."""
    apiVersion: str
    kind: str
    namespace: str | None
    name: str
    uid: str


class OwnerReference(TypedDict, total=False):
    """An entry of ``metadata.ownerReferences``, as ``kopf.append_owner_reference`` writes it."""
    controller: bool
    blockOwnerDeletion: bool
    apiVersion: str
    kind: str
    name: str
    uid: str


class MappingView(Mapping[str, Any]):
    """A live, read-only view of a sub-dict (which may appear later) of a source mapping."""

    def __init__(self, src: Mapping[str, Any], *path: str) -> None:
        self._src = src
        self._path = path

    @classmethod
    def _at(cls, src: Mapping[str, Any], path: tuple[str, ...]) -> Self:
        """A view at a path tuple given whole: the usual paths are shared, not made per view."""
        view = cls.__new__(cls)
        view._src = src
        view._path = path
        return view

    def _resolve(self) -> Mapping[str, Any]:
        current: Any = self._src
        for key in self._path:
            current = current.get(key) if isinstance(current, Mapping) else None
            if current is None:
                return {}
        return current if isinstance(current, Mapping) else {}

    def __getitem__(self, key: str) -> Any:
        # A missing key is named as Kopf names it: the first one absent on the way, so that
        # `labels['app']` of an object without labels is KeyError('labels'). (A value on the
        # way that is not a mapping is Kopf's TypeError; here it is as absent: KeyError(key).)
        current: Any = self._src
        for step in self._path:
            if not isinstance(current, Mapping):
                raise KeyError(key)
            current = current[step]
        if not isinstance(current, Mapping):
            raise KeyError(key)
        return current[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._resolve())

    def __len__(self) -> int:
        return len(self._resolve())

    def __repr__(self) -> str:
        return repr(dict(self._resolve()))


class LazyRaw(Mapping[str, Any]):
    """A raw body, as a dict would hold it, converted from the core's body one top-level
    field at a time, when first read: most handlers read a field or two, or nothing.

    What is read is kept, so ``raw['spec'] is raw['spec']``, as with a dict. A daemon's live
    body is replaced whole when its object changes (``_replace``); fields read before stay as
    they were. Copies and pickles are plain dicts."""

    __slots__ = ('_state', '_named')

    def __init__(self, source: Any) -> None:
        # The source (`kopf._engine.CoreBody`), the fields read so far, the keys once known:
        # one attribute, so that a thread reading it never sees half of a replacement.
        self._state: tuple[Any, dict[str, Any], list[str] | None] = (source, {}, None)
        self._named: tuple[Any, Any] | None = None  # the source and its identity, once asked

    def _replace(self, source: Any) -> None:
        self._state = (source, {}, None)
        self._named = None  # nor is the old source kept for its identity (a daemon's body)

    def _source(self) -> Any:
        return self._state[0]

    def _keys(self) -> list[str]:
        source, fields, keys = self._state
        if keys is None:
            keys = source.keys()
            self._state = (source, fields, keys)
        return keys

    def identity(self) -> tuple[str | None, str | None, str | None, str | None, str | None]:
        """``(apiVersion, kind, name, uid, namespace)``, read without converting anything else
        (once per source: a call's kwargs and logger both ask, a timer's every time)."""
        source, named = self._state[0], self._named
        if named is None or named[0] is not source:
            named = self._named = (source, source.identity())
        return cast(tuple[Any, Any, Any, Any, Any], named[1])

    def __getitem__(self, key: str) -> Any:
        source, fields, _ = self._state
        try:
            return fields[key]
        except KeyError:
            pass
        if not isinstance(key, str):
            raise KeyError(key)
        value = fields[key] = source.item(key)
        return value

    def __contains__(self, key: object) -> bool:
        return key in self._state[1] or key in self._keys()

    def __iter__(self) -> Iterator[str]:
        return iter(self._keys())

    def __len__(self) -> int:
        return len(self._keys())

    def __repr__(self) -> str:
        return repr(dict(self))

    def __reduce__(self) -> tuple[Any, ...]:
        return dict, (dict(self),)


class MutableMappingView(MappingView, MutableMapping[str, Any]):
    """A live view that creates its sub-dict on the first write."""

    def _ensure(self) -> MutableMapping[str, Any]:
        current = cast(MutableMapping[str, Any], self._src)  # a mutable view of a mutable source
        for key in self._path:
            if not isinstance(current.get(key), MutableMapping):
                current[key] = {}
            current = current[key]
        return current

    def __setitem__(self, key: str, value: Any) -> None:
        self._ensure()[key] = value

    def __delitem__(self, key: str) -> None:
        del self._ensure()[key]


# Views made without their `__init__` (see `Body._with_views`).
_new = object.__new__
# The views' usual paths, shared by all views (a tuple for each view was most of its size).
_METADATA = ('metadata',)
_LABELS = ('metadata', 'labels')
_ANNOTATIONS = ('metadata', 'annotations')
_SPEC = ('spec',)
_STATUS = ('status',)


class Labels(MappingView):
    """``metadata.labels`` of an object, read-only and live (the ``labels`` kwarg)."""


class Annotations(MappingView):
    """``metadata.annotations`` of an object, read-only and live (the ``annotations`` kwarg)."""


class Spec(MappingView):
    """``spec`` of an object, read-only and live (the ``spec`` kwarg)."""


class Status(MappingView):
    """``status`` of an object, read-only and live (the ``status`` kwarg)."""


class Meta(MappingView):
    """``metadata`` of a body, with shortcuts to its common fields."""

    def __init__(self, src: Mapping[str, Any]) -> None:
        self._src = src
        self._path = _METADATA
        # Made when first read (and then always the same): a daemon or timer keeps its views
        # for as long as it runs, and most handlers never look at these two.
        self._labels: Labels | None = None
        self._annotations: Annotations | None = None

    @property
    def labels(self) -> Labels:
        """``metadata.labels``, as a live view."""
        labels = self._labels
        if labels is None:
            labels = self._labels = Labels._at(self._src, _LABELS)
        return labels

    @property
    def annotations(self) -> Annotations:
        """``metadata.annotations``, as a live view."""
        annotations = self._annotations
        if annotations is None:
            annotations = self._annotations = Annotations._at(self._src, _ANNOTATIONS)
        return annotations

    @property
    def uid(self) -> str | None:
        """``metadata.uid``, or ``None``."""
        return self.get('uid')

    @property
    def name(self) -> str | None:
        """``metadata.name``, or ``None``."""
        return self.get('name')

    @property
    def namespace(self) -> str | None:
        """``metadata.namespace``; ``None`` for a cluster-scoped object."""
        return self.get('namespace')

    @property
    def creation_timestamp(self) -> str | None:
        """``metadata.creationTimestamp`` as the API wrote it (text), or ``None``."""
        return self.get('creationTimestamp')

    @property
    def deletion_timestamp(self) -> str | None:
        """``metadata.deletionTimestamp`` (text): set once the object is being deleted."""
        return self.get('deletionTimestamp')


class Body(MappingView):
    """A whole object as handlers see it: read-only, with ``.spec``, ``.meta``, ``.status``."""

    def __init__(self, src: Mapping[str, Any]) -> None:
        super().__init__(src)
        self._meta = Meta(src)
        self._spec = Spec._at(src, _SPEC)
        self._status = Status._at(src, _STATUS)

    @classmethod
    def _with_views(cls, src: Mapping[str, Any]) -> Body:
        """A body with all its views made at once, as a handler's kwargs hold them all:
        attributes set on new objects, not each view's ``__init__`` called (half the cost
        of making them, which every handler call pays)."""
        body = _new(cls)
        body._src, body._path = src, ()
        meta = body._meta = _new(Meta)
        meta._src, meta._path = src, _METADATA
        labels = meta._labels = _new(Labels)
        labels._src, labels._path = src, _LABELS
        annotations = meta._annotations = _new(Annotations)
        annotations._src, annotations._path = src, _ANNOTATIONS
        spec = body._spec = _new(Spec)
        spec._src, spec._path = src, _SPEC
        status = body._status = _new(Status)
        status._src, status._path = src, _STATUS
        return body

    @property
    def metadata(self) -> Meta:
        """``metadata``, as a live view with shortcuts (the same as ``meta``)."""
        return self._meta

    @property
    def meta(self) -> Meta:
        """``metadata``, as a live view with shortcuts."""
        return self._meta

    @property
    def spec(self) -> Spec:
        """``spec``, as a live read-only view."""
        return self._spec

    @property
    def status(self) -> Status:
        """``status``, as a live read-only view."""
        return self._status


class MetaPatch(MutableMappingView):
    def __init__(self, src: MutableMapping[str, Any]) -> None:
        super().__init__(src, 'metadata')
        self._labels = MutableMappingView(src, 'metadata', 'labels')
        self._annotations = MutableMappingView(src, 'metadata', 'annotations')

    @property
    def labels(self) -> MutableMappingView:
        return self._labels

    @property
    def annotations(self) -> MutableMappingView:
        return self._annotations


class Patch(dict[str, Any]):
    """A JSON merge-patch that handlers fill: ``None`` values delete fields. Functions in
    ``fns`` change a copy of the body in place, after the merge-patch, for what a merge-patch
    cannot say (e.g. one item of a list)."""

    def __init__(self, src: Mapping[str, Any] | None = None, /, body: Body | None = None,
                 fns: Iterable[PatchFn] = ()) -> None:
        # The views (`meta`, `spec`, `status`) are made when first used, and an empty patch
        # is made with as little as possible: most handlers never touch theirs, and a patch
        # is made for every call (timers: every second).
        if src:
            super().__init__(src)
        self._original = body
        self._fns: list[PatchFn] = ((src.fns if isinstance(src, Patch) else []) + list(fns)) if src or fns else []

    def __bool__(self) -> bool:
        return len(self) > 0 or bool(self._fns)

    def clear(self) -> None:
        super().clear()
        self._fns.clear()

    @property
    def fns(self) -> list[PatchFn]:
        """Functions to apply to the object in place, in order, with the patch (a JSON-patch is made of them)."""
        return self._fns

    @property
    def metadata(self) -> MetaPatch:
        """The patch's ``metadata``, for writing (the same as ``meta``)."""
        return self.meta

    @functools.cached_property
    def meta(self) -> MetaPatch:
        return MetaPatch(self)

    @functools.cached_property
    def spec(self) -> MutableMappingView:
        return MutableMappingView(self, 'spec')

    @functools.cached_property
    def status(self) -> MutableMappingView:
        return MutableMappingView(self, 'status')

    def __repr__(self) -> str:
        texts = ([dict.__repr__(self)] if len(self) else []) + ([f'fns={self._fns!r}'] if self._fns else [])
        return f'{type(self).__name__}({", ".join(texts)})'

    def _changed(self, body: Mapping[str, Any] | None) -> tuple[dict[str, Any], dict[str, Any]]:
        """The body as it is, and as it will be after the merge-patch and the functions."""
        base = body if body is not None else self._original
        if base is None:
            raise ValueError("Cannot build a JSON-patch without the original body as a reference.")
        as_is = copy.deepcopy(dict(base))
        to_be = _merged(copy.deepcopy(as_is), dict(self))
        for fn in self._fns:
            fn(to_be)
        return as_is, to_be

    def as_json_patch(self, body: Mapping[str, Any] | None = None) -> list[dict[str, Any]]:
        """The JSON-patch (RFC 6902) operations that make ``body`` (by default, the body
        the patch was made for) what the merge-patch and the functions make of it; no-ops
        (deleting what is absent, setting what is already there) leave no operation."""
        if not self:
            return []
        as_is, to_be = self._changed(body)
        return _json_patch_ops(as_is, to_be, '')

    def _as_merge_patch(self) -> dict[str, Any]:
        """What the engine sends: the merge-patch, with the functions' changes folded in as
        the merge-patch that makes the same of the body the handler saw."""
        if not self._fns:
            return dict(self)
        as_is, to_be = self._changed(None)
        return _merge_patch_between(as_is, to_be)


def _merged(body: dict[str, Any], patch: Mapping[str, Any]) -> dict[str, Any]:
    for key, value in patch.items():
        if value is None:
            body.pop(key, None)
        elif isinstance(value, Mapping):
            existing = body.get(key)
            body[key] = _merged(existing if isinstance(existing, dict) else {}, value)
        else:
            body[key] = copy.deepcopy(value)
    return body


def _json_patch_ops(old: Any, new: Any, path: str) -> list[dict[str, Any]]:
    if isinstance(old, dict) and isinstance(new, dict):
        ops: list[dict[str, Any]] = []
        for key in old:
            if key not in new:
                ops.append({'op': 'remove', 'path': f'{path}/{_pointer(key)}'})
        for key, value in new.items():
            if key not in old:
                ops.append({'op': 'add', 'path': f'{path}/{_pointer(key)}', 'value': value})
            else:
                ops.extend(_json_patch_ops(old[key], value, f'{path}/{_pointer(key)}'))
        return ops
    return [] if old == new else [{'op': 'replace', 'path': path, 'value': new}]


def _merge_patch_between(old: dict[str, Any], new: dict[str, Any]) -> dict[str, Any]:
    patch: dict[str, Any] = {key: None for key in old if key not in new}
    for key, value in new.items():
        if isinstance(value, dict) and isinstance(old.get(key), dict):
            if nested := _merge_patch_between(old[key], value):
                patch[key] = nested
        elif key not in old or old[key] != value:
            patch[key] = value
    return patch


def _pointer(key: str) -> str:
    return str(key).replace('~', '~0').replace('/', '~1')


class DiffOperation(enum.StrEnum):
    """What happened to a field in a change: added, changed, or removed."""
    ADD = 'add'
    CHANGE = 'change'
    REMOVE = 'remove'

    def __str__(self) -> str:
        return str(self.value)

    def __repr__(self) -> str:
        return repr(self.value)


class DiffItem(NamedTuple):
    operation: DiffOperation
    field: tuple[str, ...]
    old: Any
    new: Any

    def __repr__(self) -> str:
        return repr(tuple(self))

    @property
    def op(self) -> DiffOperation:
        """Whether the field was added, changed or removed."""
        return self.operation


class Diff(collections.abc.Sequence[DiffItem]):
    """A sequence of ``(op, field, old, new)`` items; lists are compared as whole values."""

    def __init__(self, items: collections.abc.Iterable[Any] = ()) -> None:
        self._items = tuple(DiffItem(DiffOperation(op), tuple(field), old, new) for op, field, old, new in items)

    def __getitem__(self, index: Any) -> Any:
        return self._items[index]

    def __len__(self) -> int:
        return len(self._items)

    def __iter__(self) -> Iterator[DiffItem]:
        return iter(self._items)

    def __eq__(self, other: object) -> bool:
        if isinstance(other, collections.abc.Sequence):
            return tuple(self) == tuple(other)
        return NotImplemented

    def __hash__(self) -> int:
        return hash(self._items)

    def __repr__(self) -> str:
        return repr(self._items)


class Memo(dict[Any, Any]):
    """A dict with attribute access: ``memo.counter += 1``. One per object, one per operator."""

    def __getattr__(self, key: str) -> Any:
        try:
            return self[key]
        except KeyError:
            raise AttributeError(f"Memo has no attribute {key!r}") from None

    def __setattr__(self, key: str, value: Any) -> None:
        self[key] = value

    def __delattr__(self, key: str) -> None:
        try:
            del self[key]
        except KeyError:
            raise AttributeError(f"Memo has no attribute {key!r}") from None


def build_object_reference(body: Mapping[str, Any]) -> ObjectReference:
    """A reference to an object, as Kubernetes Events need it (empty fields left out)."""
    meta = body.get('metadata', {})
    ref = {'apiVersion': body.get('apiVersion'), 'kind': body.get('kind'), 'name': meta.get('name'),
           'uid': meta.get('uid'), 'namespace': meta.get('namespace')}
    return cast(ObjectReference, {key: value for key, value in ref.items() if value})


def build_owner_reference(body: Mapping[str, Any], *, controller: bool | None = True,
                          block_owner_deletion: bool | None = True) -> OwnerReference:
    """An owner reference to the given object, for its children's ``ownerReferences``."""
    meta = body.get('metadata', {})
    ref = {'controller': controller, 'blockOwnerDeletion': block_owner_deletion,
           'apiVersion': body.get('apiVersion'), 'kind': body.get('kind'), 'name': meta.get('name'),
           'uid': meta.get('uid')}
    return cast(OwnerReference, {key: value for key, value in ref.items() if value is not None})
