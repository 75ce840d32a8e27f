"""The rules `kopf rbac generate` reads from the handlers' own code, client by client, and those
declared with `kopf.rbac`: each with its place and its handler, and a warning with file:line
for what the code leaves unknown. The operators are files written here and loaded as `kopf run`
loads them; nothing of their code runs but the module's top level."""

from __future__ import annotations

import re
import textwrap
from collections.abc import Iterator
from pathlib import Path

import kopf
import pytest
from kopf._handling.handlers import get_default_registry, set_default_registry
from kopf._operating import loading as _loading
from kopf._operating.rbac import declaring, introspecting, requesting
from kopf._operating.rbac.declaring import DeclarationError
from kopf._operating.rbac.rules import Plan
from support import request_sites

R = kopf.Resource
RESOURCES = [
    R('', 'v1', 'configmaps', kind='ConfigMap', singular='configmap', shortcuts=frozenset({'cm'}), namespaced=True),
    R('', 'v1', 'secrets', kind='Secret', singular='secret', namespaced=True),
    R('', 'v1', 'pods', kind='Pod', singular='pod', shortcuts=frozenset({'po'}), namespaced=True,
      subresources=frozenset({'log', 'exec', 'status', 'eviction'})),
    R('', 'v1', 'services', kind='Service', singular='service', shortcuts=frozenset({'svc'}), namespaced=True,
      subresources=frozenset({'status', 'proxy'})),
    R('', 'v1', 'namespaces', kind='Namespace', singular='namespace', shortcuts=frozenset({'ns'}), namespaced=False),
    R('', 'v1', 'events', kind='Event', singular='event', namespaced=True),
    R('apps', 'v1', 'deployments', kind='Deployment', singular='deployment', shortcuts=frozenset({'deploy'}),
      namespaced=True, subresources=frozenset({'status', 'scale'})),
    R('demo.kopf.dev', 'v1', 'greetings', kind='Greeting', singular='greeting', namespaced=True,
      subresources=frozenset({'status'})),
    R('rbac.authorization.k8s.io', 'v1', 'roles', kind='Role', singular='role', namespaced=True),
    R('rbac.authorization.k8s.io', 'v1', 'rolebindings', kind='RoleBinding', singular='rolebinding', namespaced=True),
    R('rbac.authorization.k8s.io', 'v1', 'clusterroles', kind='ClusterRole', singular='clusterrole', namespaced=False),
]

Rules = dict[tuple[str | None, str, str], dict[str, set[str]]]


@pytest.fixture(autouse=True)
def registry() -> Iterator[kopf.OperatorRegistry]:
    """A registry of its own for each test (the operators' decorators use the default one)."""
    previous = get_default_registry()
    fresh = kopf.OperatorRegistry()
    set_default_registry(fresh)
    declaring.DECORATED.clear()  # (the earlier tests' functions: another operator's)
    yield fresh
    declaring.DECORATED.clear()  # (nor this test's for the later ones, in other modules too)
    set_default_registry(previous)


def load(tmp_path: Path, code: str, name: str = 'handlers.py', **files: str) -> None:
    for filename, text in files.items():
        (tmp_path / filename).write_text(textwrap.dedent(text))
    path = tmp_path / name
    path.write_text(textwrap.dedent(code))
    _loading.preload([str(path)], [])


def needed(namespaces: list[str | None]) -> tuple[Rules, list[str]]:
    plan = Plan(account='op', account_namespace='ns1')
    requesting.add(plan, registry=get_default_registry(), resources=RESOURCES, in_namespaces=namespaces)
    return {key: rule.verbs for key, rule in plan.rules.items()}, plan.warnings


def verbs(rules: Rules) -> dict[tuple[str | None, str, str], list[str]]:
    return {key: sorted(value) for key, value in rules.items()}


def reasons(rules: Rules, key: tuple[str | None, str, str], verb: str) -> set[str]:
    return rules[key][verb]


