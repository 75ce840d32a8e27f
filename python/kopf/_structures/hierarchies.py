"""Toolkits for parent-child hierarchies: ``kopf.adopt`` and its parts.

They accept dicts, pykube-ng objects, and models of the ``kubernetes`` (or
``kubernetes_asyncio``) client, one or many; the owner defaults to the object
of the handler that is running.
"""

from __future__ import annotations

import contextvars
import enum
from collections.abc import Iterable, Iterator, Mapping, MutableMapping
from typing import Any

from kopf._structures.structs import build_owner_reference

# The body of the object whose handler is running (set by the bridge for each call).
cause_body_var: contextvars.ContextVar[Mapping[str, Any]] = contextvars.ContextVar('kopf_cause_body')


class _Unset(enum.Enum):
    token = enum.auto()


def _model_kind(obj: Any) -> str | None:
    """'sync'/'async' for the official clients' generated models, else None."""
    for cls in type(obj).__mro__:
        if cls.__module__.startswith('kubernetes.client.models.'):
            return 'sync'
        if cls.__module__.startswith('kubernetes_asyncio.client.models.'):
            return 'async'
    return None


def _walk(objs: Any, nested: Iterable[str] | None = None) -> Iterator[Any]:
    if objs is None:
        return
    if hasattr(objs, 'obj') and isinstance(objs.obj, MutableMapping) and hasattr(objs, 'api'):
        yield from _walk(objs.obj, nested)  # pykube objects: their underlying dict
    elif _model_kind(objs) is not None:
        yield objs
        for field in nested or ():
            current = objs
            try:
                for part in field.split('.'):
                    current = getattr(current, part)
            except AttributeError:
                continue
            yield current
    elif isinstance(objs, Mapping):
        yield objs
        for field in nested or ():
            current = objs
            try:
                for part in field.split('.'):
                    current = current[part]
            except (KeyError, TypeError):
                continue
            yield current
    elif isinstance(objs, Iterable) and not isinstance(objs, str | bytes):
        for obj in objs:
            yield from _walk(obj, nested)
    else:
        yield objs


class _Meta:
    """Uniform access to the metadata of a dict or of a client model."""

    def __init__(self, obj: Any) -> None:
        self.obj = obj
        self.kind = _model_kind(obj)
        if self.kind is None and not isinstance(obj, MutableMapping):
            raise TypeError(f"K8s object class is not supported: {type(obj)}")
        if self.kind is not None and obj.metadata is None:
            module = __import__('kubernetes.client' if self.kind == 'sync' else 'kubernetes_asyncio.client',
                                fromlist=['V1ObjectMeta'])
            obj.metadata = module.V1ObjectMeta()

    def get(self, key: str) -> Any:
        if self.kind is None:
            return self.obj.get('metadata', {}).get(key)
        return getattr(self.obj.metadata, _snake(key))

    def set(self, key: str, value: Any) -> None:
        if self.kind is None:
            self.obj.setdefault('metadata', {})[key] = value
        else:
            setattr(self.obj.metadata, _snake(key), value)

    def delete(self, key: str) -> None:
        if self.kind is None:
            self.obj.get('metadata', {}).pop(key, None)
        else:
            setattr(self.obj.metadata, _snake(key), None)

    def update(self, key: str, factory: type, change: Any) -> None:
        """Change a list/dict field in place; models may hand out copies, so set it back."""
        value = self.get(key)
        value = factory() if value is None else value
        change(value)
        self.set(key, value)

    def owner_reference(self, ref: Mapping[str, Any]) -> Any:
        if self.kind is None:
            return dict(ref)
        module = __import__('kubernetes.client' if self.kind == 'sync' else 'kubernetes_asyncio.client',
                            fromlist=['V1OwnerReference'])
        return module.V1OwnerReference(api_version=ref['apiVersion'], kind=ref['kind'], name=ref['name'],
                                       uid=ref['uid'], controller=ref.get('controller'),
                                       block_owner_deletion=ref.get('blockOwnerDeletion'))


def _snake(key: str) -> str:
    return {'ownerReferences': 'owner_references', 'generateName': 'generate_name'}.get(key, key)


def _uid_of(ref: Any) -> Any:
    return ref.get('uid') if isinstance(ref, Mapping) else getattr(ref, 'uid', None)


