"""``kopf rbac generate`` and ``kopf rbac verify`` (not in Kopf): the permissions the engine
needs for an operator's handlers, as a ServiceAccount with its (Cluster)Roles and bindings,
or checked against the current credentials with SelfSubjectAccessReviews.

The rules are what the engine itself does: it lists and watches the handlers' resources,
patches them (finalizers, progress, results; their ``/status`` where it is a subresource),
posts Events, watches CRDs (to notice new resources), keeps its peering records or its
Lease, and manages admission configurations. What the handlers do on their own (creating
children, reading Secrets) needs rules of its own: the generator cannot see inside them.
"""

from __future__ import annotations

import dataclasses
import json
import logging
from collections.abc import Collection, Iterable
from typing import Any

from kopf._activities import authenticate
from kopf._bridge import services
from kopf._bridge.protocol import ResourceInfo
from kopf._bridge.running import specific_namespaces
from kopf._errors import OperatorError
from kopf._handlers import OperatorRegistry, TimerHandler, WebhookType
from kopf._references import Resource
from kopf._settings import OperatorSettings

logger = logging.getLogger('kopf._core.engines.rbac')

EVENTS = ('', 'events')


@dataclasses.dataclass
class Rule:
    """Some verbs on one resource (``plural`` or ``plural/subresource``) of a group, in one
    namespace (or cluster-wide: ``None``), and who needs each of them."""
    group: str
    resource: str
    namespace: str | None
    verbs: dict[str, set[str]] = dataclasses.field(default_factory=dict)  # verb -> who needs it

    def reasons(self) -> list[str]:
        by_who: dict[str, list[str]] = {}
        for verb, whos in self.verbs.items():
            for who in whos:
                by_who.setdefault(who, []).append(verb)
        return [f"{', '.join(sorted(verbs))}: {who}" for who, verbs in sorted(by_who.items())]


@dataclasses.dataclass
class Plan:
    """What the operator, run with these options, needs."""
    account: str
    account_namespace: str
    rules: dict[tuple[str | None, str, str], Rule] = dataclasses.field(default_factory=dict)

    def need(self, group: str, resource: str, namespaces: Iterable[str | None], verbs: Iterable[str],
             who: str) -> None:
        for namespace in namespaces:
            rule = self.rules.setdefault((namespace, group, resource), Rule(group, resource, namespace))
            for verb in verbs:
                rule.verbs.setdefault(verb, set()).add(who)

    def cluster_rules(self) -> list[Rule]:
        return [rule for (namespace, *_), rule in sorted(self.rules.items(), key=_order) if namespace is None]

    def namespaced_rules(self) -> dict[str, list[Rule]]:
        found: dict[str, list[Rule]] = {}
        for (namespace, *_), rule in sorted(self.rules.items(), key=_order):
            if namespace is not None:
                found.setdefault(namespace, []).append(rule)
        return found


def _order(item: tuple[tuple[str | None, str, str], Rule]) -> tuple[str, str, str]:
    (namespace, group, resource), _ = item
    return namespace or '', group, resource


