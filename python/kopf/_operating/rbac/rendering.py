"""The rules as YAML documents: a ServiceAccount, its ClusterRole and Roles with their
bindings, each rule with comments saying who needs each verb."""

from __future__ import annotations

import json
from collections.abc import Mapping

from kopf._operating.rbac.rules import Plan, Rule

GENERATED = ("by `kopf rbac generate` (kopf-rs): the engine's, its handlers' own requests as read from",
             "their code, and kopf.rbac's declarations.",
             "Discovery (/api, /apis) is allowed to every authenticated account by default.")


def render(plan: Plan, *, source: str, heading: tuple[str, ...] = GENERATED,
           role_names: Mapping[str, str] | None = None, cluster_role_name: str | None = None) -> str:
    """The YAML documents: the account, its cluster-wide and namespaced roles, the bindings;
    first, comments: the source, then the heading's lines. ``role_names``: the names of the
    roles in some namespaces, instead of the account's (where another role of the account
    may be in the same namespace once a template is rendered); ``cluster_role_name``: the
    ClusterRole's and its binding's, instead of the account's (where the same account may be
    in several namespaces: a chart's releases)."""
    name, namespace = plan.account, plan.account_namespace
    account = {'kind': 'ServiceAccount', 'name': name, 'namespace': namespace}
    comments = [f"# The permissions of {source},", *(f"# {line}" for line in heading)]
    docs = ['\n'.join(comments) + '\n' + _doc('v1', 'ServiceAccount', {'name': name, 'namespace': namespace}, [])]
    cluster = plan.cluster_rules()
    if cluster:
        cluster_role = cluster_role_name or name
        docs.append(_doc('rbac.authorization.k8s.io/v1', 'ClusterRole', {'name': cluster_role}, _rules(cluster)))
        docs.append(_doc('rbac.authorization.k8s.io/v1', 'ClusterRoleBinding', {'name': cluster_role}, [
            f"roleRef: {{apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: {_q(cluster_role)}}}",
            f"subjects: [{_flow(account)}]",
        ]))
    for where, rules in plan.namespaced_rules().items():
        role = (role_names or {}).get(where, name)
        meta = {'name': role, 'namespace': where}
        docs.append(_doc('rbac.authorization.k8s.io/v1', 'Role', meta, _rules(rules)))
        docs.append(_doc('rbac.authorization.k8s.io/v1', 'RoleBinding', meta, [
            f"roleRef: {{apiGroup: rbac.authorization.k8s.io, kind: Role, name: {_q(role)}}}",
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
