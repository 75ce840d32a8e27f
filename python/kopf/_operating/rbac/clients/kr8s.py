"""kr8s (and ``kr8s.asyncio``): objects of its resource classes (``Deployment(...)``, classes
of ``new_class(kind, version)``: their ``endpoint`` and ``version`` name the resource) and their
methods; ``Cls.get``/``Cls.list``; ``kr8s.get(kind, ...)`` and ``kr8s.watch(kind, ...)`` (also
as an ``Api``'s methods) with a literal kind, and what iterating over their results gives.

``Cls.get(name)`` reads the object with a list filtered by ``metadata.name``: a ``list``, as the
API server authorizes it; an object's ``exists()`` and ``refresh()`` read it by name: ``get``."""

from __future__ import annotations

from typing import Any

from kopf._operating.rbac.clients.base import CallSite, Library, mro_modules, receiver_class
from kopf._operating.rbac.uses import DEFAULT, ByName, ByPlural, Namespace, Site, Target, Use
from kopf._operating.rbac.values import NOTHING, Client, Instance, Live, Method, Value, Values

EVERYWHERE = 'all'  # kr8s.ALL: every namespace

# An object's methods (``async_`` ones alike): the verbs on its own resource (and subresource).
OWN: dict[str, tuple[tuple[str, ...], str]] = {
    'get': (('list',), ''), 'exists': (('get',), ''), 'refresh': (('get',), ''),
    'create': (('create',), ''), 'delete': (('delete',), ''), 'patch': (('patch',), ''),
    'scale': (('get', 'patch'), ''), 'watch': (('list', 'watch'), ''), 'wait': (('get', 'list', 'watch'), ''),
    'annotate': (('patch',), ''), 'label': (('patch',), ''), 'remove_label': (('patch',), ''),
    'set_owner': (('patch',), ''), 'list': (('list',), ''), 'ready': (('get',), ''),
    'cordon': (('patch',), ''), 'uncordon': (('patch',), ''), 'taint': (('patch',), ''),
    'tolerate': (('patch',), ''), 'logs': (('get',), 'log'),
    'proxy_http_request': (('get', 'create', 'update', 'delete'), 'proxy'), 'proxy_http_get': (('get',), 'proxy'),
    'proxy_http_post': (('create',), 'proxy'), 'proxy_http_put': (('update',), 'proxy'),
    'proxy_http_delete': (('delete',), 'proxy'),
}
# Methods that reach pods: (verbs, subresource) on pods of the core group.
PODS: dict[str, list[tuple[tuple[str, ...], str]]] = {
    'pods': [(('list',), '')], 'ready_pods': [(('list',), '')],
    'exec': [(('list',), ''), (('create', 'get'), 'exec')],
    'portforward': [(('list',), ''), (('create', 'get'), 'portforward')],
}
FUNCTIONS = {'get': ('list',), 'watch': ('list', 'watch')}


def _resource_class(cls: type | None) -> bool:
    return cls is not None and any(module.startswith('kr8s.') and module.endswith('_objects')
                                   for module in mro_modules(cls)) and hasattr(cls, 'endpoint')


def _api(cls: type | None) -> bool:
    return cls is not None and cls.__name__ == 'Api' and \
        any(module.startswith('kr8s') and module.endswith('_api') for module in mro_modules(cls))


def _target(cls: type, subresource: str = '') -> Target:
    version = getattr(cls, 'version', '') or ''
    group = version.rpartition('/')[0] if '/' in version else ''
    return ByPlural(group, getattr(cls, 'endpoint', ''), subresource, namespaced=getattr(cls, 'namespaced', None))