def plan(*, registry: OperatorRegistry, resources: list[Resource], namespaces: Collection[str],
         clusterwide: bool, standalone: bool, peering_name: str, lease_name: str | None,
         lease_namespace: str, account: str, account_namespace: str, shards: str | None = None,
         settings: OperatorSettings | None = None, olm: bool = False) -> Plan:
    """The rules, as the engine started with these options would need them (``olm``: in a pod
    of an OLM bundle, where OLM configures the webhooks and the CRDs' conversion)."""
    settings = settings if settings is not None else OperatorSettings()
    result = Plan(account=account, account_namespace=account_namespace)
    specific = None if clusterwide else specific_namespaces(namespaces)
    # Namespaced objects: watched in each named namespace, or cluster-wide (with globs, the
    # engine watches cluster-wide and filters the namespaces itself).
    in_namespaces: list[str | None] = list(specific) if specific else [None]

    def served(handler: Any) -> list[Resource]:
        return [resource for resource in resources if handler.selector.check(resource)]

    handlers: list[tuple[Any, str]] = [(h, 'handler') for h in registry._changing]
    handlers += [(h, 'on.event handler') for h in registry._watching]
    handlers += [(h, 'timer' if isinstance(h, TimerHandler) else 'daemon') for h in registry._spawning]
    handlers += [(h, 'index') for h in registry._indexing]
    handlers += [(h, 'log handler') for h in registry._logging]
    for handler, what in handlers:
        for resource in served(handler):
            where: list[str | None] = in_namespaces if resource.namespaced else [None]
            who = f"{what} {handler.id!r}"
            result.need(resource.group, resource.plural, where, ['list', 'watch'], f"{who} (the watch-stream)")
            if what == 'index':
                continue  # indices are read from the stream only
            if what == 'log handler':
                if 'log' not in resource.subresources:
                    continue  # not served: its objects have no logs
                result.need(resource.group, f"{resource.plural}/log", where, ['get'],
                            f"{who} (the containers' logs, followed)")
            result.need(resource.group, resource.plural, where, ['patch'],
                        f"{who} (finalizers, progress, results, its patches)")
            if 'status' in resource.subresources:
                result.need(resource.group, f"{resource.plural}/status", where, ['patch'],
                            f"{who} (results and patches of status)")
            if settings.posting.enabled:
                # Cluster-scoped objects' Events go to the operator's own namespace.
                events_where = where if resource.namespaced else [account_namespace]
                result.need('', 'events', events_where, ['create'],
                            f"{who} (kopf.event/info/warn/exception, and log lines with "
                            "settings.posting.loggers)")

    if not settings.scanning.disabled:
        result.need('apiextensions.k8s.io', 'customresourcedefinitions', [None], ['list', 'watch'],
                    "scanning (new and removed CRDs are noticed; without it, one warning and "
                    "only the resources found at start are served)")

    if not standalone:
        peering_clusterwide = clusterwide or not namespaces
        plural = 'clusterkopfpeerings' if peering_clusterwide else 'kopfpeerings'
        peering = next((r for group in ('kopf.dev', 'zalando.org') for r in resources
                        if r.group == group and r.version == 'v1' and r.plural == plural), None)
        if peering is not None:
            places: list[str | None] = [None] if peering_clusterwide or specific is None else list(specific)
            result.need(peering.group, plural, places, ['get', 'list', 'watch', 'patch'],
                        f"peering {peering_name!r} (the operators' keep-alives; --standalone: none)")
            if not peering_clusterwide and specific is None:
                result.need('', 'namespaces', [None], ['list'],
                            "peering (the namespaces that the globs name)")

    if lease_name is not None:
        result.need('coordination.k8s.io', 'leases', [lease_namespace], ['get', 'create', 'update'],
                    f"the leader Lease {lease_name!r}")
    if shards == 'auto' or settings.sharding.auto:
        group = settings.sharding.group
        result.need('coordination.k8s.io', 'leases', [lease_namespace],
                    ['get', 'list', 'create', 'update', 'delete'],
                    f"automatic sharding: the replicas' Leases of the group {group!r} "
                    f"(or the Lease {group}-leader where the API server cannot shard)")

    kinds = {h.reason for h in registry._webhooks} if not olm else set()
    for kind in sorted(kinds):
        plural = 'validatingwebhookconfigurations' if kind == WebhookType.VALIDATING else \
            'mutatingwebhookconfigurations'
        ids = ', '.join(repr(h.id) for h in registry._webhooks if h.reason == kind)
        result.need('admissionregistration.k8s.io', plural, [None], ['create', 'patch'],
                    f"admission handlers {ids} (the configuration kept by settings.admission.managed)")
    if registry._conversions:
        ids = ', '.join(repr(h.id) for h in registry._conversions)
        managed = settings.conversion.managed and not olm
        verbs = ['get', 'patch'] if managed else ['get']
        why = " and their spec.conversion kept by settings.conversion.managed" if managed else ""
        result.need('apiextensions.k8s.io', 'customresourcedefinitions', [None], verbs,
                    f"conversion handlers {ids} (their CRDs' versions read{why})")
    return result


