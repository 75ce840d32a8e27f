"""``kopf rbac generate`` and ``kopf rbac verify``: the rules for the cluster's resources, as
YAML, or checked against the current credentials with SelfSubjectAccessReviews."""

from __future__ import annotations

import json
import logging
from typing import Any

from kopf._activities import authenticate
from kopf._bridge import services
from kopf._bridge.protocol import ResourceInfo
from kopf._errors import OperatorError
from kopf._handlers import OperatorRegistry
from kopf._rbac.planning import Plan, Rule, plan
from kopf._rbac.rendering import render
from kopf._references import Resource
from kopf._settings import OperatorSettings

logger = logging.getLogger('kopf._core.engines.rbac')


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
