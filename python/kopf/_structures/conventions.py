"""How storages name their annotations and keep out of each other's way.

The same rules run natively in the engine (``src/conventions.rs``); this module
serves custom storages that inherit from the built-in ones and call ``super()``.
"""

from __future__ import annotations

import base64
import copy
import hashlib
import warnings
from collections.abc import Collection, Iterable, Mapping, MutableMapping
from typing import Any

from kopf._structures.structs import Body, BodyEssence, Patch

# Kubernetes limits the name part of an annotation key to 63 characters, the whole key to 253.
_MAX_NAME_LENGTH = 63
_MAX_KEY_LENGTH = 253
_KNOWN_MARKERS = frozenset({'kopf-managed'})
_KNOWN_PREFIXES = frozenset({'kopf.zalando.org'})


class CollisionEvadingConvention:
    """Keys of ReplicaSets owned by Deployments get ``-ofDRS``: Kubernetes copies the
    Deployment's annotations down to its ReplicaSets, which must not share its state."""

    def mark_key(self, key: str, *, body: Body) -> str:
        owners = body.get('metadata', {}).get('ownerReferences', []) or []
        by_deployment = any(owner.get('kind') == 'Deployment' for owner in owners)
        return f'{key}-ofDRS' if body.get('kind') == 'ReplicaSet' and by_deployment else key


