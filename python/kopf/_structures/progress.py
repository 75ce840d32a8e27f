"""Where handlers' progress (retries, delays, what is done) is kept between cycles.

Choose one in ``settings.persistence.progress_storage``. The built-in storages
run natively in the engine; a subclass that overrides any method (or any other
``ProgressStorage``) is called from the engine as Python code. Records are
removed as soon as all handlers of a cause are done.
"""

from __future__ import annotations

import abc
import copy
import json
from collections.abc import Collection
from typing import Any, TypedDict, cast

from kopf._structures import conventions as conventions
from kopf._structures.structs import Body, BodyEssence, FieldSpec, HandlerId, Patch


class ProgressRecord(TypedDict, total=False):
    """The persisted state of one handler; timestamps are ISO 8601 strings in UTC."""
    started: str | None
    stopped: str | None
    delayed: str | None
    purpose: str | None
    retries: int | None
    success: bool | None
    failure: bool | None
    message: str | None
    subrefs: Collection[HandlerId] | None


class ProgressStorage(conventions.StorageStanzaCleaner, metaclass=abc.ABCMeta):
    """The interface of progress storages: one record per handler, independent of others.

    ``flush()`` is called after each batch of ``store()`` or ``purge()`` calls,
    for storages that keep records in memory and write them all at once.
    """

    # The interface: every storage implements these (the base class cannot be instantiated);
    # the built-in storages below do, and so must an operator's own.

    @abc.abstractmethod
    def fetch(self, *, key: HandlerId, body: Body) -> ProgressRecord | None:
        """The handler's record in this body, if any."""
        raise NotImplementedError

    @abc.abstractmethod
    def store(self, *, key: HandlerId, record: ProgressRecord, body: Body, patch: Patch) -> None:
        """Put the handler's record into the patch."""
        raise NotImplementedError

    @abc.abstractmethod
    def purge(self, *, key: HandlerId, body: Body, patch: Patch) -> None:
        """Remove the handler's record (via the patch), if the body has it."""
        raise NotImplementedError

    @abc.abstractmethod
    def touch(self, *, body: Body, patch: Patch, value: str | None) -> None:
        """Set (or, with ``None``, remove) a dummy field, so that a patch makes a new event."""
        raise NotImplementedError

    @abc.abstractmethod
    def clear(self, *, essence: BodyEssence) -> BodyEssence:
        """The essence without this storage's own fields (so that they do not count as a change)."""
        return copy.deepcopy(essence)

    def flush(self) -> None:
        """Write what is kept in memory, if anything (nothing for the storages of the objects)."""
        pass


def _purge_field(body: Body, patch: Patch, path: tuple[str, ...]) -> None:
    """Null the field in the patch if the object has it; else drop it from the patch."""
    absent = object()
    if conventions.resolve(body, path, absent) is not absent:
        conventions.ensure(patch, path, None)
    elif conventions.resolve(patch, path, absent) is not absent:
        conventions.remove(patch, path)


class AnnotationsProgressStorage(conventions.StorageKeyFormingConvention,
                                 conventions.StorageKeyMarkingConvention,
                                 ProgressStorage):
    """Records as compact JSON strings in annotations: ``<prefix>/<handler id>``."""

    def __init__(
            self,
            *,
            prefix: str = 'kopf.zalando.org',
            verbose: bool = False,
            touch_key: str = 'touch-dummy',
            v1: bool = True,
    ) -> None:
        super().__init__(prefix=prefix, v1=v1)
        self.verbose = verbose
        self.touch_key = touch_key

    def fetch(self, *, key: HandlerId, body: Body) -> ProgressRecord | None:
        for full_key in self.make_keys(key, body=body):
            encoded = conventions.resolve(body, ('metadata', 'annotations', full_key))
            decoded = json.loads(encoded) if encoded is not None else None
            if decoded is not None:
                return cast(ProgressRecord, decoded)
        return None

    def store(self, *, key: HandlerId, record: ProgressRecord, body: Body, patch: Patch) -> None:
        fields = {name: value for name, value in record.items() if self.verbose or value is not None}
        encoded = json.dumps(fields, separators=(',', ':'))
        for full_key in self.make_keys(key, body=body):
            conventions.ensure(patch, ('metadata', 'annotations', full_key), encoded)
        self._store_marker(prefix=self.prefix, patch=patch, body=body)

    def purge(self, *, key: HandlerId, body: Body, patch: Patch) -> None:
        for full_key in self.make_keys(key, body=body):
            _purge_field(body, patch, ('metadata', 'annotations', full_key))

    def touch(self, *, body: Body, patch: Patch, value: str | None) -> None:
        for full_key in self.make_keys(self.touch_key, body=body):
            path = ('metadata', 'annotations', full_key)
            if conventions.resolve(body, path) != value:  # absent and None are the same
                conventions.ensure(patch, path, value)
                self._store_marker(prefix=self.prefix, patch=patch, body=body)

    def clear(self, *, essence: BodyEssence) -> BodyEssence:
        essence = super().clear(essence=essence)
        annotations = essence.get('metadata', {}).get('annotations', {})
        self.remove_annotations(essence, {key for key in annotations if key.startswith(f'{self.prefix}/')})
        self.remove_empty_stanzas(essence)
        return essence

    def _for_engine(self) -> dict[str, Any]:
        return {'kind': 'annotations', 'prefix': self.prefix, 'verbose': bool(self.verbose),
                'touch_key': self.touch_key, 'v1': bool(self.v1)}


