"""What the operator's own code asks of the API, as found in its source (`introspecting`),
declared (`declaring`) or recorded (`recording`): a request's verbs on a target that a client
names in its own way, resolved into resources with the cluster's discovery."""

from __future__ import annotations

import dataclasses
import enum
import re
from collections.abc import Iterable, Sequence

from kopf._structures.references import Resource

# The verbs of Kubernetes' RBAC on resources, as the API server authorizes requests.
VERBS = frozenset({'get', 'list', 'watch', 'create', 'update', 'patch', 'delete', 'deletecollection',
                   'impersonate', 'bind', 'escalate', 'approve', 'sign', 'use'})


class Scope(enum.Enum):
    """Where a request goes: a namespace named in the code, or one found at run time."""
    LITERAL = 'literal'  # a namespace named in the code
    OBJECT = 'the handled object'  # the handled object's own namespace: the operator's namespaces
    UNKNOWN = 'unknown'  # an expression not resolved statically: the operator's namespaces, with a warning
    DEFAULT = 'default'  # not given, or a reference without a call: the operator's namespaces
    ALL = 'all'  # every namespace at once (``list_..._for_all_namespaces``): cluster-wide
    DATA = "the object's data"  # read from the handled object (spec, status, labels): any that users name


@dataclasses.dataclass(frozen=True)
class Namespace:
    """A request's namespace: a literal one, or a scope."""
    scope: Scope
    name: str | None = None
    text: str = ''  # the expression, where it is not known statically

    @classmethod
    def literal(cls, name: str) -> Namespace:
        return cls(Scope.LITERAL, name)

    def __str__(self) -> str:
        return repr(self.name) if self.name is not None else self.scope.value


OBJECT = Namespace(Scope.OBJECT)
UNKNOWN = Namespace(Scope.UNKNOWN)
DEFAULT = Namespace(Scope.DEFAULT)
ALL = Namespace(Scope.ALL)


@dataclasses.dataclass(frozen=True)
class Site:
    """Where in the operator's code a request is made: its file, line and function."""
    file: str
    line: int
    function: str
    last: int = dataclasses.field(default=0, compare=False)  # the call's last line, if it spans several

    def __str__(self) -> str:
        return f"{self.file}:{self.line}"

    def lines(self) -> range:
        return range(self.line, max(self.line, self.last) + 1)


class Target:
    """A resource as a client names it; resolved with the resources the cluster serves."""

    def resolve(self, resources: Sequence[Resource]) -> tuple[list[tuple[Resource, str]], str | None]:
        """The resources (with a subresource, or '') that this names, and what to say of it: why
        none, or why these (e.g. granted as named, not served now)."""
        raise NotImplementedError  # every kind of target resolves in its own way

    def __str__(self) -> str:
        raise NotImplementedError  # every kind of target says itself


def _matching(resources: Iterable[Resource], group: str | None, version: str | None = None) -> list[Resource]:
    return [r for r in resources if (group is None or r.group == group) and (version is None or r.version == version)]


def _preferred(found: list[Resource]) -> list[Resource]:
    """One resource per group and plural: RBAC does not tell versions apart."""
    unique: dict[tuple[str, str], Resource] = {}
    for resource in sorted(found, key=lambda r: not r.preferred):
        unique.setdefault((resource.group, resource.plural), resource)
    return list(unique.values())


def _subresource(resource: Resource, subresource: str) -> str | None:
    if not subresource or subresource in resource.subresources:
        return subresource
    return None


@dataclasses.dataclass(frozen=True)
class ByPlural(Target):
    """A group (None: any) and a plural, with an optional subresource; whether it is namespaced,
    if the client says so (then a rule can be written for it even if the cluster does not serve
    it now: its CRD installed later, or a request the operator makes anyway)."""
    group: str | None
    plural: str
    subresource: str = ''
    version: str | None = None
    namespaced: bool | None = None

    def resolve(self, resources: Sequence[Resource]) -> tuple[list[tuple[Resource, str]], str | None]:
        found = [r for r in _matching(resources, self.group, self.version) if r.plural == self.plural]
        if not found and self.group is not None and self.namespaced is not None:
            named = Resource(self.group, self.version or '', self.plural, namespaced=self.namespaced,
                             subresources=frozenset({self.subresource} - {''}))
            return [(named, self.subresource)], f"{self}: not served by the cluster now; granted as named"
        return _with_subresource(_preferred(found), self.subresource, str(self))

    def __str__(self) -> str:
        group = f".{self.group}" if self.group else ''
        return f"{self.plural}{group}" + (f"/{self.subresource}" if self.subresource else '')


