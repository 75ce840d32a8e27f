"""Resources as the API serves them, and selectors as handlers name them."""

from __future__ import annotations

import dataclasses
import enum
import re
import urllib.parse
from collections.abc import Callable, Iterator
from typing import Any

from kopf._bridge.protocol import ResourceInfo

NamespacePattern = str | re.Pattern[str]
NamespaceName = str


class Marker(enum.Enum):
    """``kopf.EVERYTHING``: all resources that the cluster serves (except events)."""

    EVERYTHING = enum.auto()


EVERYTHING = Marker.EVERYTHING
"""A resource selector for every resource the cluster serves (but Events), e.g. ``@kopf.on.event(kopf.EVERYTHING)``."""

# "kopfexamples.v1.kopf.dev": a conventional version after the first dot.
_GROUP_VERSION = re.compile(r'^[^.]*\.v\d+(?:(?:alpha|beta)\d+)?(?:\..*)?$')


@dataclasses.dataclass(frozen=True, eq=False, repr=False)
class Resource:
    """A specific resource kind, as found by the API discovery. Two are the same resource
    if their group, version and plural are (the other names only help to select it)."""

    group: str
    version: str
    plural: str
    kind: str | None = None
    singular: str | None = None
    shortcuts: frozenset[str] = frozenset()
    categories: frozenset[str] = frozenset()
    subresources: frozenset[str] = frozenset()
    namespaced: bool | None = None
    preferred: bool = True
    verbs: frozenset[str] = frozenset()

    def __hash__(self) -> int:
        return hash((self.group, self.version, self.plural))

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Resource):
            return NotImplemented
        return (self.group, self.version, self.plural) == (other.group, other.version, other.plural)

    def __repr__(self) -> str:
        main, *subs = self.plural.split('/')
        text = f'{main}.{self.version}.{self.group}'.strip('.')
        return text + (f'/{"/".join(subs)}' if subs else '')

    def __iter__(self) -> Iterator[str]:
        """The group, version and plural: ``@kopf.on.event(*resource)``."""
        return iter((self.group, self.version, self.plural))

    @property
    def api_version(self) -> str:
        """``group/version``, or the version alone for the core group."""
        return f'{self.group}/{self.version}' if self.group else self.version

    def get_url(self, *, server: str | None = None, namespace: str | None = None,
                name: str | None = None, subresource: str | None = None,
                params: dict[str, str] | None = None) -> str:
        """The URL of the collection (cluster-wide without a namespace), of one object, or of
        its subresource; with ``params`` as the query; with the ``server`` if given."""
        if subresource is not None and name is None:
            raise ValueError("Subresources can be used only with specific resources by their name.")
        if not self.namespaced and namespace is not None:
            raise ValueError("Specific namespaces are not supported for cluster-scoped resources.")
        if self.namespaced and namespace is None and name is not None:
            raise ValueError("Specific namespaces are required for specific namespaced resources.")
        core = self.group == '' and self.version == 'v1'
        scoped = self.namespaced and namespace is not None
        parts = ['/api' if core else '/apis', self.group, self.version,
                 'namespaces' if scoped else None, namespace if scoped else None,
                 self.plural, name, subresource]
        url = '/'.join(part for part in parts if part)
        if params:
            url += '?' + urllib.parse.urlencode(params, encoding='utf-8')
        return url if server is None else server.rstrip('/') + '/' + url.lstrip('/')

    @classmethod
    def from_engine(cls, data: ResourceInfo) -> Resource:
        """A resource as the core discovered it."""
        return cls(
            group=data['group'], version=data['version'], plural=data['plural'], kind=data['kind'],
            singular=data['singular'], shortcuts=frozenset(data['shortcuts']),
            categories=frozenset(data['categories']), subresources=frozenset(data['subresources']),
            namespaced=data['namespaced'], preferred=data['preferred'], verbs=frozenset(data['verbs']),
        )


