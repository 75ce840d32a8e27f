"""What an RBAC file grants, as the API server's RBAC authorizer reads it (`kopf rbac verify
--rbac`, `kopf rbac record --rbac`); and a recorded run against such a file: what it needed and
the file does not grant, what the file grants and the run did not use."""

from __future__ import annotations

import json
import textwrap
from typing import Any

from kopf._operating.rbac import granting, recording

ROLES = textwrap.dedent("""
    apiVersion: rbac.authorization.k8s.io/v1
    kind: Role
    metadata: {name: op, namespace: ns1}
    rules:
      - apiGroups: [""]
        resources: ["configmaps", "pods/*"]
        verbs: ["create", "get"]
      - apiGroups: [""]
        resources: ["secrets"]
        resourceNames: ["token"]
        verbs: ["get", "list"]
    ---
    apiVersion: rbac.authorization.k8s.io/v1
    kind: ClusterRole
    metadata: {name: reader}
    rules:
      - apiGroups: ["*"]
        resources: ["*/scale"]
        verbs: ["*"]
      - nonResourceURLs: ["/metrics"]
        verbs: ["get"]
""")
BINDINGS = textwrap.dedent("""
    ---
    apiVersion: rbac.authorization.k8s.io/v1
    kind: RoleBinding
    metadata: {name: op, namespace: ns1}
    roleRef: {apiGroup: rbac.authorization.k8s.io, kind: Role, name: op}
    subjects: [{kind: ServiceAccount, name: op, namespace: ns1}]
    ---
    apiVersion: rbac.authorization.k8s.io/v1
    kind: RoleBinding
    metadata: {name: reader, namespace: ns2}
    roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: reader}
    subjects: [{kind: ServiceAccount, name: op, namespace: ns1}]
""")


def test_roles_without_bindings_apply_where_they_are() -> None:
    grants = granting.read(ROLES)
    assert granting.allowed(grants, 'ns1', '', 'configmaps', 'create')
    assert not granting.allowed(grants, 'ns2', '', 'configmaps', 'create')  # a Role: its namespace only
    assert not granting.allowed(grants, None, '', 'configmaps', 'get')  # ... and not cluster-wide
    assert granting.allowed(grants, 'ns1', '', 'pods/log', 'get')  # pods/*
    assert not granting.allowed(grants, 'ns1', '', 'pods', 'get')
    assert granting.allowed(grants, 'ns1', '', 'secrets', 'get')  # a named object's verb
    assert not granting.allowed(grants, 'ns1', '', 'secrets', 'list')  # no name, no grant
    assert granting.allowed(grants, None, 'apps', 'deployments/scale', 'patch')  # a ClusterRole: everywhere
    assert not granting.allowed(grants, 'ns3', 'apps', 'deployments', 'patch')


def test_bindings_place_the_roles() -> None:
    grants = granting.read(ROLES + BINDINGS)
    assert granting.allowed(grants, 'ns1', '', 'configmaps', 'create')
    assert granting.allowed(grants, 'ns2', 'apps', 'deployments/scale', 'patch')  # bound in ns2 only
    assert not granting.allowed(grants, 'ns1', 'apps', 'deployments/scale', 'patch')
    assert not granting.allowed(grants, None, 'apps', 'deployments/scale', 'patch')


def entry(verb: str, plural: str, namespace: str | None, code: int = 200, agent: str = 'kopf-rs/0.1.0',
          group: str = '', subresource: str = '') -> dict[str, Any]:
    return {'agent': agent, 'verb': verb, 'code': code, 'count': 2, 'example': f"GET /{plural}",
            'resource': {'group': group, 'version': 'v1', 'resource': plural, 'subresource': subresource,
                         'namespace': namespace}, 'path': None}


def test_a_run_against_a_file_what_is_missing_refused_and_unused() -> None:
    run = recording.Run(exit_code=0, entries=[
        entry('create', 'configmaps', 'ns1', code=201, agent='OpenAPI-Generator/37.0.2/python'),
        entry('list', 'pods', 'ns1', code=403),
        {'agent': 'kopf-rs/0.1.0', 'verb': 'get', 'code': 200, 'count': 5, 'example': 'GET /apis', 'resource': None,
         'path': '/apis'},
    ])
    grants = granting.read(ROLES + BINDINGS)
    comparison = recording.compare(run, grants)
    assert comparison.missing == ["list pods (core) in the namespace 'ns1': kopf-rs/0.1.0: 2 requests, answered 403 "
                                  "(e.g. GET /pods)"]
    assert "get configmaps (core) in the namespace 'ns1' (Role ns1/op)" in comparison.unused
    assert "create configmaps (core) in the namespace 'ns1' (Role ns1/op)" not in comparison.unused
    plan = recording.plan_of(run, account='op', account_namespace='ns1')
    assert {key: sorted(rule.verbs) for key, rule in plan.rules.items()} == {
        ('ns1', '', 'configmaps'): ['create'], ('ns1', '', 'pods'): ['list']}
    assert json.dumps(run.elsewhere()).count('/apis') == 2
    assert [line.split(':')[0] for line in recording.report(run, command=['kopf', 'run'], account='op',
                                                             account_namespace='ns1', rbac=None)[1]] == \
        ["Refused (403)"]


def test_a_file_that_is_not_yaml_or_has_no_roles_is_refused_with_its_name() -> None:
    import pytest
    with pytest.raises(ValueError, match="rbac.yaml is not YAML"):
        granting.read("a: [b", source="rbac.yaml")
    with pytest.raises(ValueError, match="rbac.yaml has no Role or ClusterRole"):
        granting.read("kind: ServiceAccount\n", source="rbac.yaml")