def test_kubernetes_typed_apis_custom_objects_and_watches(tmp_path: Path) -> None:
    load(tmp_path, """
        import kopf
        from kubernetes import client, watch

        GROUP = 'demo.kopf.dev'

        @kopf.on.create('greetings')
        def light(name, namespace, spec, **_):
            api = client.CoreV1Api()
            api.create_namespaced_config_map(namespace, {'metadata': {'name': name}})
            client.AppsV1Api().patch_namespaced_deployment_scale(name, namespace, {'spec': {'replicas': 1}})
            client.CustomObjectsApi().get_namespaced_custom_object(GROUP, 'v1', namespace, 'greetings', name)
            api.read_namespaced_secret('token', 'vault')
            api.list_pod_for_all_namespaces()
            for event in watch.Watch().stream(api.list_namespaced_pod, namespace):
                pass
            plural = spec['plural']
            client.CustomObjectsApi().list_namespaced_custom_object(GROUP, 'v1', namespace, plural)
            api.read_namespaced_pod_log(name, spec['elsewhere'])
    """)
    rules, warnings = needed(['ns1'])
    assert verbs(rules) == {
        ('ns1', '', 'configmaps'): ['create'],
        ('ns1', 'apps', 'deployments/scale'): ['patch'],
        ('ns1', 'demo.kopf.dev', 'greetings'): ['get'],
        ('vault', '', 'secrets'): ['get'],
        (None, '', 'pods'): ['list'],
        ('ns1', '', 'pods'): ['list', 'watch'],
        (None, '', 'pods/log'): ['get'],  # where its spec says: any namespace
    }
    assert reasons(rules, ('ns1', '', 'configmaps'), 'create') == {
        "CoreV1Api.create_namespaced_config_map at handlers.py:10, from handler 'light'"}
    assert warnings == [
        "handlers.py:19 (in light): CoreV1Api.read_namespaced_pod_log: the namespace (spec['elsewhere']) is read "
        "from the object's data: granted in every namespace, as its users may name any (reached from handler "
        "'light'); to narrow it, declare the namespaces on light with kopf.rbac.needs(..., namespace=...)",
        "handlers.py:18 (in light): CustomObjectsApi.list_namespaced_custom_object: the plural (plural) not known "
        "statically (reached from handler 'light')",
    ]
    # Cluster-wide (-A): every namespace at once, and no warning about namespaces.
    rules, warnings = needed([None])
    assert verbs(rules)[(None, '', 'configmaps')] == ['create']
    assert verbs(rules)[('vault', '', 'secrets')] == ['get']  # (a named namespace stays a Role there)
    assert len(warnings) == 1


def test_calls_into_the_operators_own_code_are_followed_with_their_arguments(tmp_path: Path) -> None:
    load(tmp_path, """
        import kopf
        import children

        @kopf.on.create('greetings')
        async def create_fn(name, namespace, **_):
            await children.ensure(namespace, 'secrets', name)

        @kopf.timer('greetings', interval=10)
        def check(namespace, **_):
            children.Kids().sweep(namespace)
    """, **{'children.py': """
        from kubernetes_asyncio import client
        import kubernetes

        KINDS = {
            'secrets': ('read_namespaced_secret', 'create_namespaced_secret'),
            'configmaps': ('read_namespaced_config_map', 'create_namespaced_config_map'),
        }

        async def ensure(namespace, kind, name):
            api = client.CoreV1Api()
            read, create = KINDS[kind]
            await getattr(api, read)(name, namespace)
            await getattr(api, create)(namespace, {})

        class Kids:
            def __init__(self):
                self.apps = kubernetes.client.AppsV1Api()

            def sweep(self, namespace):
                self.apps.delete_collection_namespaced_deployment(namespace)
    """})
    rules, warnings = needed(['ns1'])
    assert verbs(rules) == {
        ('ns1', '', 'secrets'): ['create', 'get'],  # only what the literal 'secrets' picks from the table
        ('ns1', 'apps', 'deployments'): ['deletecollection'],
    }
    assert reasons(rules, ('ns1', '', 'secrets'), 'get') == {
        "CoreV1Api.read_namespaced_secret at children.py:13, from handler 'create_fn'"}
    assert reasons(rules, ('ns1', 'apps', 'deployments'), 'deletecollection') == {
        "AppsV1Api.delete_collection_namespaced_deployment at children.py:21, from timer 'check'"}
    assert warnings == []


