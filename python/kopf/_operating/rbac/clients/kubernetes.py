"""The official clients, ``kubernetes`` and ``kubernetes_asyncio`` (generated from the API's
OpenAPI schema, alike in their names):

- the typed APIs' methods: ``CoreV1Api().create_namespaced_config_map`` is ``create`` on
  ``configmaps`` of the core group; ``read`` is ``get``, ``replace`` is ``update``; a suffix
  past the kind is a subresource (``read_namespaced_pod_log``: ``pods/log``);
  ``..._for_all_namespaces`` goes to every namespace; ``watch=True`` also watches;
- ``CustomObjectsApi`` with its group and plural (literal, or a warning);
- a watch (``Watch().stream(api.list_..., ...)``) and a websocket (``stream(api.connect_...)``)
  of such a method;
- the dynamic client (``DynamicClient(...).resources.get(api_version=..., kind=...)``) where
  the resource is literal;
- ``utils.create_from_yaml/dict/directory``: objects from files, their kinds not known (a warning).
"""

from __future__ import annotations

import functools
import importlib
import importlib.util
import inspect
import re
import sys
from pathlib import Path
from typing import Any

from kopf._operating.rbac.clients.base import CallSite, Library, receiver_class
from kopf._operating.rbac.uses import ALL, DEFAULT, ByKind, ByPlural, ByTypedMethod, Namespace, Site, Use
from kopf._operating.rbac.values import NOTHING, Client, Instance, Live, Method, Value, Values

PACKAGES = ('kubernetes', 'kubernetes_asyncio')
TYPED = re.compile(r'(create|read|list|patch|replace|delete_collection|delete|'
                   r'connect_(?:get|post|put|patch|delete|head|options))_(namespaced_)?(\w+?)(_for_all_namespaces)?')
CUSTOM = re.compile(r'(create|get|list|patch|replace|delete_collection|delete)_(namespaced|cluster)_custom_object'
                    r'(?:_(status|scale))?')
VERBS = {'create': 'create', 'read': 'get', 'get': 'get', 'list': 'list', 'patch': 'patch', 'replace': 'update',
         'delete': 'delete', 'delete_collection': 'deletecollection', 'connect_get': 'get', 'connect_head': 'get',
         'connect_options': 'get', 'connect_post': 'create', 'connect_put': 'update', 'connect_patch': 'patch',
         'connect_delete': 'delete'}
# Websockets (exec, attach, port-forward) open with a GET, authorized as `create` too since
# Kubernetes 1.30 (KEP-4006): both are granted.
STREAMED = ('_exec', '_attach', '_portforward')
DYNAMIC_VERBS = {'get': 'get', 'create': 'create', 'delete': 'delete', 'replace': 'update', 'patch': 'patch',
                 'server_side_apply': 'patch', 'watch': 'watch'}


def _of_package(module: str, *parts: str) -> bool:
    return any(module == '.'.join((package, *parts)) or module.startswith('.'.join((package, *parts)) + '.')
               for package in PACKAGES)


def _api_class(cls: type | None) -> bool:
    return cls is not None and _of_package(cls.__module__, 'client', 'api') and cls.__name__.endswith('Api')


@functools.cache
def _api_sources(package: str) -> tuple[tuple[str, str], ...]:
    """The modules of a client package's API classes, with their source's text (read, not
    imported: a method's name finds its module, and only that one is imported)."""
    try:
        spec = importlib.util.find_spec(f'{package}.client.api')
    except (ImportError, ValueError):
        return ()
    found: list[tuple[str, str]] = []
    for folder in (spec.submodule_search_locations or []) if spec is not None else []:
        for path in sorted(Path(folder).glob('*_api.py')):
            found.append((f'{package}.client.api.{path.stem}', path.read_text(errors='replace')))
    return tuple(found)


def _methods_named(attr: str) -> Values | None:
    """The API classes' methods of this name, in the client packages the operator imports."""
    name = attr.removesuffix('_with_http_info')
    if TYPED.fullmatch(name) is None and CUSTOM.fullmatch(name) is None:
        return None
    found: set[Value] = set()
    for package in PACKAGES:
        if package not in sys.modules:
            continue
        for module_name, text in _api_sources(package):
            if f"def {attr}(" not in text:
                continue
            module = importlib.import_module(module_name)
            for cls in vars(module).values():
                if isinstance(cls, type) and _api_class(cls) and callable(vars(cls).get(attr)):
                    found.add(Method(Instance(cls), vars(cls)[attr], cls))
    return frozenset(found) if found else None


