"""The rules of an operator's RBAC: verbs on a resource in a namespace (or cluster-wide), each
verb with who needs it; and the plan that gathers them, with the warnings on the way."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable


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
    namespaces: tuple[str, ...] = ()  # the operator's own, where it serves its objects (none: all)
    warnings: list[str] = dataclasses.field(default_factory=list)  # what the handlers' code leaves unknown

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