@dataclasses.dataclass(frozen=True)
class Selector:
    """A resource specification of a handler: by any of its names, with or without a group."""

    arg1: dataclasses.InitVar[str | Marker | Callable[[Resource], bool] | None] = None
    arg2: dataclasses.InitVar[str | Marker | None] = None
    arg3: dataclasses.InitVar[str | Marker | None] = None
    argN: dataclasses.InitVar[None] = None  # more positional args are an error
    group: str | None = None
    version: str | None = None
    kind: str | None = None
    plural: str | None = None
    singular: str | None = None
    shortcut: str | None = None
    category: str | None = None
    any_name: str | Marker | None = None
    fn: Callable[[Resource], bool] | None = None

    def __post_init__(self, arg1: Any, arg2: Any, arg3: Any, argN: Any) -> None:
        def put(**values: Any) -> None:
            for key, value in values.items():
                object.__setattr__(self, key, value)

        if argN is not None:
            raise TypeError("Too many positional arguments. Max 3 positional args are accepted.")
        declared = getattr(arg1, '__kopf_resource__', None) if isinstance(arg1, type) else None
        if declared is not None:  # a model (kopf.CustomResource): its resource, in its version
            if arg2 is not None or arg3 is not None:
                raise TypeError(f"A model names its resource: {arg1.__name__} takes no other positional selectors.")
            arg1, arg2, arg3 = declared.group, declared.version, declared.plural
        if callable(arg1) and not isinstance(arg1, Marker):
            if arg2 is not None or arg3 is not None:
                raise TypeError("The callable filter cannot have any other selectors.")
            put(fn=arg1)
        elif arg1 is None and arg2 is None and arg3 is None:
            pass
        elif arg2 is None and arg3 is None:
            if isinstance(arg1, str) and _GROUP_VERSION.fullmatch(arg1):
                name, version, *grouped = arg1.split('.', 2)
                put(any_name=name, version=version, **({'group': grouped[0]} if grouped else {}))
            elif isinstance(arg1, str) and '.' in arg1:
                name, group = arg1.split('.', 1)
                put(any_name=name, group=group)
            else:
                put(any_name=arg1)
        elif arg3 is None:
            if isinstance(arg1, str) and '/' in arg1:
                group, version = arg1.rsplit('/', 1)
                put(group=group, version=version, any_name=arg2)
            elif arg1 == 'v1':
                put(group='', version='v1', any_name=arg2)
            else:
                put(group=arg1, any_name=arg2)
        else:
            put(group=arg1, version=arg2, any_name=arg3)

        names = [self.kind, self.plural, self.singular, self.shortcut, self.category, self.any_name, self.fn]
        given = [name for name in names if name is not None]
        if len(given) > 1:
            raise TypeError(f"Ambiguous resource specification with {given}")
        if not given:
            raise TypeError("Unspecific resource with no names.")
        if any(name == '' for name in names):
            raise TypeError("Names must not be empty strings; either None or specific strings.")

    def __repr__(self) -> str:
        fields = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
        text = ', '.join(f'{key}={value!r}' for key, value in fields.items() if value is not None)
        return f'{type(self).__name__}({text})'

    def check(self, resource: Resource) -> bool:
        """Does this selector name the resource? (Events are never in ``EVERYTHING``.)"""
        events = resource.plural == 'events' and resource.group in ('', 'events.k8s.io')
        names = (resource.kind, resource.plural, resource.singular)
        return (
            (self.group is None or self.group == resource.group)
            and (self.version == resource.version if self.version is not None
                 else resource.preferred or self.fn is not None)
            and all(want is None or want == have for want, have in
                    ((self.kind, resource.kind), (self.plural, resource.plural), (self.singular, resource.singular)))
            and (self.category is None or self.category in resource.categories)
            and (self.shortcut is None or self.shortcut in resource.shortcuts)
            and (self.any_name is None or self.any_name in names or self.any_name in resource.shortcuts
                 or (self.any_name is Marker.EVERYTHING and not events))
            and (self.fn is None or (bool(self.fn(resource)) and not events))
        )

    def for_engine(self) -> dict[str, Any]:
        """The core's form of the selector; a callable one is asked back about each resource."""
        if self.fn is not None:
            return {'callable': True, 'repr': repr(self)}
        return {
            'group': self.group, 'version': self.version, 'kind': self.kind, 'plural': self.plural,
            'singular': self.singular, 'shortcut': self.shortcut, 'category': self.category,
            'any_name': self.any_name if isinstance(self.any_name, str) else None,
            'everything': self.any_name is Marker.EVERYTHING,
            'repr': repr(self),
        }
