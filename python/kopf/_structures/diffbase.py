"""Where the last handled state of an object (its "essence") is kept, to see what changed.

Choose one in ``settings.persistence.diffbase_storage``. As with progress
storages, the built-in ones run natively in the engine and anything else is
called as Python code.
"""

from __future__ import annotations

import abc
import copy
import json
from collections.abc import Collection, Iterable
from typing import Any, cast

from kopf._structures import conventions as conventions
from kopf._structures.structs import Body, BodyEssence, FieldSpec, Patch


def _paths(fields: Iterable[FieldSpec] | None) -> list[tuple[str, ...]]:
    return [tuple(f.split('.')) if isinstance(f, str) else tuple(f) for f in fields or []]


class DiffBaseStorage(conventions.StorageKeyMarkingConvention,
                      conventions.StorageStanzaCleaner,
                      metaclass=abc.ABCMeta):
    """The interface of diff-base storages, and how an essence is built from a body.

    The essence is the body without its identity and system fields: no
    ``apiVersion``, ``kind``, ``metadata`` or ``status``, except the labels and
    the annotations (but not ``kubectl``'s last applied configuration, nor any
    Kopf-based operator's own annotations), plus the fields handlers watch
    explicitly, minus the ``ignored_fields``.
    """

    def __init__(self, ignored_fields: Iterable[FieldSpec] | None = None) -> None:
        super().__init__()
        self.ignored_fields = list(ignored_fields or [])

    def build(self, *, body: Body, extra_fields: Iterable[FieldSpec] | None = None) -> BodyEssence:
        """The essence of the object: what a change is judged by (its spec, labels, annotations
        other than the engine's own and kubectl's, ``extra_fields``), less ``ignored_fields``."""
        essence: dict[str, Any] = {key: copy.deepcopy(value) for key, value in body.items()
                                   if key not in ('apiVersion', 'kind', 'metadata', 'status')}
        conventions.cherrypick(body, essence, [('metadata', 'labels'), ('metadata', 'annotations')])
        annotations = essence.get('metadata', {}).get('annotations', {})
        ignored_prefixes = self._detect_marked_prefixes(annotations)
        for key in list(annotations):
            if key == 'kubectl.kubernetes.io/last-applied-configuration' or \
                    any(key.startswith(f'{prefix}/') for prefix in ignored_prefixes):
                del annotations[key]
        conventions.cherrypick(body, essence, _paths(extra_fields))
        self.remove_empty_stanzas(essence)
        for path in _paths(self.ignored_fields):
            conventions.remove(essence, path)
        return essence

    # The interface: every storage implements these (the base class cannot be instantiated).

    @abc.abstractmethod
    def fetch(self, *, body: Body) -> BodyEssence | None:
        """The last handled essence stored in this body, if any."""
        raise NotImplementedError

    @abc.abstractmethod
    def store(self, *, body: Body, patch: Patch, essence: BodyEssence) -> None:
        """Put the essence into the patch."""
        raise NotImplementedError

    def _ignored_for_engine(self) -> list[list[str]]:
        return [list(path) for path in _paths(self.ignored_fields)]


