"""What the engine itself needs for an operator's handlers, run with `kopf run`'s options: the
rules, each verb with who needs it and why.

The engine lists and watches the handlers' resources, patches them (finalizers, progress,
results; their ``/status`` where it is a subresource), posts Events, watches CRDs (to notice
new resources), keeps its peering records or its Lease, and manages admission configurations.
What the handlers do on their own (creating children, reading Secrets) is added from
`requesting`: read from their code, or declared.
"""

from __future__ import annotations

from collections.abc import Collection
from typing import Any

from kopf._handling.handlers import LogHandler, OperatorRegistry, WebhookType
from kopf._operating.rbac import requesting
from kopf._operating.rbac.rules import Plan
from kopf._running import kinds as _kinds
from kopf._running.operator import specific_namespaces
from kopf._structures.references import Resource
from kopf._structures.settings import OperatorSettings


def plan(*, registry: OperatorRegistry, resources: list[Resource], namespaces: Collection[str],
         clusterwide: bool, standalone: bool, peering_name: str, lease_name: str | None,
         lease_namespace: str, account: str, account_namespace: str, shards: str | None = None,
         settings: OperatorSettings | None = None, installed: bool = False) -> Plan:
    """The rules, as the engine started with these options would need them (``installed``: in a
    pod of an OLM bundle or of a generated chart, whose installer configures the webhooks and the
    CRDs' conversion: ``kopf._connecting.webhooks.serve_as_installed``)."""
    settings = settings if settings is not None else OperatorSettings()
    specific = None if clusterwide else specific_namespaces(namespaces)
    result = Plan(account=account, account_namespace=account_namespace, namespaces=tuple(specific or ()))
    # Namespaced objects: watched in each named namespace, or cluster-wide (with globs, the
    # engine watches cluster-wide and filters the namespaces itself).
    in_namespaces: list[str | None] = list(specific) if specific else [None]

    def served(handler: Any) -> list[Resource]:
        return [resource for resource in resources if handler.selector.check(resource)]

    handlers = [(kind, handler) for kind in _kinds.KINDS if kind.watched for handler in kind.handlers(registry)]
    for handler_kind, handler in handlers:
        for resource in served(handler):
            where: list[str | None] = in_namespaces if resource.namespaced else [None]
            who = requesting.label(handler, registry)
            result.need(resource.group, resource.plural, where, ['list', 'watch'], f"{who} (the watch-stream)")
            if not handler_kind.patches:
                continue  # read from the stream only (indices, related functions)
            if isinstance(handler, LogHandler):
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

    for handler in registry._reconciling:  # their children: watched, to wake their owners
        who = requesting.label(handler, registry)
        for owned in handler.owns:
            for resource in [resource for resource in resources if owned.check(resource)]:
                where = in_namespaces if resource.namespaced else [None]
                result.need(resource.group, resource.plural, where, ['list', 'watch'],
                            f"{who} (its children's watch-stream: their changes wake it)")

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

    kinds = {h.reason for h in registry._webhooks} if not installed else set()
    for kind in sorted(kinds):
        plural = 'validatingwebhookconfigurations' if kind == WebhookType.VALIDATING else \
            'mutatingwebhookconfigurations'
        ids = ', '.join(repr(h.id) for h in registry._webhooks if h.reason == kind)
        result.need('admissionregistration.k8s.io', plural, [None], ['create', 'patch'],
                    f"admission handlers {ids} (the configuration kept by settings.admission.managed)")
    if registry._conversions:
        ids = ', '.join(repr(h.id) for h in registry._conversions)
        managed = settings.conversion.managed and not installed
        verbs = ['get', 'patch'] if managed else ['get']
        why = " and their spec.conversion kept by settings.conversion.managed" if managed else ""
        result.need('apiextensions.k8s.io', 'customresourcedefinitions', [None], verbs,
                    f"conversion handlers {ids} (their CRDs' versions read{why})")

    # What the handlers' own code requests (children, Secrets, ...), and what is declared.
    requesting.add(result, registry=registry, resources=resources, in_namespaces=in_namespaces)
    return result