def render(plan: Plan, *, source: str) -> str:
    """The YAML documents: the account, its cluster-wide and namespaced roles, the bindings."""
    name, namespace = plan.account, plan.account_namespace
    account = {'kind': 'ServiceAccount', 'name': name, 'namespace': namespace}
    docs = [
        f"# The permissions of the engine for {source}, by `kopf rbac generate` (kopf-rs).\n"
        "# What the handlers do on their own (e.g. create children) needs rules of its own.\n"
        "# Discovery (/api, /apis) is allowed to every authenticated account by default.\n"
        + _doc('v1', 'ServiceAccount', {'name': name, 'namespace': namespace}, [])
    ]
    cluster = plan.cluster_rules()
    if cluster:
        docs.append(_doc('rbac.authorization.k8s.io/v1', 'ClusterRole', {'name': name}, _rules(cluster)))
        docs.append(_doc('rbac.authorization.k8s.io/v1', 'ClusterRoleBinding', {'name': name}, [
            f"roleRef: {{apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: {_q(name)}}}",
            f"subjects: [{_flow(account)}]",
        ]))
    for where, rules in plan.namespaced_rules().items():
        meta = {'name': name, 'namespace': where}
        docs.append(_doc('rbac.authorization.k8s.io/v1', 'Role', meta, _rules(rules)))
        docs.append(_doc('rbac.authorization.k8s.io/v1', 'RoleBinding', meta, [
            f"roleRef: {{apiGroup: rbac.authorization.k8s.io, kind: Role, name: {_q(name)}}}",
            f"subjects: [{_flow(account)}]",
        ]))
    return '---\n'.join(docs)


def _q(value: str) -> str:
    return json.dumps(value)  # a JSON string is a valid YAML scalar, quoted where needed


def _flow(mapping: dict[str, str]) -> str:
    return '{' + ', '.join(f"{key}: {_q(value)}" for key, value in mapping.items()) + '}'


def _doc(api_version: str, kind: str, metadata: dict[str, str], body: list[str]) -> str:
    lines = [f"apiVersion: {api_version}", f"kind: {kind}", f"metadata: {_flow(metadata)}", *body]
    return '\n'.join(lines) + '\n'


def _rules(rules: list[Rule]) -> list[str]:
    lines = ['rules:']
    for rule in rules:
        lines += [f"  # {reason}" for reason in rule.reasons()]
        lines += [f"  - apiGroups: [{_q(rule.group)}]",
                  f"    resources: [{_q(rule.resource)}]",
                  f"    verbs: [{', '.join(_q(v) for v in sorted(rule.verbs))}]"]
    return lines


async def _connect(registry: OperatorRegistry, settings: OperatorSettings) -> str:
    connection = await authenticate(registry=registry, settings=settings, memo=None)
    return json.dumps(connection)


async def _discover(connection: str) -> list[ResourceInfo]:
    try:
        return json.loads(await services.discover(connection))  # type: ignore[no-any-return]
    except RuntimeError as e:
        raise OperatorError(str(e)) from None


async def _plan(registry: OperatorRegistry, settings: OperatorSettings, connection: str,
                **options: Any) -> Plan:
    resources = [Resource.from_engine(data) for data in await _discover(connection)]
    return plan(registry=registry, resources=resources, settings=settings, **options)


async def generate(*, registry: OperatorRegistry, source: str, **options: Any) -> str:
    settings = OperatorSettings()
    connection = await _connect(registry, settings)
    return render(await _plan(registry, settings, connection, **options), source=source)


async def verify(*, registry: OperatorRegistry, **options: Any) -> list[str]:
    """What is missing, one line per verb and rule with who needs it; empty: all granted."""
    settings = OperatorSettings()
    connection = await _connect(registry, settings)
    needed = await _plan(registry, settings, connection, **options)
    checks: list[tuple[Rule, str]] = []
    attributes: list[dict[str, str]] = []
    for rule in needed.rules.values():
        plural, _, subresource = rule.resource.partition('/')
        for verb in sorted(rule.verbs):
            checks.append((rule, verb))
            attributes.append({'verb': verb, 'group': rule.group, 'resource': plural,
                               'subresource': subresource, 'namespace': rule.namespace or ''})
    try:
        allowed = json.loads(await services.review_access(connection, json.dumps(attributes)))
    except RuntimeError as e:
        raise OperatorError(str(e)) from None
    missing = []
    for (rule, verb), ok in zip(checks, allowed, strict=True):
        if not ok:
            place = f"in the namespace {rule.namespace!r}" if rule.namespace else "cluster-wide"
            whos = '; '.join(sorted(rule.verbs[verb]))
            missing.append(f"{verb} {rule.resource} ({rule.group or 'core'}) {place}: needed by {whos}")
    logger.info(f"Checked {len(checks)} permissions: {len(checks) - len(missing)} granted, "
                f"{len(missing)} missing.")
    return missing