def test_pykube_objects_queries_and_factories(tmp_path: Path) -> None:
    load(tmp_path, """
        import kopf
        import pykube

        @kopf.on.create('greetings')
        def create_fn(namespace, body, **_):
            api = pykube.HTTPClient(pykube.KubeConfig.from_env())
            pykube.ConfigMap(api, {'metadata': {'name': 'x', 'namespace': namespace}}).create()
            for pod in pykube.Pod.objects(api).filter(namespace=namespace, selector={'app': 'x'}):
                pod.delete()
            pykube.Secret.objects(api, namespace=pykube.all).get_by_name('creds')
            Scaled = pykube.object_factory(api, 'apps/v1', 'Deployment')
            Scaled(api, {}).update()
    """)
    rules, warnings = needed(['ns1'])
    assert verbs(rules) == {
        ('ns1', '', 'configmaps'): ['create'],
        ('ns1', '', 'pods'): ['delete', 'list'],
        (None, '', 'secrets'): ['get'],
        ('ns1', 'apps', 'deployments'): ['patch'],
    }
    assert warnings == []


def test_kr8s_objects_classes_and_lookups_by_kind(tmp_path: Path) -> None:
    load(tmp_path, """
        import kopf
        import kr8s.asyncio
        from kr8s.asyncio.objects import Deployment, Pod, new_class

        Greeting = new_class('Greeting', 'demo.kopf.dev/v1', namespaced=True)

        @kopf.on.create('greetings')
        async def create_fn(name, namespace, **_):
            deployment = await Deployment({'metadata': {'name': name}}, namespace=namespace)
            if not await deployment.exists():
                await deployment.create()
            greeting = await Greeting.get(name, namespace=namespace)
            await greeting.patch({'status': {'ok': True}}, subresource='status')
            async for pod in kr8s.asyncio.get('pods', namespace=namespace, label_selector={'app': name}):
                await pod.delete()
            async for anything in kr8s.asyncio.get(name, namespace=kr8s.ALL):
                pass
    """)
    rules, warnings = needed(['ns1'])
    assert verbs(rules) == {
        ('ns1', 'apps', 'deployments'): ['create', 'get'],
        ('ns1', 'demo.kopf.dev', 'greetings'): ['list'],
        ('ns1', 'demo.kopf.dev', 'greetings/status'): ['patch'],
        ('ns1', '', 'pods'): ['delete', 'list'],
    }
    assert len(warnings) == 1 and warnings[0].startswith("handlers.py:17 (in create_fn): kr8s kr8s.get(name): "
                                                         "the kind is not known statically")


def test_lightkube_clients_with_resource_classes_and_generic_resources(tmp_path: Path) -> None:
    load(tmp_path, """
        import kopf
        from lightkube import Client
        from lightkube.generic_resource import create_namespaced_resource
        from lightkube.resources.apps_v1 import Deployment
        from lightkube.resources.core_v1 import ConfigMap, Pod

        Greeting = create_namespaced_resource('demo.kopf.dev', 'v1', 'Greeting', 'greetings')

        @kopf.on.create('greetings')
        def create_fn(name, namespace, **_):
            client = Client()
            client.create(ConfigMap(metadata={'name': name}), namespace=namespace)
            client.patch(Deployment.Scale, name, {'spec': {'replicas': 2}}, namespace=namespace)
            client.list(Pod, namespace='*')
            client.get(Greeting, name, namespace=namespace)
            client.apply(Greeting({'metadata': {'name': name}}), namespace=namespace)
    """)
    rules, warnings = needed(['ns1'])
    assert verbs(rules) == {
        ('ns1', '', 'configmaps'): ['create'],
        ('ns1', 'apps', 'deployments/scale'): ['patch'],
        (None, '', 'pods'): ['list'],
        ('ns1', 'demo.kopf.dev', 'greetings'): ['create', 'get', 'patch'],
    }
    assert warnings == []


