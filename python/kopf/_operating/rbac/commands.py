"""``kopf rbac generate`` and ``kopf rbac verify``: the rules for the cluster's resources, as
YAML, or checked against the current credentials (SelfSubjectAccessReviews) or an RBAC file."""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

from kopf._bridge import services
from kopf._bridge.protocol import ResourceInfo
from kopf._handling.activities import authenticate
from kopf._handling.handlers import OperatorRegistry
from kopf._operating.rbac import granting
from kopf._operating.rbac.planning import plan
from kopf._operating.rbac.rendering import render
from kopf._operating.rbac.rules import Plan, Rule
from kopf._structures.errors import OperatorError
from kopf._structures.references import Resource
from kopf._structures.settings import OperatorSettings

logger = logging.getLogger('kopf._core.engines.rbac')


async def _connect(registry: OperatorRegistry, settings: OperatorSettings) -> str:
    connection = await authenticate(registry=registry, settings=settings, memo=None)
    return json.dumps(connection)


async def _discover(connection: str) -> list[ResourceInfo]:
    try:
        return json.loads(await services.discover(connection))  # type: ignore[no-any-return]
    except RuntimeError as e:
        raise OperatorError(str(e)) from None


def crd_path(name: str) -> str:
    """The API path of the CRD of this name (for ``_read``)."""
    return f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{name}"


async def _read(connection: str, paths: list[str]) -> list[Any]:
    """The objects at these API paths (None: absent); a RuntimeError names the request that failed."""
    return [found or None for found in json.loads(await services.read_objects(connection, paths))]


async def _plan(registry: OperatorRegistry, settings: OperatorSettings, connection: str,
                **options: Any) -> Plan:
    resources = [Resource.from_engine(data) for data in await _discover(connection)]
    return plan(registry=registry, resources=resources, settings=settings, **options)


async def generate(*, registry: OperatorRegistry, source: str, **options: Any) -> tuple[str, list[str]]:
    """The YAML documents, and the warnings about the handlers' requests not known statically."""
    settings = OperatorSettings()
    connection = await _connect(registry, settings)
    planned = await _plan(registry, settings, connection, **options)
    return render(planned, source=f"the operator {source}"), planned.warnings


async def verify(*, registry: OperatorRegistry, rbac: Path | None = None, cluster: bool = True,
                 **options: Any) -> tuple[list[str], list[str]]:
    """What is missing, one line per verb and rule with who needs it (empty: all granted): in the
    cluster for the current credentials (SelfSubjectAccessReviews), and/or in an RBAC file (its
    roles where its bindings put them); and the warnings about the handlers' requests."""
    settings = OperatorSettings()
    connection = await _connect(registry, settings)
    needed = await _plan(registry, settings, connection, **options)
    checks: list[tuple[Rule, str]] = [(rule, verb) for rule in needed.rules.values() for verb in sorted(rule.verbs)]
    missing: list[str] = []
    if cluster:
        attributes = [{'verb': verb, 'group': rule.group, 'resource': rule.resource.partition('/')[0],
                       'subresource': rule.resource.partition('/')[2], 'namespace': rule.namespace or ''}
                      for rule, verb in checks]
        try:
            allowed = json.loads(await services.review_access(connection, json.dumps(attributes)))
        except RuntimeError as e:
            raise OperatorError(str(e)) from None
        found = [_missing(rule, verb) for (rule, verb), ok in zip(checks, allowed, strict=True) if not ok]
        logger.info(f"Checked {len(checks)} permissions: {len(checks) - len(found)} granted, "
                    f"{len(found)} missing.")
        missing += [f"Missing: {line}" for line in found]
    if rbac is not None:
        try:
            grants = granting.read(rbac.read_text(), source=str(rbac))
        except (OSError, ValueError) as e:
            raise OperatorError(f"The RBAC file {rbac} cannot be read: {e}") from None
        found = [_missing(rule, verb) for rule, verb in checks
                 if not granting.allowed(grants, rule.namespace, rule.group, rule.resource, verb)]
        logger.info(f"Checked {len(checks)} permissions in {rbac}: {len(checks) - len(found)} granted, "
                    f"{len(found)} missing.")
        missing += [f"Missing in {rbac}: {line}" for line in found]
    return missing, needed.warnings


def _missing(rule: Rule, verb: str) -> str:
    place = f"in the namespace {rule.namespace!r}" if rule.namespace else "cluster-wide"
    whos = '; '.join(sorted(rule.verbs[verb]))
    return f"{verb} {rule.resource} ({rule.group or 'core'}) {place}: needed by {whos}"
