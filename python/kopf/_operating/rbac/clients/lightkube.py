"""lightkube: a ``Client`` or ``AsyncClient``'s methods with a resource class (``ConfigMap``,
``Deployment.Scale``, classes of ``create_namespaced_resource(group, version, kind, plural)``;
their ``_api_info`` names the resource and subresource) or an object of one (``create``,
``replace``, ``apply``); ``namespace='*'`` is every namespace."""

from __future__ import annotations

from typing import Any

from kopf._operating.rbac.clients.base import CallSite, Library, mro_modules, receiver_class
from kopf._operating.rbac.uses import ByPlural, Target
from kopf._operating.rbac.values import NOTHING, Client, Instance, Live, Method, Value, Values

EVERYWHERE = '*'
# The client's methods: the verbs, and whether the resource is given as a class (else an object).
METHODS: dict[str, tuple[tuple[str, ...], bool]] = {
    'get': (('get',), True), 'list': (('list',), True), 'watch': (('list', 'watch'), True),
    'wait': (('list', 'watch'), True), 'delete': (('delete',), True), 'deletecollection': (('deletecollection',), True),
    'patch': (('patch',), True), 'set': (('patch',), True), 'create': (('create',), False),
    'replace': (('update',), False), 'apply': (('create', 'patch'), False),  # an apply may create
}
PODS = {'log': (('get',), 'log'), 'exec': (('create', 'get'), 'exec')}


def _resource(cls: object) -> bool:
    return isinstance(cls, type) and 'lightkube.core.resource' in mro_modules(cls) and hasattr(cls, '_api_info')


def _target(cls: Any) -> Target:
    info = cls._api_info
    owner = info.parent or info.resource
    namespaced = any(base.__name__.startswith('Namespaced') for base in cls.__mro__)
    return ByPlural(owner.group, info.plural, info.action or '', namespaced=namespaced)


def _client(cls: type | None) -> bool:
    return cls is not None and cls.__name__ in ('Client', 'AsyncClient') and \
        any(module.startswith('lightkube.core') for module in mro_modules(cls))


class Lightkube(Library):
    name = 'lightkube'

    def owns(self, value: Value) -> bool:
        return _client(receiver_class(value))

    def call(self, call: CallSite, callee: Value) -> Values | None:
        if isinstance(callee, Live) and getattr(callee.obj, '__name__', '') in \
                ('create_namespaced_resource', 'create_global_resource') and \
                (getattr(callee.obj, '__module__', '') or '').startswith('lightkube'):
            groups, plurals = call.string(0, 'group'), call.string(3, 'plural')
            if groups is None or plurals is None:
                call.unresolved(f"lightkube {callee.obj.__name__}: the group or plural is not known statically")
                return NOTHING
            namespaced = callee.obj.__name__ == 'create_namespaced_resource'
            return frozenset(Client(self.name, 'class', (ByPlural(g, p, namespaced=namespaced),))
                             for g in groups for p in plurals)
        if isinstance(callee, Client) and callee.library == self.name and callee.what == 'class':
            return frozenset({Client(self.name, 'object', callee.data)})
        if not (isinstance(callee, Method) and _client(callee.owner)):
            return None
        name = callee.fn.__name__
        via = f"lightkube {callee.owner.__name__}.{name}"
        namespaces = call.namespaces(None, 'namespace', everywhere=[EVERYWHERE])
        if name in PODS:
            verbs, subresource = PODS[name]
            call.use(verbs, ByPlural('', 'pods', subresource, namespaced=True), namespaces, via)
            return NOTHING
        if name not in METHODS:
            return NOTHING
        verbs, by_class = METHODS[name]
        targets = []
        for value in call.arg(0, 'res' if by_class else 'obj') or ():
            cls = value.obj if by_class and isinstance(value, Live) else \
                value.cls if not by_class and isinstance(value, Instance) else None
            if _resource(cls):
                targets.append(_target(cls))
            elif isinstance(value, Client) and value.library == self.name and \
                    value.what == ('class' if by_class else 'object'):
                targets.append(value.data[0])
        if not targets:
            argument = call.text(0, 'res' if by_class else 'obj')
            call.unresolved(f"{via}({argument}): the resource is not known statically")
        for target in targets:
            call.use(verbs, target, namespaces, via)
        return NOTHING


LIGHTKUBE = Lightkube()