def test_declarations_on_handlers_and_for_the_operator(tmp_path: Path) -> None:
    load(tmp_path, """
        import kopf

        @kopf.on.create('greetings')
        @kopf.rbac.needs('apps', 'v1', 'deployments', verbs=['create', 'patch'])
        def create_fn(**_):
            pass

        @kopf.rbac.needs('pods/log', verbs=['get'], namespace='*')
        @kopf.timer('greetings', interval=10)
        def tick(**_):
            helper()

        @kopf.rbac.needs('configmaps', verbs=['get'])
        def helper():
            pass

        @kopf.rbac.needs('services', verbs=['get'])
        def unseen():
            pass

        kopf.rbac.declare('secrets', verbs=['get'], namespace='vault', reason="the vault's token")
    """)
    rules, warnings = needed(['ns1'])
    assert verbs(rules) == {
        ('ns1', 'apps', 'deployments'): ['create', 'patch'],
        (None, '', 'pods/log'): ['get'],
        ('ns1', '', 'configmaps'): ['get'],
        ('ns1', '', 'services'): ['get'],
        ('vault', '', 'secrets'): ['get'],
    }
    assert reasons(rules, ('ns1', 'apps', 'deployments'), 'create') == {
        "kopf.rbac.needs(group='apps', version='v1', any_name='deployments', verbs=['create', 'patch']) "
        "at handlers.py:5 for handler 'create_fn'"}
    assert reasons(rules, ('ns1', '', 'configmaps'), 'get') == {
        "kopf.rbac.needs(any_name='configmaps', verbs=['get']) at handlers.py:14 for timer 'tick'"}
    assert reasons(rules, ('ns1', '', 'services'), 'get') == {
        "kopf.rbac.needs(any_name='services', verbs=['get']) at handlers.py:18 (on unseen, which no handler is "
        "seen to call: for the operator)"}
    assert reasons(rules, ('vault', '', 'secrets'), 'get') == {
        "kopf.rbac.declare(any_name='secrets', verbs=['get']) at handlers.py:22: the vault's token"}
    assert warnings == []


@pytest.mark.parametrize('code, error', [
    ("kopf.rbac.declare('secrets', verbs=['craete'])", "Unknown RBAC verbs ['craete']: use some of"),
    ("kopf.rbac.declare('secrets', verbs='get')", "verbs must be a collection of verbs, not a string"),
    ("kopf.rbac.declare('secrets', verbs=['get'], namespace='team-*')", "cannot name namespaces by a pattern"),
    ("kopf.rbac.declare(kopf.EVERYTHING, verbs=['get'])", "names one resource"),
])
def test_a_bad_declaration_fails_when_declared(tmp_path: Path, code: str, error: str) -> None:
    with pytest.raises((ValueError, TypeError), match=error.replace('[', r'\[').replace('(', r'\(')):
        load(tmp_path, f"import kopf\n{code}\n")


def test_a_declaration_of_a_resource_not_served_fails_when_planned(tmp_path: Path) -> None:
    load(tmp_path, "import kopf\nkopf.rbac.declare('widgets', verbs=['get'])\n")
    with pytest.raises(DeclarationError, match=r"kopf.rbac.declare\(any_name='widgets', verbs=\['get'\]\) at "
                                               r"handlers.py:2: no such resource is served by the cluster"):
        needed(['ns1'])


def test_kopf_events_and_what_kopf_itself_requests_are_not_the_handlers(tmp_path: Path) -> None:
    load(tmp_path, """
        import kopf

        @kopf.on.create('greetings')
        def create_fn(body, **_):
            kopf.info(body, reason='Hello', message='hello')
    """)
    rules, warnings = needed(['ns1'])
    assert verbs(rules) == {('ns1', '', 'events'): ['create']}
    assert warnings == []



def test_wrappers_classmethods_and_clients_made_at_startup_are_seen_through(tmp_path: Path) -> None:
    load(tmp_path, """
        import kopf
        from kubernetes_asyncio.client import CustomObjectsApi

        _api = None

        class GreetingCRD:
            @classmethod
            def group(cls):
                return 'demo.kopf.dev'

            @classmethod
            def plural(cls):
                return cls.__name__.lower().removesuffix('crd') + 's'

        def retried(fn, *args, **kwargs):
            return fn(*args, **kwargs)

        def api():
            return _api

        @kopf.on.startup()
        async def init(**_):
            global _api
            _api = CustomObjectsApi()

        @kopf.on.create('greetings')
        async def create_fn(name, namespace, **_):
            await retried(api().patch_namespaced_custom_object, GreetingCRD.group(), 'v1', namespace,
                          GreetingCRD.plural(), name, body={})
    """)
    rules, warnings = needed(['ns1'])
    assert verbs(rules) == {('ns1', 'demo.kopf.dev', 'greetings'): ['patch']}
    assert warnings == []