class Kr8s(Library):
    name = 'kr8s'

    def owns(self, value: Value) -> bool:
        cls = receiver_class(value)
        return _resource_class(cls) or _api(cls) or (isinstance(value, Client) and value.library == self.name)

    def call(self, call: CallSite, callee: Value) -> Values | None:
        if isinstance(callee, Method) and (_resource_class(callee.owner) or _api(callee.owner)):
            name = callee.fn.__name__.removeprefix('async_')
            cls = receiver_class(callee.receiver)
            if _api(callee.owner):
                return self.function(call, name, 'Api.')
            if cls is None or not _resource_class(cls):
                return NOTHING
            return self.method(call, cls, name, classwide=isinstance(callee.receiver, Live))
        if isinstance(callee, Live) and callable(callee.obj) and \
                (getattr(callee.obj, '__module__', '') or '').startswith('kr8s') and \
                not isinstance(callee.obj, type):
            name = getattr(callee.obj, '__name__', '')
            if name in FUNCTIONS or name == 'create':
                return self.function(call, name, 'kr8s.')
            return NOTHING
        if isinstance(callee, Client) and callee.library == self.name and callee.what == 'method':
            target, name = callee.data
            name = name.removeprefix('async_')
            if name in OWN:
                verbs, subresource = OWN[name]
                if isinstance(target, ByName) and subresource:
                    target = ByName(target.text, subresource)
                call.use(verbs, target, [DEFAULT], f"kr8s {target}.{name}")
            return NOTHING
        if isinstance(callee, Client) and callee.library == self.name:
            return NOTHING
        return None

    def method(self, call: CallSite, cls: type, name: str, classwide: bool) -> Values:
        via = f"kr8s {cls.__name__}.{name}"
        namespaces = call.namespaces(None, 'namespace', everywhere=[EVERYWHERE]) if classwide else [DEFAULT]
        if name in OWN:
            verbs, subresource = OWN[name]
            if name == 'patch':
                subresources = call.string(None, 'subresource')
                subresource = subresources[0] if subresources else ''
            call.use(verbs, _target(cls, subresource), namespaces, via)
        if name in PODS:
            for verbs, subresource in PODS[name]:
                call.use(verbs, ByPlural('', 'pods', subresource, namespaced=True), namespaces, via)
        if name == 'adopt':  # the child's ownerReferences are patched
            for child in call.arg(0, 'child') or ():
                child_cls = receiver_class(child)
                if child_cls is not None and _resource_class(child_cls):
                    call.use(('patch',), _target(child_cls), [DEFAULT], via)
        if name in ('get', 'list') and classwide:
            return frozenset({Instance(cls)}) if name == 'get' else \
                frozenset({Client(self.name, 'found', (_target(cls), cls))})
        return NOTHING

    def function(self, call: CallSite, name: str, prefix: str) -> Values:
        via = f"kr8s {prefix}{name}"
        if name == 'create':
            call.unresolved(f"{via}({call.text(0, 'resources')}): the objects' kinds are not known statically")
            return NOTHING
        if name not in FUNCTIONS:
            return NOTHING
        namespaces: list[Namespace] = call.namespaces(None, 'namespace', everywhere=[EVERYWHERE])
        targets: list[tuple[Target, Any]] = []
        for kind in call.arg(0, 'kind') or ():
            if isinstance(kind, Live) and isinstance(kind.obj, str):
                targets.append((ByName(kind.obj), None))
            elif isinstance(kind, Live) and _resource_class(kind.obj):
                targets.append((_target(kind.obj), kind.obj))
        if not targets:
            call.unresolved(f"{via}({call.text(0, 'kind')}): the kind is not known statically")
            return NOTHING
        for target, _ in targets:
            call.use(FUNCTIONS[name], target, namespaces, via)
        return frozenset(Client(self.name, 'found', (target, cls)) for target, cls in targets)

    def iterate(self, value: Value, site: Site) -> tuple[Values, list[Use]] | None:
        if isinstance(value, Client) and value.library == self.name and value.what == 'found':
            target, cls = value.data
            item = Instance(cls) if cls is not None else Client(self.name, 'object', (target,))
            return frozenset({item}), []  # (the request is the call that found them)
        return None

    def attribute(self, value: Value, attr: str) -> Values | None:
        if isinstance(value, Client) and value.library == self.name and value.what == 'object':
            return frozenset({Client(self.name, 'method', (value.data[0], attr))})
        return None



KR8S = Kr8s()
