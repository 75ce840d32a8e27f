"""The data structures handlers receive: bodies and their parts, patches, diffs, memos."""

from __future__ import annotations

import collections.abc
import enum
from collections.abc import Callable, Iterator, Mapping, MutableMapping
from typing import Any, Literal, NamedTuple, NewType, TypedDict, cast

RawBody = MutableMapping[str, Any]
BodyEssence = Mapping[str, Any]
RawEventType = Literal[None, 'ADDED', 'MODIFIED', 'DELETED']
FieldPath = tuple[str, ...]
FieldSpec = str | FieldPath | list[str]
HandlerId = NewType('HandlerId', str)
PatchFn = Callable[[RawBody], None]


class RawEvent(TypedDict, total=True):
    type: str | None
    object: RawBody


class ObjectReference(TypedDict, total=False):
    apiVersion: str
    kind: str
    namespace: str | None
    name: str
    uid: str


class OwnerReference(TypedDict, total=False):
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

    def _resolve(self) -> Mapping[str, Any]:
        current: Any = self._src
        for key in self._path:
            current = current.get(key) if isinstance(current, Mapping) else None
            if current is None:
                return {}
        return current if isinstance(current, Mapping) else {}

    def __getitem__(self, key: str) -> Any:
        return self._resolve()[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._resolve())

    def __len__(self) -> int:
        return len(self._resolve())

    def __repr__(self) -> str:
        return repr(dict(self._resolve()))


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


class Labels(MappingView):
    pass


class Annotations(MappingView):
    pass


class Spec(MappingView):
    pass


class Status(MappingView):
    pass


class Meta(MappingView):
    """``metadata`` of a body, with shortcuts to its common fields."""

    def __init__(self, src: Mapping[str, Any]) -> None:
        super().__init__(src, 'metadata')
        self._labels = Labels(src, 'metadata', 'labels')
        self._annotations = Annotations(src, 'metadata', 'annotations')

    @property
    def labels(self) -> Labels:
        return self._labels

    @property
    def annotations(self) -> Annotations:
        return self._annotations

    @property
    def uid(self) -> str | None:
        return self.get('uid')

    @property
    def name(self) -> str | None:
        return self.get('name')

    @property
    def namespace(self) -> str | None:
        return self.get('namespace')

    @property
    def creation_timestamp(self) -> str | None:
        return self.get('creationTimestamp')

    @property
    def deletion_timestamp(self) -> str | None:
        return self.get('deletionTimestamp')


class Body(MappingView):
    """A whole object as handlers see it: read-only, with ``.spec``, ``.meta``, ``.status``."""

    def __init__(self, src: Mapping[str, Any]) -> None:
        super().__init__(src)
        self._meta = Meta(src)
        self._spec = Spec(src, 'spec')
        self._status = Status(src, 'status')

    @property
    def metadata(self) -> Meta:
        return self._meta

    @property
    def meta(self) -> Meta:
        return self._meta

    @property
    def spec(self) -> Spec:
        return self._spec

    @property
    def status(self) -> Status:
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
    """A JSON merge-patch that handlers fill: ``None`` values delete fields."""

    def __init__(self, src: Mapping[str, Any] | None = None, /, body: Body | None = None) -> None:
        super().__init__(src or {})
        self._meta = MetaPatch(self)
        self._spec = MutableMappingView(self, 'spec')
        self._status = MutableMappingView(self, 'status')
        self._original = body

    @property
    def metadata(self) -> MetaPatch:
        return self._meta

    @property
    def meta(self) -> MetaPatch:
        return self._meta

    @property
    def spec(self) -> MutableMappingView:
        return self._spec

    @property
    def status(self) -> MutableMappingView:
        return self._status

    def __repr__(self) -> str:
        return f'{type(self).__name__}({dict(self)!r})' if self else f'{type(self).__name__}()'


class DiffOperation(enum.StrEnum):
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