def test_the_dynamic_client_with_a_literal_resource(tmp_path: Path) -> None:
    load(tmp_path, """
        import kopf
        from kubernetes import dynamic
        from kubernetes.client import api_client

        @kopf.on.create('greetings')
        def create_fn(name, namespace, **_):
            client = dynamic.DynamicClient(api_client.ApiClient())
            maps = client.resources.get(api_version='v1', kind='ConfigMap')
            maps.create(body={'metadata': {'name': name}}, namespace=namespace)
            maps.get(namespace=namespace)
    """)
    rules, warnings = needed(['ns1'])
    assert verbs(rules) == {('ns1', '', 'configmaps'): ['create', 'list']}
    assert warnings == []


def test_functions_handed_to_threads_executors_and_schedulers_are_followed_with_their_arguments(
        tmp_path: Path) -> None:
    load(tmp_path, """
        import asyncio
        import concurrent.futures
        import functools
        import threading
        import kopf
        from kubernetes import client

        GROUP = 'demo.kopf.dev'
        POOL = concurrent.futures.ThreadPoolExecutor()

        def drop(api, name, namespace):
            api.delete_namespaced_secret(name=name, namespace=namespace)

        @kopf.on.create('greetings')
        async def create_fn(name, namespace, spec, **_):
            api = client.CustomObjectsApi()
            core = client.CoreV1Api()
            await asyncio.to_thread(api.get_namespaced_custom_object, group=GROUP, version='v1',
                                    namespace=namespace, plural='greetings', name=name)
            await asyncio.to_thread(core.create_namespaced_config_map, namespace=spec['target'], body={})
            loop = asyncio.get_running_loop()
            await loop.run_in_executor(None, core.read_namespaced_pod, name, namespace)
            POOL.submit(drop, core, name, namespace)
            threading.Thread(target=core.delete_namespaced_service, args=(name, namespace)).start()
            later = functools.partial(client.AppsV1Api().delete_namespaced_deployment, name=name, namespace=namespace)
            later()
    """)
    rules, warnings = needed(['ns1'])
    assert verbs(rules) == {
        ('ns1', 'demo.kopf.dev', 'greetings'): ['get'],
        (None, '', 'configmaps'): ['create'],  # in the namespace its spec names: any
        ('ns1', '', 'pods'): ['get'],
        ('ns1', '', 'secrets'): ['delete'],
        ('ns1', '', 'services'): ['delete'],
        ('ns1', 'apps', 'deployments'): ['delete'],
    }
    # The namespace from the spec: granted everywhere, and said, with its place.
    assert len(warnings) == 1 and warnings[0].startswith(
        "handlers.py:21 (in create_fn): CoreV1Api.create_namespaced_config_map handed to asyncio.to_thread: the "
        "namespace (spec['target']) is read from the object's data: granted in every namespace"), warnings
    # The rules say how the call is made: by what the function was handed to.
    assert reasons(rules, ('ns1', '', 'pods'), 'get') == {
        "CoreV1Api.read_namespaced_pod handed to loop.run_in_executor at handlers.py:23, from handler 'create_fn'"}


def test_a_namespace_from_the_objects_data_is_narrowed_by_its_functions_declaration(tmp_path: Path) -> None:
    load(tmp_path, """
        import kopf
        from kubernetes import client

        @kopf.on.create('greetings')
        @kopf.rbac.needs('configmaps', verbs=['create'], namespace='tenants')
        def create_fn(spec, **_):
            client.CoreV1Api().create_namespaced_config_map(spec['target'], {})
    """)
    rules, warnings = needed(['ns1'])
    assert verbs(rules) == {('tenants', '', 'configmaps'): ['create']}
    assert warnings == []


def test_a_client_method_kept_for_later_with_its_arguments_unknown_is_warned_about(tmp_path: Path) -> None:
    load(tmp_path, """
        import kopf
        from kubernetes import client

        @kopf.on.create('greetings')
        def create_fn(name, namespace, **_):
            api = client.CustomObjectsApi()
            actions = {'fetch': api.get_namespaced_custom_object}
            return actions
    """)
    rules, warnings = needed(['ns1'])
    assert verbs(rules) == {}
    assert len(warnings) == 1 and 'handlers.py:8' in warnings[0] and \
        'CustomObjectsApi.get_namespaced_custom_object is named without a call' in warnings[0], warnings


