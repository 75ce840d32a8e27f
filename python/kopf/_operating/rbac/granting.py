"""What an RBAC file grants (its Roles and ClusterRoles, where their bindings put them), and
whether a request is granted by it, as the API server's RBAC authorizer decides: wildcards
(``*`` verbs, groups, resources; ``pods/*``, ``*/scale``), Roles in their namespace,
ClusterRoles everywhere when bound cluster-wide or in a RoleBinding's namespace.

Rules limited to some objects (``resourceNames``) are taken as granting what they name for the
verbs that name an object (``get``, ``update``, ``patch``, ``delete``), and nothing else: a
request's object is not compared."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from typing import Any

import yaml

NAMED_VERBS = frozenset({'get', 'update', 'patch', 'delete'})


@dataclasses.dataclass(frozen=True)
class Grant:
    """One rule of a role, in one place (a namespace, or ``None``: everywhere)."""
    namespace: str | None
    groups: frozenset[str]
    resources: frozenset[str]
    verbs: frozenset[str]
    named: bool  # limited to resourceNames
    role: str  # "ClusterRole x" / "Role ns/x": for messages

    def allows(self, namespace: str | None, group: str, resource: str, verb: str) -> bool:
        if self.namespace is not None and namespace != self.namespace:
            return False
        if self.named and verb not in NAMED_VERBS:
            return False
        return ('*' in self.verbs or verb in self.verbs) and ('*' in self.groups or group in self.groups) and \
            _resource_matches(self.resources, resource)

    def keys(self) -> Iterable[tuple[str | None, str, str, str]]:
        """What it grants, as (namespace, group, resource, verb) (wildcards kept as they are)."""
        for group in sorted(self.groups):
            for resource in sorted(self.resources):
                for verb in sorted(self.verbs):
                    yield self.namespace, group, resource, verb


def _resource_matches(patterns: frozenset[str], resource: str) -> bool:
    if '*' in patterns or resource in patterns:
        return True
    plural, _, subresource = resource.partition('/')
    if subresource:
        return f"{plural}/*" in patterns or f"*/{subresource}" in patterns
    return False


def read(text: str, *, source: str = 'the file') -> list[Grant]:
    """The grants of the roles in a YAML text. With bindings in it, the roles are placed where
    they are bound; without any, each Role in its namespace and each ClusterRole everywhere."""
    documents: list[dict[str, Any]] = []
    try:
        loaded = list(yaml.safe_load_all(text))
    except yaml.YAMLError as e:
        raise ValueError(f"{source} is not YAML: {e}") from None
    for doc in loaded:
        if isinstance(doc, dict):  # (a `kind: List` of objects, as `kubectl get -o yaml` writes them)
            documents.extend(doc.get('items') or [] if doc.get('kind') == 'List' else [doc])
    roles: dict[tuple[str, str | None, str], list[dict[str, Any]]] = {}
    bindings: list[dict[str, Any]] = []
    for doc in documents:
        kind, meta = doc.get('kind'), doc.get('metadata') or {}
        if kind in ('Role', 'ClusterRole'):
            namespace = meta.get('namespace') if kind == 'Role' else None
            roles[(kind, namespace, meta.get('name', ''))] = list(doc.get('rules') or [])
        elif kind in ('RoleBinding', 'ClusterRoleBinding'):
            bindings.append(doc)
    if not roles:
        raise ValueError(f"{source} has no Role or ClusterRole.")
    placed: list[tuple[tuple[str, str | None, str], str | None]] = []
    if not bindings:
        placed = [(key, key[1]) for key in roles]
    for binding in bindings:
        ref = binding.get('roleRef') or {}
        namespace = (binding.get('metadata') or {}).get('namespace') if binding['kind'] == 'RoleBinding' else None
        key = (ref.get('kind', ''), namespace if ref.get('kind') == 'Role' else None, ref.get('name', ''))
        if key in roles:
            placed.append((key, namespace))
    grants: list[Grant] = []
    for (kind, role_namespace, name), where in placed:
        title = f"{kind} {role_namespace}/{name}" if role_namespace else f"{kind} {name}"
        for rule in roles[(kind, role_namespace, name)]:
            if rule.get('nonResourceURLs'):
                continue
            grants.append(Grant(namespace=where, groups=frozenset(rule.get('apiGroups') or []),
                                resources=frozenset(rule.get('resources') or []),
                                verbs=frozenset(rule.get('verbs') or []),
                                named=bool(rule.get('resourceNames')), role=title))
    return grants


def allowed(grants: Iterable[Grant], namespace: str | None, group: str, resource: str, verb: str) -> bool:
    return any(grant.allows(namespace, group, resource, verb) for grant in grants)