def _param(fn: Any, name: str) -> int | None:
    """A parameter's position in the call (``self`` not counted); the signature is read through
    the wrappers (kubernetes 3x's pydantic validation) and not evaluated."""
    try:
        parameters = list(inspect.signature(fn, eval_str=False).parameters.values())
    except (TypeError, ValueError):
        return None
    names = [p.name for p in parameters if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    return names.index(name) - 1 if name in names else None


class Kubernetes(Library):
    name = 'kubernetes'

    def owns(self, value: Value) -> bool:
        cls = receiver_class(value)
        return _api_class(cls) or (isinstance(value, Client) and value.library == self.name)

    def attribute(self, value: Value, attr: str) -> Values | None:
        cls = receiver_class(value)
        if isinstance(value, Instance) and cls is not None and _of_package(cls.__module__, 'dynamic') and \
                attr == 'resources':
            return frozenset({Client(self.name, 'resources', ())})
        if isinstance(value, Client) and value.library == self.name:
            if value.what == 'resources' and attr in ('get', 'search'):
                return frozenset({Client(self.name, 'lookup', ())})
            if value.what == 'resource' and attr in DYNAMIC_VERBS:
                return frozenset({Client(self.name, 'dynamic', (value.data[0], attr))})
            return NOTHING
        return None

    def call(self, call: CallSite, callee: Value) -> Values | None:
        if isinstance(callee, Method) and _api_class(callee.owner):
            self.request(call, callee.fn, callee.owner)
            return NOTHING
        if isinstance(callee, Method) and _of_package(callee.owner.__module__, 'watch') and \
                callee.fn.__name__ == 'stream':
            for method in call.arg(0) or ():
                if isinstance(method, Method) and _api_class(method.owner):
                    self.request(call.shifted(1), method.fn, method.owner, watch=True)
            return NOTHING
        if isinstance(callee, Live) and callable(callee.obj) and \
                _of_package(getattr(callee.obj, '__module__', '') or '', 'stream') and \
                getattr(callee.obj, '__name__', '') == 'stream':
            for method in call.arg(0) or ():
                if isinstance(method, Method) and _api_class(method.owner):
                    self.request(call.shifted(1), method.fn, method.owner)
            return NOTHING
        if isinstance(callee, Live) and callable(callee.obj) and \
                _of_package(getattr(callee.obj, '__module__', '') or '', 'utils') and \
                getattr(callee.obj, '__name__', '').startswith('create_from_'):
            call.unresolved(f"{callee.obj.__name__}({call.text(0)}, {call.text(1)}): the objects' kinds are in "
                            f"the data, not known statically")
            return NOTHING
        if isinstance(callee, Method) and _of_package(callee.owner.__module__, 'dynamic') and \
                callee.fn.__name__ in DYNAMIC_VERBS:
            for resource in call.arg(0, 'resource') or ():
                if isinstance(resource, Client) and resource.what == 'resource':
                    self.dynamic(call.shifted(1), resource.data[0], callee.fn.__name__)
            return NOTHING
        if isinstance(callee, Client) and callee.library == self.name:
            if callee.what == 'lookup':
                return self.lookup(call)
            if callee.what == 'dynamic':
                target, verb = callee.data
                self.dynamic(call, target, verb)
                return NOTHING
        return None

    def named(self, attr: str) -> Values | None:
        return _methods_named(attr)

    def reference(self, site: Site, value: Value) -> list[Use]:
        if not isinstance(value, Method) or not _api_class(value.owner):
            return []
        name = value.fn.__name__.removesuffix('_with_http_info')
        typed = TYPED.fullmatch(name)
        if typed is None or CUSTOM.fullmatch(name):
            return []  # (a custom object's resource is in the call's arguments)
        verbs = self._verbs(typed[1], typed[3])
        namespace = ALL if typed[4] else DEFAULT
        target = ByTypedMethod(value.owner.__name__.removesuffix('Api'), typed[3])
        return [Use(verbs, target, namespace, f"{value.owner.__name__}.{name}", site)]

    @staticmethod
    def _verbs(prefix: str, rest: str) -> tuple[str, ...]:  # (one or two)
        verb = VERBS[prefix]
        if prefix.startswith('connect_') and rest.endswith(STREAMED):
            return ('create', 'get')
        return (verb,)

    def request(self, call: CallSite, fn: Any, owner: type, watch: bool = False) -> None:
        name = fn.__name__.removesuffix('_with_http_info')
        via = f"{owner.__name__}.{name}"
        custom = CUSTOM.fullmatch(name)
        verbs: tuple[str, ...]
        if name == 'list_custom_object_for_all_namespaces':
            verbs = ('list', 'watch') if watch or self._watching(call) else ('list',)
            self.custom(call, fn, via, verbs, 'resource_plural', '', everywhere=True)
            return
        if custom is not None:
            verbs = (VERBS[custom[1]], *(('watch',) if watch or self._watching(call) else ()))
            self.custom(call, fn, via, verbs, 'plural', custom[3] or '', everywhere=False,
                        namespaced=custom[2] == 'namespaced')
            return
        typed = TYPED.fullmatch(name)
        if typed is None:
            return  # discovery (get_api_resources, get_code): allowed to every account
        verbs = self._verbs(typed[1], typed[3])
        if typed[1] == 'list' and (watch or self._watching(call)):
            verbs = (*verbs, 'watch')
        target = ByTypedMethod(owner.__name__.removesuffix('Api'), typed[3])
        if typed[4]:
            namespaces: list[Namespace] = [ALL]
        elif typed[2]:
            namespaces = call.namespaces(_param(fn, 'namespace'), 'namespace')
        else:
            namespaces = [DEFAULT]  # cluster-scoped
        call.use(verbs, target, namespaces, via)

    @staticmethod
    def _watching(call: CallSite) -> bool:
        values = call.arg(None, 'watch')
        return values is not None and any(isinstance(v, Live) and v.obj for v in values)

    @staticmethod
    def custom(call: CallSite, fn: Any, via: str, verbs: tuple[str, ...], plural_param: str, subresource: str,
               everywhere: bool, namespaced: bool = False) -> None:
        groups = call.string(_param(fn, 'group'), 'group')
        plurals = call.string(_param(fn, plural_param), plural_param)
        if groups is None or plurals is None:
            unknown = [f"the {what} ({call.text(_param(fn, what), what)})" for what, found in
                       (('group', groups), (plural_param, plurals)) if found is None]
            call.unresolved(f"{via}: {' and '.join(unknown)} not known statically")
            return
        if everywhere:
            namespaces: list[Namespace] = [ALL]
        elif namespaced:
            namespaces = call.namespaces(_param(fn, 'namespace'), 'namespace')
        else:
            # The path without a namespace: a cluster-scoped resource's, or for a namespaced one
            # (a list, a collection's deletion) every namespace's at once.
            namespaces = [ALL]
        for group in groups:
            for plural in plurals:
                call.use(verbs, ByPlural(group, plural, subresource, namespaced=namespaced or everywhere),
                         namespaces, via)

    def lookup(self, call: CallSite) -> Values:
        versions = call.string(None, 'api_version')
        kinds = call.string(None, 'kind')
        if versions is None or kinds is None:
            call.unresolved(f"the dynamic client's resource (api_version={call.text(None, 'api_version')}, "
                            f"kind={call.text(None, 'kind')}) is not known statically")
            return frozenset({Client(self.name, 'unknown', ())})
        targets = [ByKind(version.rpartition('/')[0], kind) for version in versions for kind in kinds]
        return frozenset(Client(self.name, 'resource', (target,)) for target in targets)

    def dynamic(self, call: CallSite, target: Any, verb: str) -> None:
        verbs: tuple[str, ...] = (DYNAMIC_VERBS[verb],)
        if verb == 'get' and not call.given(None, 'name'):
            verbs = ('list',)
        elif verb == 'watch':
            verbs = ('list', 'watch')
        elif verb == 'server_side_apply':
            verbs = ('create', 'patch')  # an apply of an absent object creates it
        call.use(verbs, target, call.namespaces(None, 'namespace'), f"dynamic client: {verb}")


KUBERNETES = Kubernetes()