def test_clients_kept_as_class_attributes_given_by_a_classmethod_at_startup(tmp_path: Path) -> None:
    load(tmp_path, """
        import kopf
        from runtime import TheOperator

        @kopf.on.startup()
        async def startup(**_):
            await TheOperator.on_startup()

        @kopf.on.create('greetings')
        async def create_fn(name, namespace, **_):
            await TheOperator.core_v1_api.read_namespaced_pod(name, namespace)
            await TheOperator.custom_objects_api.create_namespaced_custom_object(
                TheOperator.group, 'v1', namespace, 'greetings', {})
    """, **{'runtime.py': """
        import kubernetes_asyncio

        class TheOperator:
            group = 'demo.kopf.dev'
            core_v1_api = None  # (the other one is not declared at all)

            @classmethod
            async def on_startup(cls):
                await kubernetes_asyncio.config.load_kube_config()
                cls.core_v1_api = kubernetes_asyncio.client.CoreV1Api()
                cls.custom_objects_api = kubernetes_asyncio.client.CustomObjectsApi()
    """})
    rules, warnings = needed(['ns1'])
    assert verbs(rules) == {
        ('ns1', '', 'pods'): ['get'],
        ('ns1', 'demo.kopf.dev', 'greetings'): ['create'],
    }
    assert warnings == []


def test_private_methods_and_attributes_are_found_by_their_mangled_names(tmp_path: Path) -> None:
    load(tmp_path, """
        import kopf
        from kubernetes import client

        class Access:
            def __init__(self):
                self.__rbac = client.RbacAuthorizationV1Api()

            async def handle_create(self, namespace):
                await self.__manage_role(namespace)

            async def __manage_role(self, namespace):
                self.__rbac.create_namespaced_role(namespace, {})
                self.__rbac.patch_namespaced_role_binding('reader', namespace, {})

        @kopf.on.create('greetings')
        async def create_fn(namespace, **_):
            await Access().handle_create(namespace)
    """)
    rules, warnings = needed(['ns1'])
    # Writing roles and bindings needs escalate and bind (their rules are data), where they go.
    assert verbs(rules) == {
        ('ns1', 'rbac.authorization.k8s.io', 'roles'): ['bind', 'create', 'escalate'],
        ('ns1', 'rbac.authorization.k8s.io', 'rolebindings'): ['patch'],
        ('ns1', 'rbac.authorization.k8s.io', 'clusterroles'): ['bind'],
    }
    assert warnings == []


def test_a_request_method_on_an_object_not_known_is_known_by_its_name(tmp_path: Path) -> None:
    load(tmp_path, """
        import kopf
        import kubernetes

        @kopf.on.startup()
        def clients(memo, **_):
            memo.apis = {'core': kubernetes.client.CoreV1Api()}

        @kopf.on.create('greetings')
        def create_fn(name, namespace, memo, **_):
            memo.apis['core'].create_namespaced_config_map(namespace, {})
            memo.custom.get_namespaced_custom_object('demo.kopf.dev', 'v1', namespace, 'greetings', name)
            memo.anything.create_the_world(namespace)  # (not a client's name: nothing)
    """)
    rules, warnings = needed(['ns1'])
    assert verbs(rules) == {
        ('ns1', '', 'configmaps'): ['create'],
        ('ns1', 'demo.kopf.dev', 'greetings'): ['get'],
    }
    assert warnings == []


def test_the_operators_functions_under_wrappers_are_followed(tmp_path: Path) -> None:
    load(tmp_path, """
        import functools
        import kopf
        import kubernetes

        @functools.lru_cache
        def vault():
            return 'vault'

        @functools.cache
        def api():
            return kubernetes.client.CoreV1Api()

        @kopf.on.create('greetings')
        def create_fn(**_):
            api().read_namespaced_secret('token', vault())
    """)
    rules, warnings = needed(['ns1'])
    assert verbs(rules) == {('vault', '', 'secrets'): ['get']}
    assert warnings == []


def test_instance_attributes_given_by_the_constructors_arguments(tmp_path: Path) -> None:
    load(tmp_path, """
        import kopf
        from kubernetes import client

        class Cleaner:
            def __init__(self, namespace, api=None):
                self.namespace = namespace
                self.api = api or client.CoreV1Api()

            def clean(self):
                self.api.delete_namespaced_config_map('leftover', self.namespace)

        @kopf.on.create('greetings')
        def create_fn(namespace, **_):
            Cleaner('team-a').clean()
            Cleaner(namespace=namespace).clean()
    """)
    rules, warnings = needed(['ns1'])
    assert verbs(rules) == {('team-a', '', 'configmaps'): ['delete'], ('ns1', '', 'configmaps'): ['delete']}
    assert warnings == []