class StatusProgressStorage(conventions.StatusFieldConvention, ProgressStorage):
    """Records as nested dicts in the status: ``status.<name>.progress.<handler id>``.

    Strict CRD schemas prune unknown status fields, and built-in resources have
    fixed statuses: prefer annotations unless the schema allows this field.
    """

    def __init__(
            self,
            *,
            name: str = 'kopf',
            field: FieldSpec = 'status.{name}.progress',
            touch_field: FieldSpec = 'status.{name}.dummy',
    ) -> None:
        super().__init__()
        self._name = name
        self._field = conventions.field_path(field, name=name)
        self._touch_field = conventions.field_path(touch_field, name=name)

    @property
    def touch_field(self) -> tuple[str, ...]:
        """The status field that ``touch()`` sets to make the object change (a new event)."""
        return self._touch_field

    @touch_field.setter
    def touch_field(self, field: FieldSpec) -> None:
        self._touch_field = conventions.field_path(field, name=self._name)

    def fetch(self, *, key: HandlerId, body: Body) -> ProgressRecord | None:
        container = conventions.resolve(body, self.field, {})
        return cast(ProgressRecord | None, container.get(key))

    def store(self, *, key: HandlerId, record: ProgressRecord, body: Body, patch: Patch) -> None:
        conventions.ensure(patch, (*self.field, key), dict(record))  # the API drops the nulls

    def purge(self, *, key: HandlerId, body: Body, patch: Patch) -> None:
        _purge_field(body, patch, (*self.field, key))

    def touch(self, *, body: Body, patch: Patch, value: str | None) -> None:
        if conventions.resolve(body, self.touch_field) != value:
            conventions.ensure(patch, self.touch_field, value)

    def clear(self, *, essence: BodyEssence) -> BodyEssence:
        essence = super().clear(essence=essence)
        conventions.remove(cast(dict[str, Any], essence), self.field)
        self.remove_empty_stanzas(essence)
        return essence

    def _for_engine(self) -> dict[str, Any]:
        return {'kind': 'status', 'field': list(self.field), 'touch_field': list(self.touch_field),
                'writable': True}


class _ReadOnlyStatusProgressStorage(StatusProgressStorage):
    """The status records of older versions: read and purged, never written."""

    def store(self, *, key: HandlerId, record: ProgressRecord, body: Body, patch: Patch) -> None:
        pass

    def touch(self, *, body: Body, patch: Patch, value: str | None) -> None:
        pass

    def _for_engine(self) -> dict[str, Any]:
        return {**super()._for_engine(), 'writable': False}


class MultiProgressStorage(ProgressStorage):
    """Several storages: a record is read from the first that has it, written to all."""

    def __init__(self, storages: Collection[ProgressStorage]) -> None:
        super().__init__()
        self.storages = storages

    def fetch(self, *, key: HandlerId, body: Body) -> ProgressRecord | None:
        for storage in self.storages:
            record = storage.fetch(key=key, body=body)
            if record is not None:
                return record
        return None

    def store(self, *, key: HandlerId, record: ProgressRecord, body: Body, patch: Patch) -> None:
        for storage in self.storages:
            storage.store(key=key, record=record, body=body, patch=patch)

    def purge(self, *, key: HandlerId, body: Body, patch: Patch) -> None:
        for storage in self.storages:
            storage.purge(key=key, body=body, patch=patch)

    def touch(self, *, body: Body, patch: Patch, value: str | None) -> None:
        for storage in self.storages:
            storage.touch(body=body, patch=patch, value=value)

    def clear(self, *, essence: BodyEssence) -> BodyEssence:
        for storage in self.storages:
            essence = storage.clear(essence=essence)
        return essence

    def flush(self) -> None:
        for storage in self.storages:
            storage.flush()


class SmartProgressStorage(MultiProgressStorage):
    """The default: annotations; records in the status (where older versions kept them)
    are still read and purged, but no longer written."""

    def __init__(
            self,
            *,
            name: str = 'kopf',
            field: FieldSpec = 'status.{name}.progress',
            touch_key: str = 'touch-dummy',
            touch_field: FieldSpec = 'status.{name}.dummy',
            prefix: str = 'kopf.zalando.org',
            v1: bool = True,
            verbose: bool = False,
    ) -> None:
        super().__init__([
            AnnotationsProgressStorage(v1=v1, prefix=prefix, verbose=verbose, touch_key=touch_key),
            _ReadOnlyStatusProgressStorage(name=name, field=field, touch_field=touch_field),
        ])


_NATIVE: tuple[type[ProgressStorage], ...] = (
    _ReadOnlyStatusProgressStorage, StatusProgressStorage, AnnotationsProgressStorage)


def for_engine(storage: Any, customs: list[Any]) -> dict[str, Any]:
    """Describe a storage for the engine; the ones it cannot run natively go to ``customs``."""
    if conventions.is_pristine(storage, MultiProgressStorage):
        return {'kind': 'multi', 'storages': [for_engine(s, customs) for s in storage.storages]}
    for cls in _NATIVE:
        if conventions.is_pristine(storage, cls):
            return cast(dict[str, Any], storage._for_engine())
    customs.append(storage)
    return {'kind': 'custom', 'index': len(customs) - 1}