@dataclasses.dataclass(frozen=True)
class ByKind(Target):
    """A group (None: any; '' is the core group) and a kind (``ConfigMap``)."""
    group: str | None
    kind: str
    subresource: str = ''
    version: str | None = None

    def resolve(self, resources: Sequence[Resource]) -> tuple[list[tuple[Resource, str]], str | None]:
        found = [r for r in _matching(resources, self.group, self.version) if r.kind == self.kind]
        found = _preferred(found)
        if self.group is None and len({r.group for r in found}) > 1:
            groups = ', '.join(sorted(r.group or 'core' for r in found))
            return [], f"the kind {self.kind} is served by several groups ({groups})"
        return _with_subresource(found, self.subresource, str(self))

    def __str__(self) -> str:
        group = f" ({self.group or 'core'})" if self.group is not None else ''
        return f"{self.kind}{group}" + (f"/{self.subresource}" if self.subresource else '')


@dataclasses.dataclass(frozen=True)
class ByName(Target):
    """A name as kubectl takes it: a plural, singular, short name or kind, optionally with
    its group (``deployments.apps``, ``deploy``, ``Deployment``)."""
    text: str
    subresource: str = ''

    def resolve(self, resources: Sequence[Resource]) -> tuple[list[tuple[Resource, str]], str | None]:
        name, _, group = self.text.partition('.')
        if '/' in name:  # "apps/v1/deployments" or similar forms are not names
            return [], f"{self.text!r} is not a resource's name"
        found = [r for r in resources if (not group or r.group == group) and
                 (name.lower() in (r.plural, r.singular, (r.kind or '').lower()) or name.lower() in r.shortcuts)]
        found = _preferred(found)
        # The core group wins, as kubectl's resolution does for names served by several groups.
        if len({r.group for r in found}) > 1:
            core = [r for r in found if r.group == '']
            if not core:
                return [], f"{self.text!r} names resources of several groups " \
                           f"({', '.join(sorted(r.group for r in found))})"
            found = core
        return _with_subresource(found, self.subresource, str(self))

    def __str__(self) -> str:
        return self.text + (f"/{self.subresource}" if self.subresource else '')


def _camel(group: str) -> str:
    """A group as the OpenAPI generator names its API classes (``rbac.authorization.k8s.io``
    → ``RbacAuthorization``; the core group is ``Core``)."""
    if not group:
        return 'Core'
    return ''.join(part.capitalize() for part in group.removesuffix('.k8s.io').split('.'))


@dataclasses.dataclass(frozen=True)
class ByTypedMethod(Target):
    """A method of the OpenAPI-generated clients (``kubernetes``, ``kubernetes_asyncio``):
    the API class's group part (``AppsV1``) and the method's name past its verb
    (``namespaced_deployment_scale``): the kind in snake case, then a subresource."""
    api: str  # the class's name without "Api": "CoreV1", "AppsV1", "RbacAuthorizationV1"
    rest: str  # e.g. "config_map", "pod_log", "deployment_scale"

    def resolve(self, resources: Sequence[Resource]) -> tuple[list[tuple[Resource, str]], str | None]:
        match = re.fullmatch(r'(\w+?)(V\d+(?:(?:alpha|beta)\d+)?)', self.api)
        if not match:
            return [], f"{self.api}Api is not an API group's class"
        camel, version = match[1], match[2].lower()
        candidates = [r for r in resources if _camel(r.group) == camel and r.version == version]
        words = self.rest.split('_')
        for cut in range(len(words), 0, -1):
            kind = ''.join(words[:cut])
            subresource = '_'.join(words[cut:])
            for resource in candidates:
                if (resource.kind or '').lower() == kind and _subresource(resource, subresource) is not None:
                    return [(resource, subresource)], None
        return [], f"no resource of {self.api}Api is named by {self.rest!r}"

    def __str__(self) -> str:
        return f"{self.api}Api: {self.rest}"


def _with_subresource(found: list[Resource], subresource: str,
                      text: str) -> tuple[list[tuple[Resource, str]], str | None]:
    if not found:
        return [], f"{text}: not served by the cluster"
    resolved = [(r, subresource) for r in found if _subresource(r, subresource) is not None]
    if not resolved:
        return [], f"{text}: the cluster serves no such subresource"
    return resolved, None


@dataclasses.dataclass(frozen=True)
class Use:
    """A request that the operator's code makes: its verbs on a target, where it goes, how it is
    made (``via``: the client's call), and where in the code (``site``)."""
    verbs: tuple[str, ...]
    target: Target
    namespace: Namespace
    via: str
    site: Site | None = None


@dataclasses.dataclass(frozen=True)
class Unresolved:
    """A request that cannot be resolved statically: said as a warning with its place."""
    site: Site
    text: str

    def __str__(self) -> str:
        return f"{self.site} (in {self.site.function}): {self.text}"