def _guess_owner(owner: Mapping[str, Any] | None) -> Mapping[str, Any]:
    if owner is not None:
        return owner
    try:
        return cause_body_var.get()
    except LookupError:
        raise LookupError("Owner must be set explicitly, since running outside of a handler.") from None


def append_owner_reference(objs: Any, owner: Mapping[str, Any] | None = None, *,
                           controller: bool | None = True, block_owner_deletion: bool | None = True) -> None:
    """Add an owner reference to the owner (by default, the handler's object), unless there is one."""
    ref = build_owner_reference(_guess_owner(owner), controller=controller,
                                block_owner_deletion=block_owner_deletion)
    for obj in _walk(objs):
        meta = _Meta(obj)

        def add(refs: list[Any], meta: _Meta = meta) -> None:
            if not any(_uid_of(r) == ref['uid'] for r in refs):
                refs.append(meta.owner_reference(ref))
        meta.update('ownerReferences', list, add)


def remove_owner_reference(objs: Any, owner: Mapping[str, Any] | None = None) -> None:
    """Remove the owner references to the owner (by default, the handler's object)."""
    ref = build_owner_reference(_guess_owner(owner))
    def drop(refs: list[Any]) -> None:
        refs[:] = [r for r in refs if _uid_of(r) != ref['uid']]
    for obj in _walk(objs):
        _Meta(obj).update('ownerReferences', list, drop)


def label(objs: Any, labels: Mapping[str, str | None] | _Unset = _Unset.token, *, forced: bool = False,
          nested: str | Iterable[str] | None = None, force: bool | None = None) -> None:
    """Apply labels (by default, the handler's object's labels), also to nested templates."""
    if force is not None:
        import warnings
        warnings.warn("force= is deprecated in kopf.label(); use forced=...", DeprecationWarning, stacklevel=2)
        forced = force
    wanted: Mapping[str, str | None] = (_guess_owner(None).get('metadata', {}).get('labels', {})
                                         if isinstance(labels, _Unset) else labels)
    nested = [nested] if isinstance(nested, str) else nested
    def apply(obj_labels: dict[str, Any]) -> None:
        for key, value in wanted.items():
            if forced:
                obj_labels[key] = value
            else:
                obj_labels.setdefault(key, value)
    for obj in _walk(objs, nested=nested):
        _Meta(obj).update('labels', dict, apply)


def harmonize_naming(objs: Any, name: str | None | _Unset = _Unset.token, *, forced: bool = False,
                     strict: bool = False) -> None:
    """Name children after the owner: ``generateName: owner-`` (or exactly ``name`` if strict)."""
    if isinstance(name, _Unset):
        name = _guess_owner(None).get('metadata', {}).get('name')
    if name is None:
        raise LookupError("Name must be set explicitly: couldn't find it automatically.")
    for obj in _walk(objs):
        meta = _Meta(obj)
        nameless = meta.get('name') is None and meta.get('generateName') is None
        if forced or nameless:
            if strict:
                meta.set('name', name)
                meta.delete('generateName')
            else:
                meta.set('generateName', f'{name}-')
                meta.delete('name')


def adjust_namespace(objs: Any, namespace: str | None | _Unset = _Unset.token, *, forced: bool = False) -> None:
    """Put children into the owner's namespace, unless they have one (or if forced)."""
    if isinstance(namespace, _Unset):
        namespace = _guess_owner(None).get('metadata', {}).get('namespace')
    for obj in _walk(objs):
        meta = _Meta(obj)
        if forced or meta.get('namespace') is None:
            meta.set('namespace', namespace)


def adopt(objs: Any, owner: Mapping[str, Any] | None = None, *, forced: bool = False, strict: bool = False,
          nested: str | Iterable[str] | None = None) -> None:
    """Make the objects children of the owner: owner reference, name, namespace, labels."""
    real_owner = _guess_owner(owner)
    meta = real_owner.get('metadata', {})
    append_owner_reference(objs, owner=real_owner)
    harmonize_naming(objs, forced=forced, strict=strict, name=meta.get('name'))
    adjust_namespace(objs, forced=forced, namespace=meta.get('namespace'))
    label(objs, forced=forced, nested=nested, labels=meta.get('labels', {}))
