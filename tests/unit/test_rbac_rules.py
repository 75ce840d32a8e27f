"""The rules `kopf rbac generate` derives from the handlers and the options of `kopf run`."""

from __future__ import annotations

from typing import Any

import kopf
import yaml
from kopf._operating.rbac import planning as _rbac
from kopf._operating.rbac import rendering

GREETINGS = kopf.Resource('demo.kopf.dev', 'v1', 'greetings', kind='Greeting', singular='greeting',
                          namespaced=True, subresources=frozenset({'status'}))
NODES = kopf.Resource('', 'v1', 'nodes', kind='Node', singular='node', namespaced=False)
PEERINGS = kopf.Resource('kopf.dev', 'v1', 'kopfpeerings', kind='KopfPeering', namespaced=True)
CLUSTER_PEERINGS = kopf.Resource('kopf.dev', 'v1', 'clusterkopfpeerings', kind='ClusterKopfPeering',
                                 namespaced=False)
RESOURCES = [GREETINGS, NODES, PEERINGS, CLUSTER_PEERINGS]


def rules(registry: kopf.OperatorRegistry, **options: Any) -> dict[tuple[str | None, str, str], list[str]]:
    defaults: dict[str, Any] = dict(namespaces=['ns1'], clusterwide=False, standalone=True, peering_name='default',
                                    lease_name=None, lease_namespace='ns1', account='op', account_namespace='ns1')
    plan = _rbac.plan(registry=registry, resources=RESOURCES, **(defaults | options))
    return {key: sorted(rule.verbs) for key, rule in plan.rules.items()}


def test_change_handlers_watch_patch_and_post_events_in_their_namespaces() -> None:
    registry = kopf.OperatorRegistry()
    kopf.on.create('greetings', registry=registry)(lambda **_: None)
    assert rules(registry, namespaces=['ns1', 'ns2']) == {
        ('ns1', 'demo.kopf.dev', 'greetings'): ['list', 'patch', 'watch'],
        ('ns1', 'demo.kopf.dev', 'greetings/status'): ['patch'],
        ('ns1', '', 'events'): ['create'],
        ('ns2', 'demo.kopf.dev', 'greetings'): ['list', 'patch', 'watch'],
        ('ns2', 'demo.kopf.dev', 'greetings/status'): ['patch'],
        ('ns2', '', 'events'): ['create'],
        (None, 'apiextensions.k8s.io', 'customresourcedefinitions'): ['list', 'watch'],
    }


def test_indices_only_watch_and_globs_watch_cluster_wide() -> None:
    registry = kopf.OperatorRegistry()
    kopf.index('greetings', registry=registry)(lambda **_: None)
    settings = kopf.OperatorSettings()
    settings.scanning.disabled = True
    assert rules(registry, namespaces=['ns*'], settings=settings) == {
        (None, 'demo.kopf.dev', 'greetings'): ['list', 'watch'],
    }


def test_cluster_scoped_objects_post_their_events_in_the_accounts_namespace() -> None:
    registry = kopf.OperatorRegistry()
    kopf.daemon('nodes', registry=registry)(lambda **_: None)
    found = rules(registry, clusterwide=True, namespaces=[])
    assert found[(None, '', 'nodes')] == ['list', 'patch', 'watch']
    assert ('ns1', '', 'events') in found and (None, '', 'nodes/status') not in found


def test_peering_and_the_lease_and_admission_configurations() -> None:
    registry = kopf.OperatorRegistry()
    kopf.on.validate('greetings', registry=registry)(lambda **_: None)
    kopf.on.mutate('greetings', registry=registry)(lambda **_: None)
    found = rules(registry, standalone=False, namespaces=['ns-*'], lease_name='op-lease', lease_namespace='ops')
    assert found[(None, 'kopf.dev', 'kopfpeerings')] == ['get', 'list', 'patch', 'watch']
    assert found[(None, '', 'namespaces')] == ['list']  # the globs' namespaces, for peering
    assert found[('ops', 'coordination.k8s.io', 'leases')] == ['create', 'get', 'update']
    assert found[(None, 'admissionregistration.k8s.io', 'validatingwebhookconfigurations')] == ['create', 'patch']
    assert found[(None, 'admissionregistration.k8s.io', 'mutatingwebhookconfigurations')] == ['create', 'patch']
    assert (None, 'demo.kopf.dev', 'greetings') not in found  # reviews come to the server, not from a watch
    clusterwide = rules(registry, standalone=False, clusterwide=True, namespaces=[])
    assert clusterwide[(None, 'kopf.dev', 'clusterkopfpeerings')] == ['get', 'list', 'patch', 'watch']