class StorageKeyFormingConvention(CollisionEvadingConvention):
    """Annotation keys of a prefixed storage, shortened by a hash where too long.

    V2 keys apply the 63-character limit to the name part only; V1 keys (kept
    while ``v1=True``, for rolling back to older versions) apply it to the
    whole key including the prefix. Both are written; the V2 key is read first.
    """

    def __init__(self, *args: Any, prefix: str, v1: bool, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.prefix = prefix
        self.v1 = v1
        if not self.prefix:
            raise ValueError("An annotations storage needs a non-empty prefix.")
        if len(self.prefix) > _MAX_KEY_LENGTH - _MAX_NAME_LENGTH - 1:
            warnings.warn(f"The prefix {self.prefix!r} is longer than 189 characters: "
                          "the API may refuse the annotation keys made with it.", stacklevel=3)

    def make_keys(self, key: str, *, body: Body | None = None) -> Iterable[str]:
        key = key if body is None else self.mark_key(key, body=body)
        v2_key = self.make_v2_key(key)
        v1_key = self.make_v1_key(key) if self.v1 else v2_key
        return [v2_key] if v1_key == v2_key else [v2_key, v1_key]

    @staticmethod
    def make_safe_key(key: str) -> str:
        return key.replace('/', '.').replace('<', '_').replace('>', '_')

    def make_v1_key(self, key: str, max_length: int = _MAX_NAME_LENGTH) -> str:
        safe_key = self.make_safe_key(key)
        prefix = f'{self.prefix}/' if self.prefix else ''
        room = max_length - len(prefix)
        suffix = '' if len(safe_key) <= room else self.make_suffix(safe_key)
        return f'{prefix}{safe_key[:max(0, room - len(suffix))]}{suffix}'

    def make_v2_key(self, key: str, max_length: int = _MAX_NAME_LENGTH) -> str:
        prefix = f'{self.prefix}/' if self.prefix else ''
        suffix = self.make_suffix(key) if len(key) > max_length else ''
        return f'{prefix}{self.make_safe_key(key)[:max(0, max_length - len(suffix))]}{suffix}'

    def make_suffix(self, key: str) -> str:
        digest = hashlib.blake2b(key.encode('utf-8'), digest_size=4).digest()
        encoded = base64.b64encode(digest, altchars=b'-.').decode('ascii')
        return f'-{encoded}'.rstrip('=-.')


class StorageKeyMarkingConvention:
    """Kopf-based operators brand their prefixes with ``<prefix>/kopf-managed``, so that
    others leave those annotations out of their diff bases (no ping-pong of changes)."""

    def _detect_marked_prefixes(self, keys: Collection[str]) -> Collection[str]:
        prefixes: set[str] = set()
        for prefix, name in (key.split('/', 1) for key in keys if '/' in key):
            known = prefix in _KNOWN_PREFIXES or any(prefix.endswith(f'.{p}') for p in _KNOWN_PREFIXES)
            if name in _KNOWN_MARKERS or known:
                prefixes.add(prefix)
        return frozenset(prefixes)

    def _store_marker(self, prefix: str, patch: Patch, body: Body) -> None:
        if prefix and not prefix.startswith('kopf.'):
            marker = f'{prefix}/kopf-managed'
            if marker not in body.metadata.annotations and marker not in patch.metadata.annotations:
                patch.metadata.annotations[marker] = 'yes'


class StorageStanzaCleaner:
    """Removal of a storage's own annotations and of the stanzas left empty."""

    @staticmethod
    def remove_annotations(essence: BodyEssence, keys_to_remove: Collection[str]) -> None:
        annotations = essence.get('metadata', {}).get('annotations', {})
        if set(keys_to_remove) & set(annotations):
            essence['metadata']['annotations'] = {
                key: value for key, value in annotations.items() if key not in keys_to_remove}

    @staticmethod
    def remove_empty_stanzas(essence: BodyEssence) -> None:
        raw: MutableMapping[str, Any] = essence  # type: ignore[assignment]
        metadata = raw.get('metadata')
        if isinstance(metadata, MutableMapping):
            for key in ('annotations', 'labels'):
                if key in metadata and not metadata[key]:
                    del metadata[key]
        for key in ('metadata', 'status'):
            if key in raw and not raw[key]:
                del raw[key]


class StatusFieldConvention:
    """A storage's field in the status, given as a spec with ``{name}`` in it (settable later)."""

    _name: str
    _field: tuple[str, ...]

    @property
    def field(self) -> tuple[str, ...]:
        return self._field

    @field.setter
    def field(self, field: str | Iterable[str]) -> None:
        self._field = field_path(field, name=self._name)


def is_pristine(storage: Any, cls: type) -> bool:
    """Whether the storage behaves exactly as the built-in ``cls`` (no methods overridden),
    so that the engine may run it natively instead of calling Python."""
    if not isinstance(storage, cls):
        return False
    names = (name for name in dir(cls) if not name.startswith('__') and callable(getattr(cls, name)))
    return all(getattr(type(storage), name, None) is getattr(cls, name) for name in names)


def field_path(field: str | Iterable[str], *, name: str) -> tuple[str, ...]:
    """A storage's field: a dotted string (with ``{name}`` filled in) or a sequence of keys."""
    if isinstance(field, str):
        field = field.format(name=name)
        return tuple(field.split('.')) if field else ()
    return tuple(field)


def resolve(src: Mapping[str, Any], path: Iterable[str], default: Any = None) -> Any:
    current: Any = src
    for key in path:
        if not isinstance(current, Mapping) or key not in current:
            return default
        current = current[key]
    return current


def ensure(dst: MutableMapping[str, Any], path: tuple[str, ...], value: Any) -> None:
    if not path:
        raise ValueError("Cannot set a value at the root of a mapping.")
    current: Any = dst
    for key in path[:-1]:
        if not isinstance(current.get(key), MutableMapping):
            current[key] = {}
        current = current[key]
    current[path[-1]] = value


def remove(dst: MutableMapping[str, Any], path: tuple[str, ...]) -> None:
    """Remove a field; then every parent on its path that is (or was already) empty."""
    if not path:
        raise ValueError("Cannot remove the root of a mapping.")
    head, rest = path[0], path[1:]
    if head not in dst:
        return
    if not rest:
        del dst[head]
    elif isinstance(dst[head], MutableMapping):
        remove(dst[head], rest)
        if dst[head] == {}:
            del dst[head]


def cherrypick(src: Mapping[str, Any], dst: MutableMapping[str, Any],
               fields: Iterable[tuple[str, ...]]) -> None:
    """Copy these fields (deeply) from one mapping to the other, if present in the source."""
    absent = object()
    for path in fields:
        value = resolve(src, path, absent)
        if value is not absent:
            ensure(dst, path, copy.deepcopy(value))