def test_a_partials_arguments_given_later_are_not_known(tmp_path: Path) -> None:
    load(tmp_path, """
        import functools
        import kopf
        from kubernetes import client

        @kopf.on.create('greetings')
        def create_fn(**_):
            delete = functools.partial(client.CoreV1Api().delete_namespaced_secret, 'token')
            for namespace in ['a', 'b']:
                delete(namespace=namespace)
    """)
    rules, warnings = needed(['ns1'])
    assert verbs(rules) == {('ns1', '', 'secrets'): ['delete']}
    assert warnings == [
        "handlers.py:8 (in create_fn): CoreV1Api.delete_namespaced_secret handed to functools.partial: the namespace "
        "(not among the arguments seen here) is not known statically: granted in 'ns1' only (reached from handler "
        "'create_fn'); another one needs kopf.rbac.needs(..., namespace=...)"]


def test_a_request_method_that_no_handler_is_seen_to_reach_is_warned_about(tmp_path: Path) -> None:
    load(tmp_path, """
        import kopf
        import helpers
        from kubernetes import client

        class Pods:
            def read_namespaced_pod(self, name, namespace):  # the operator's own, of the same name
                return client.CoreV1Api().read_namespaced_pod(name, namespace)

        @kopf.on.create('greetings')
        def create_fn(name, namespace, spec, **_):
            Pods().read_namespaced_pod(name, namespace)
            getattr(helpers, spec['action'])()  # a function chosen at run time: not followed

        @kopf.on.delete('greetings')
        def delete_fn(**_):
            globals()['dispatch']()

        @kopf.rbac.needs('deployments', verbs=['delete'], namespace='ns1')
        def dispatch():
            client.AppsV1Api().delete_namespaced_deployment('worker', 'ns1')
    """, **{'helpers.py': """
        from kubernetes import client

        def cleanup():
            client.AppsV1Api().delete_collection_namespaced_deployment('ns1')
    """})
    rules, warnings = needed(['ns1'])
    assert ('ns1', '', 'pods') in rules  # the own method of a request's name was followed: not warned
    assert ('ns1', 'apps', 'deployments') in rules  # declared where the request is: not warned
    assert warnings == [
        "helpers.py: request methods that no handler is seen to reach, not granted: "
        "delete_collection_namespaced_deployment at line 5 in cleanup. If the operator makes these requests, "
        "declare them with @kopf.rbac.needs() on their functions"]


def _documented() -> list[tuple[str, str]]:
    """The handlers of the examples and of the docs' complete code blocks that call `kubernetes`."""
    root = Path(__file__).parents[2]
    found = [(str(path.relative_to(root)), path.read_text()) for path in sorted(root.glob('examples/*/*.py'))
             if 'kubernetes' in path.read_text() and 'import kopf' in path.read_text()]
    for page in sorted((root / 'docs').glob('*.md')):
        for number, block in enumerate(re.findall(r"```(?:python|\{code-block\} python)\n(.*?)```", page.read_text(),
                                                  re.S)):
            if 'import kopf' in block and 'kubernetes' in block:
                found.append((f"{page.name}[{number}]", block))
    return found


@pytest.mark.parametrize('name, code', _documented(), ids=[name for name, _ in _documented()])
def test_every_request_of_the_examples_and_the_docs_is_a_rule_or_a_warning(
        tmp_path: Path, name: str, code: str) -> None:
    code = re.sub(r"^:\w+:.*\n", "", code, flags=re.M)  # a code-block's options (its caption)
    load(tmp_path, code)
    path = str((tmp_path / 'handlers.py').resolve())
    plan = Plan(account='op', account_namespace='ns1')
    requesting.add(plan, registry=get_default_registry(), resources=RESOURCES, in_namespaces=['ns1'])
    reasons = '\n'.join(reason for rule in plan.rules.values() for why in rule.verbs.values() for reason in why)
    shown = introspecting.Code([], files=[path]).display(path)  # (as the rules and warnings name it)
    found = request_sites.sites([(path, shown)], request_sites.request_names())
    assert found, f"{name}: no request method found: the check would pass for nothing"
    assert request_sites.silent(found, reasons, plan.warnings) == []