class AnnotationsDiffBaseStorage(conventions.StorageKeyFormingConvention, DiffBaseStorage):
    """The essence as compact JSON plus a newline in ``<prefix>/last-handled-configuration``
    (the newline makes ``kubectl`` show it unwrapped, as its own last-applied annotation)."""

    def __init__(
            self,
            *,
            prefix: str = 'kopf.zalando.org',
            key: str = 'last-handled-configuration',
            ignored_fields: Iterable[FieldSpec] | None = None,
            v1: bool = True,
    ) -> None:
        super().__init__(prefix=prefix, v1=v1, ignored_fields=ignored_fields)
        self.key = key

    def build(self, *, body: Body, extra_fields: Iterable[FieldSpec] | None = None) -> BodyEssence:
        essence = super().build(body=body, extra_fields=extra_fields)
        self.remove_annotations(essence, set(self.make_keys(self.key, body=body)))
        self.remove_empty_stanzas(essence)
        return essence

    def fetch(self, *, body: Body) -> BodyEssence | None:
        for full_key in self.make_keys(self.key, body=body):
            encoded = body.metadata.annotations.get(full_key)
            decoded = json.loads(encoded) if encoded is not None else None
            if decoded is not None:
                return cast(BodyEssence, decoded)
        return None

    def store(self, *, body: Body, patch: Patch, essence: BodyEssence) -> None:
        encoded = json.dumps(essence, separators=(',', ':')) + '\n'
        for full_key in self.make_keys(self.key, body=body):
            patch.metadata.annotations[full_key] = encoded
        self._store_marker(prefix=self.prefix, patch=patch, body=body)

    def _for_engine(self) -> dict[str, Any]:
        return {'kind': 'annotations', 'prefix': self.prefix, 'key': self.key, 'v1': bool(self.v1),
                'ignored_fields': self._ignored_for_engine()}


class StatusDiffBaseStorage(conventions.StatusFieldConvention, DiffBaseStorage):
    """The essence as a compact JSON string in ``status.<name>.last-handled-configuration``."""

    def __init__(
            self,
            *,
            name: str = 'kopf',
            field: FieldSpec = 'status.{name}.last-handled-configuration',
            ignored_fields: Iterable[FieldSpec] | None = None,
    ) -> None:
        super().__init__(ignored_fields=ignored_fields)
        self._name = name
        self._field = conventions.field_path(field, name=name)

    def build(self, *, body: Body, extra_fields: Iterable[FieldSpec] | None = None) -> BodyEssence:
        essence = super().build(body=body, extra_fields=extra_fields)
        conventions.remove(cast(dict[str, Any], essence), self.field)
        return essence

    def fetch(self, *, body: Body) -> BodyEssence | None:
        encoded = conventions.resolve(body, self.field)
        return cast(BodyEssence, json.loads(encoded)) if encoded is not None else None

    def store(self, *, body: Body, patch: Patch, essence: BodyEssence) -> None:
        conventions.ensure(patch, self.field, json.dumps(essence, separators=(',', ':')))

    def _for_engine(self) -> dict[str, Any]:
        return {'kind': 'status', 'field': list(self.field), 'ignored_fields': self._ignored_for_engine()}


class MultiDiffBaseStorage(DiffBaseStorage):
    """Several storages: read from the first that has an essence, written to all; each
    one also removes its own fields from the essence."""

    def __init__(self, storages: Collection[DiffBaseStorage]) -> None:
        super().__init__()
        self.storages = storages

    def build(self, *, body: Body, extra_fields: Iterable[FieldSpec] | None = None) -> BodyEssence:
        essence = super().build(body=body, extra_fields=extra_fields)
        for storage in self.storages:
            essence = storage.build(body=Body(essence), extra_fields=extra_fields)
        return essence

    def fetch(self, *, body: Body) -> BodyEssence | None:
        for storage in self.storages:
            essence = storage.fetch(body=body)
            if essence is not None:
                return essence
        return None

    def store(self, *, body: Body, patch: Patch, essence: BodyEssence) -> None:
        for storage in self.storages:
            storage.store(body=body, patch=patch, essence=essence)


def for_engine(storage: Any, customs: list[Any]) -> dict[str, Any]:
    """Describe a storage for the engine; the ones it cannot run natively go to ``customs``."""
    if conventions.is_pristine(storage, MultiDiffBaseStorage):
        return {'kind': 'multi', 'storages': [for_engine(s, customs) for s in storage.storages],
                'ignored_fields': storage._ignored_for_engine()}
    for cls in (AnnotationsDiffBaseStorage, StatusDiffBaseStorage):
        if conventions.is_pristine(storage, cls):
            return cast(dict[str, Any], storage._for_engine())
    customs.append(storage)
    return {'kind': 'custom', 'index': len(customs) - 1}
