"""pykube-ng: objects of its resource classes (``pykube.Deployment(api, obj)``, classes of
``object_factory(api, version, kind)`` with literal arguments; their ``version`` and
``endpoint`` name the resource) and their methods; queries (``Cls.objects(api)``, filtered by
``namespace=``, ``pykube.all`` for every namespace): read when iterated, counted, or asked
for one object."""

from __future__ import annotations

import sys
from typing import Any

from kopf._operating.rbac.clients.base import CallSite, Library, mro_modules, receiver_class
from kopf._operating.rbac.uses import DEFAULT, ByKind, ByPlural, Namespace, Site, Target, Use
from kopf._operating.rbac.values import NOTHING, Client, Live, Method, Value, Values

# An object's methods: verbs on its resource, and the subresource.
OWN: dict[str, tuple[tuple[str, ...], str]] = {
    'create': (('create',), ''), 'update': (('patch',), ''), 'patch': (('patch',), ''),
    'delete': (('delete',), ''), 'reload': (('get',), ''), 'exists': (('get',), ''),
    'watch': (('list', 'watch'), ''), 'scale': (('patch',), ''), 'logs': (('get',), 'log'),
    'cordon': (('patch',), ''), 'uncordon': (('patch',), ''),
    'proxy_http_request': (('get', 'create', 'update', 'delete'), 'proxy'), 'proxy_http_get': (('get',), 'proxy'),
    'proxy_http_post': (('create',), 'proxy'), 'proxy_http_put': (('update',), 'proxy'),
    'proxy_http_delete': (('delete',), 'proxy'),
}
# A query's methods: the verbs they make, and whether they return a query again.
QUERIES: dict[str, tuple[str, ...]] = {
    'get_by_name': ('get',), 'get': ('list',), 'get_or_none': ('list',), 'iterator': ('list',),
    'as_table': ('list',), 'execute': ('list',), 'watch': ('list', 'watch'),
}


def _resource_class(cls: object) -> bool:
    return isinstance(cls, type) and any(module.startswith('pykube') for module in mro_modules(cls)) and \
        isinstance(getattr(cls, 'endpoint', None), str) and isinstance(getattr(cls, 'version', None), str)


def _target(cls: Any, subresource: str = '') -> Target:
    version: str = cls.version
    namespaced = any(base.__name__ == 'NamespacedAPIObject' for base in cls.__mro__)
    return ByPlural(version.rpartition('/')[0] if '/' in version else '', cls.endpoint, subresource,
                    namespaced=namespaced)


def _everywhere() -> list[object]:
    query = sys.modules.get('pykube.query')
    return [query.all_] if query is not None and hasattr(query, 'all_') else []


class Pykube(Library):
    name = 'pykube'

    def owns(self, value: Value) -> bool:
        return _resource_class(receiver_class(value)) or (isinstance(value, Client) and value.library == self.name)

    def attribute(self, value: Value, attr: str) -> Values | None:
        if isinstance(value, Live) and _resource_class(value.obj) and attr == 'objects':
            return frozenset({Client(self.name, 'manager', (_target(value.obj),))})
        if isinstance(value, Client) and value.library == self.name:
            if value.what in ('query', 'made') and attr:
                return frozenset({Client(self.name, f"{value.what}.{attr}", value.data)})
            return NOTHING
        return None

    def call(self, call: CallSite, callee: Value) -> Values | None:
        if isinstance(callee, Method) and _resource_class(callee.owner) and \
                (getattr(callee.fn, '__module__', '') or '').startswith('pykube'):
            name = callee.fn.__name__
            if name in OWN:
                verbs, subresource = OWN[name]
                if name in ('patch', 'update'):
                    subresource = (call.string(None, 'subresource') or [''])[0]
                call.use(verbs, _target(callee.owner, subresource), [DEFAULT], f"pykube {callee.owner.__name__}.{name}")
            return NOTHING
        if isinstance(callee, Live) and getattr(callee.obj, '__name__', '') == 'object_factory' and \
                (getattr(callee.obj, '__module__', '') or '').startswith('pykube'):
            versions, kinds = call.string(1, 'api_version'), call.string(2, 'kind')
            if versions is None or kinds is None:
                call.unresolved(f"pykube.object_factory({call.text(1, 'api_version')}, {call.text(2, 'kind')}): "
                                f"the resource is not known statically")
                return NOTHING
            return frozenset(Client(self.name, 'class', (ByKind(v.rpartition('/')[0], k),))
                             for v in versions for k in kinds)
        if not isinstance(callee, Client) or callee.library != self.name:
            return None
        target: Target = callee.data[0]
        if callee.what == 'manager':  # Cls.objects(api, namespace=...)
            return frozenset({Client(self.name, 'query', (target, tuple(self._namespaces(call, 1))))})
        if callee.what == 'class':  # Cls(api, obj) of a class made by object_factory
            return frozenset({Client(self.name, 'made', (target,))})
        if callee.what.startswith('made.'):
            name = callee.what.partition('.')[2]
            if name in OWN:
                call.use(OWN[name][0], target, [DEFAULT], f"pykube {target}.{name}")
            return NOTHING
        if callee.what.startswith('query.'):
            name = callee.what.partition('.')[2]
            namespaces: tuple[Namespace, ...] = callee.data[1]
            if name in ('filter', 'all'):
                found = self._namespaces(call, None) if call.given(None, 'namespace') else list(namespaces)
                return frozenset({Client(self.name, 'query', (target, tuple(found)))})
            if name in QUERIES:
                verbs = ('get',) if name == 'get' and call.given(None, 'name') else QUERIES[name]
                call.use(verbs, target, namespaces, f"pykube {target} query .{name}()")
            return NOTHING
        return NOTHING

    @staticmethod
    def _namespaces(call: CallSite, index: int | None) -> list[Namespace]:
        return call.namespaces(index, 'namespace', everywhere=_everywhere())

    def iterate(self, value: Value, site: Site) -> tuple[Values, list[Use]] | None:
        if isinstance(value, Client) and value.library == self.name and value.what == 'query':
            target, namespaces = value.data
            uses = [Use(('list',), target, namespace, f"pykube {target} query, iterated", site)
                    for namespace in namespaces]
            return frozenset({Client(self.name, 'made', (target,))}), uses
        return None


PYKUBE = Pykube()