def test_automatic_shards_keep_their_leases() -> None:
    registry = kopf.OperatorRegistry()
    kopf.on.create('greetings', registry=registry)(lambda **_: None)
    found = rules(registry, shards='auto', lease_namespace='ops')
    assert found[('ops', 'coordination.k8s.io', 'leases')] == ['create', 'delete', 'get', 'list', 'update']
    assert ('ops', 'coordination.k8s.io', 'leases') not in rules(registry, lease_namespace='ops')


def test_the_yaml_says_why_each_rule_is_there() -> None:
    registry = kopf.OperatorRegistry()
    kopf.on.create('greetings', id='greet', registry=registry)(lambda **_: None)
    kopf.timer('greetings', id='tick', interval=1, registry=registry)(lambda **_: None)
    plan = _rbac.plan(registry=registry, resources=RESOURCES, namespaces=['ns1'], clusterwide=False,
                      standalone=True, peering_name='default', lease_name=None, lease_namespace='ns1',
                      account='op', account_namespace='ns1')
    text = rendering.render(plan, source='handlers.py')
    documents = list(yaml.safe_load_all(text))
    assert [d['kind'] for d in documents] == ['ServiceAccount', 'ClusterRole', 'ClusterRoleBinding', 'Role',
                                              'RoleBinding']
    assert documents[4]['subjects'] == [{'kind': 'ServiceAccount', 'name': 'op', 'namespace': 'ns1'}]
    assert documents[4]['roleRef'] == {'apiGroup': 'rbac.authorization.k8s.io', 'kind': 'Role', 'name': 'op'}
    assert "  # list, watch: handler 'greet' (the watch-stream)\n" in text
    assert "  # create: timer 'tick' (kopf.event/info/warn/exception" in text


def test_namespace_lists_are_watched_cluster_wide_as_the_engine_does() -> None:
    registry = kopf.OperatorRegistry()
    kopf.on.event('greetings', registry=registry)(lambda **_: None)
    found = rules(registry, namespaces=['ns1,ns2'])
    assert found[(None, 'demo.kopf.dev', 'greetings')] == ['list', 'patch', 'watch']
    assert not [key for key in found if key[0] in ('ns1', 'ns2', 'ns1,ns2')]


def test_conversion_handlers_read_their_crds_and_patch_them_when_managed() -> None:
    registry = kopf.OperatorRegistry()
    kopf.on.convert('greetings.demo.kopf.dev', source='v1', target='v2', registry=registry)(lambda **_: None)
    kopf.on.convert('greetings.demo.kopf.dev', source='v2', target='v1', registry=registry)(lambda **_: None)
    crds = (None, 'apiextensions.k8s.io', 'customresourcedefinitions')
    assert rules(registry)[crds] == ['get', 'list', 'watch']
    settings = kopf.OperatorSettings()
    settings.conversion.managed = True
    settings.scanning.disabled = True
    assert rules(registry, settings=settings) == {crds: ['get', 'patch']}


def test_reconcile_handlers_watch_and_patch_as_change_handlers_do() -> None:
    registry = kopf.OperatorRegistry()
    kopf.on.reconcile('greetings', id='level', registry=registry, finalizer=True)(lambda **_: None)
    assert rules(registry) == {
        ('ns1', 'demo.kopf.dev', 'greetings'): ['list', 'patch', 'watch'],
        ('ns1', 'demo.kopf.dev', 'greetings/status'): ['patch'],
        ('ns1', '', 'events'): ['create'],
        (None, 'apiextensions.k8s.io', 'customresourcedefinitions'): ['list', 'watch'],
    }
    plan = _rbac.plan(registry=registry, resources=RESOURCES, namespaces=['ns1'], clusterwide=False,
                      standalone=True, peering_name='default', lease_name=None, lease_namespace='ns1',
                      account='op', account_namespace='ns1')
    assert "reconcile handler 'level' (the watch-stream)" in rendering.render(plan, source='handlers.py')


def test_the_children_of_reconcile_handlers_are_watched() -> None:
    registry = kopf.OperatorRegistry()
    kopf.on.reconcile('greetings', owns=['nodes'], registry=registry)(lambda **_: None)
    assert rules(registry)[(None, '', 'nodes')] == ['list', 'watch']


def test_the_resources_of_related_functions_are_only_watched() -> None:
    registry = kopf.OperatorRegistry()
    kopf.on.reconcile('greetings', registry=registry)(lambda **_: None)
    kopf.related('nodes', owners='greetings', id='nodes_of', registry=registry)(lambda **_: None)
    assert rules(registry)[(None, '', 'nodes')] == ['list', 'watch']
    plan = _rbac.plan(registry=registry, resources=RESOURCES, namespaces=['ns1'], clusterwide=False,
                      standalone=True, peering_name='default', lease_name=None, lease_namespace='ns1',
                      account='op', account_namespace='ns1')
    assert "related function 'nodes_of' (the watch-stream)" in rendering.render(plan, source='handlers.py')
