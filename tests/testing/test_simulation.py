"""``kopf.testing.Simulation``: an operator's handlers run by the real engine against the
simulated API, on a virtual clock that moves only when the test says so. No cluster: each
test is an operator's whole life in a fraction of a second of real time."""

from __future__ import annotations

import asyncio
import json
import logging
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import kopf
import pytest
import yaml
from kopf.testing import SimulatedApiError, Simulation, SyncSimulation
from support.cluster import EXAMPLES
from support.operators import write_script

CRD = yaml.safe_load((EXAMPLES / "crd.yaml").read_text())  # the Greetings of the examples


def greeting(name: str, **spec: Any) -> dict[str, Any]:
    return {"apiVersion": "demo.kopf.dev/v1", "kind": "Greeting", "metadata": {"name": name}, "spec": spec}


def script_list(name: str) -> list[Any]:
    """A list of the operator's script (loaded by the simulation under a name of its own)."""
    [found] = [getattr(m, name) for n, m in sys.modules.items() if n.startswith("__kopf_script_") and hasattr(m, name)]
    return found  # type: ignore[no-any-return]


def simulate(tmp_path: Path, source: str, scenario: Callable[[Simulation], Awaitable[None]]) -> None:
    """Run the scenario with the operator of this source, its CRD created first."""
    async def run() -> None:
        simulation = Simulation(paths=[write_script(tmp_path, source)])
        simulation.create(CRD)
        async with simulation:
            await scenario(simulation)
    asyncio.run(run())


LIFECYCLE = """
import kopf
import kubernetes

@kopf.on.create('greetings')
def greet(name, namespace, spec, body, **_):
    note = {'metadata': {'name': f'{name}-note'}, 'data': {'who': spec['who']}}
    kopf.adopt(note)
    kubernetes.client.CoreV1Api().create_namespaced_config_map(namespace, note)
    kopf.info(body, reason='Greeted', message=f"Greeted {spec['who']}.")
    return f"Hello, {spec['who']}!"

@kopf.on.update('greetings', field='spec.who')
def regreet(new, **_):
    return f"Hello again, {new}!"

@kopf.on.delete('greetings')
def part(name, **_):
    pass
"""


def test_a_lifecycle_is_handled_as_on_a_cluster(tmp_path: Path) -> None:
    async def scenario(sim: Simulation) -> None:
        sim.create(greeting("g1", who="world"))
        await sim.settle()
        g1 = sim.get("greetings", "g1")
        assert g1 is not None
        assert g1["status"]["greet"] == "Hello, world!"
        assert g1["metadata"]["finalizers"] == ["kopf.zalando.org/KopfFinalizerMarker"]
        assert "kopf.zalando.org/last-handled-configuration" in g1["metadata"]["annotations"]
        note = sim.get("configmaps", "g1-note")
        assert note is not None and note["data"] == {"who": "world"}  # by the handler's own client
        assert note["metadata"]["ownerReferences"][0]["uid"] == g1["metadata"]["uid"]
        assert [(e["reason"], e["message"]) for e in sim.events(name="g1")] == [("Greeted", "Greeted world.")]

        sim.patch("greetings", "g1", {"spec": {"who": "simulation"}})
        await sim.settle()
        g1 = sim.get("Greeting", "g1")
        assert g1 is not None and g1["status"]["regreet/spec.who"] == "Hello again, simulation!"

        sim.delete("greetings.demo.kopf.dev", "g1")
        await sim.settle()
        assert sim.get("greetings", "g1") is None, "its finalizer is removed once the handler is done"
        assert sim.get("configmaps", "g1-note") is None, "its child goes with it"
    simulate(tmp_path, LIFECYCLE, scenario)


TICKING = """
import kopf

TICKS = []

@kopf.timer('greetings', interval=1)
def tick(**_):
    TICKS.append(1)

@kopf.on.create('greetings')
def slow(retry, **_):
    if retry < 2:
        raise kopf.TemporaryError("not yet", delay=600)
    return "done"
"""


def test_an_hour_of_timers_and_delays_passes_at_once(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    async def scenario(sim: Simulation) -> None:
        ticks = script_list("TICKS")
        sim.create(greeting("g1"))
        await sim.settle()
        assert len(ticks) == 1  # a timer's first call is at once
        assert sim.now < 0.1
        await sim.advance(599)
        g1 = sim.get("greetings", "g1")
        assert g1 is not None and "slow" not in g1.get("status", {}), "retried before its delay"
        await sim.advance(2)
        started = time.monotonic()
        await sim.advance(3600 - 601)
        real = time.monotonic() - started
        g1 = sim.get("greetings", "g1")
        assert g1 is not None and g1["status"]["slow"] == "done"  # the 2nd retry, 1200 s after the start
        # A timer of 1 s ends on the engine's shared ticks (coalescing.rs): up to 2% late, as on a cluster.
        assert 3600 / 1.02 <= len(ticks) <= 3601, len(ticks)
        assert 3600 <= sim.now < 3601
        with capsys.disabled():
            print(f"\n{len(ticks)} timer calls in {3600 - 601} s of virtual time: {real:.2f} s of real time")
    simulate(tmp_path, TICKING, scenario)


def test_bad_input_is_refused_as_the_api_server_refuses_it(tmp_path: Path) -> None:
    async def scenario(sim: Simulation) -> None:
        with pytest.raises(SimulatedApiError, match="name or generateName is required") as e:
            sim.create({"apiVersion": "demo.kopf.dev/v1", "kind": "Greeting", "metadata": {}})
        assert e.value.status == 422
        with pytest.raises(SimulatedApiError, match="serves no resource 'widgets'"):
            sim.get("widgets", "w1")
        with pytest.raises(ValueError, match="forward"):
            await sim.advance(-1)
        assert sim.get("greetings", "absent") is None
    simulate(tmp_path, "import kopf\n", scenario)


GREETER = """
import kopf

@kopf.on.create('greetings')
def greet(spec, **_):
    return f"Hello, {spec.get('who', 'world')}!"
"""


def test_a_failed_request_is_retried_after_its_backoff(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)

    async def scenario(sim: Simulation) -> None:
        sim.fail("/greetings/g1/status", method="PATCH", status=500)  # one request
        sim.create(greeting("g1"))
        await sim.settle()
        g1 = sim.get("greetings", "g1")
        assert g1 is not None and "greet" not in g1.get("status", {})
        assert "Request attempt #1/9 failed; will retry: PATCH" in caplog.text
        await sim.advance(1)  # settings.networking.error_backoffs: 1 s first
        g1 = sim.get("greetings", "g1")
        assert g1 is not None and g1["status"]["greet"] == "Hello, world!"
        assert caplog.text.count("Handler 'greet' succeeded.") == 1, "not called again for a failed write"
    simulate(tmp_path, GREETER, scenario)


def test_a_write_that_keeps_failing_is_throttled_and_retried(tmp_path: Path,
                                                             caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)

    async def scenario(sim: Simulation) -> None:
        sim.fail("/greetings/g1/status", method="PATCH", status=500, times=None)
        sim.create(greeting("g1"))
        await sim.advance(60)  # all 9 attempts (54 s of backoffs), then the worker throttles
        assert "Throttling for 1 seconds due to an unexpected error" in caplog.text
        sim.heal()
        await sim.advance(60)
        g1 = sim.get("greetings", "g1")
        assert g1 is not None and g1["status"]["greet"] == "Hello, world!"
        assert caplog.text.count("Handler 'greet' succeeded.") == 1, "not called again for a failed write"
    simulate(tmp_path, GREETER, scenario)


def test_too_many_requests_are_retried_after_the_servers_delay(tmp_path: Path) -> None:
    async def scenario(sim: Simulation) -> None:
        sim.fail("/greetings/g1", method="PATCH", status=429, retry_after=30, times=1)
        sim.create(greeting("g1"))
        await sim.settle()
        g1 = sim.get("greetings", "g1")
        assert g1 is not None and "finalizers" not in g1["metadata"]
        await sim.advance(29)
        g1 = sim.get("greetings", "g1")
        assert g1 is not None and "finalizers" not in g1["metadata"], "retried before Retry-After"
        await sim.advance(1)
        g1 = sim.get("greetings", "g1")
        assert g1 is not None and g1["status"]["greet"] == "Hello, world!"
    simulate(tmp_path, GREETER, scenario)


@pytest.mark.parametrize("expire", [False, True], ids=["cut", "expired"])
def test_cut_or_expired_watches_are_watched_again(tmp_path: Path, expire: bool,
                                                  caplog: pytest.LogCaptureFixture) -> None:
    async def scenario(sim: Simulation) -> None:
        sim.cut_watches(expire=expire)
        sim.create(greeting("g1", who="again"))
        await sim.advance(0.1)  # settings.watching.reconnect_backoff
        g1 = sim.get("greetings", "g1")
        assert g1 is not None and g1["status"]["greet"] == "Hello, again!"
    simulate(tmp_path, GREETER, scenario)


def test_watches_that_the_server_ends_are_watched_again(tmp_path: Path) -> None:
    async def scenario(sim: Simulation) -> None:
        await sim.advance(35)  # the watches end every 10 s, and are opened again
        sim.create(greeting("g1", who="later"))
        await sim.settle()
        g1 = sim.get("greetings", "g1")
        assert g1 is not None and g1["status"]["greet"] == "Hello, later!"

    async def run() -> None:
        settings = kopf.OperatorSettings()
        settings.watching.server_timeout = 10
        simulation = Simulation(paths=[write_script(tmp_path, GREETER)], settings=settings)
        simulation.create(CRD)
        async with simulation:
            await scenario(simulation)
    asyncio.run(run())


MONITORS = """
import kopf

WOKEN = []

@kopf.daemon('greetings')
def watch_sync(name, stopped, **_):
    while not stopped:
        WOKEN.append(('sync', name))
        stopped.wait(60)

@kopf.daemon('greetings')
async def watch_async(name, stopped, **_):
    while not stopped:
        WOKEN.append(('async', name))
        await stopped.wait(60)

@kopf.daemon('greetings')
async def stand_by(name, stopped, logger, **_):
    await stopped.wait()
    WOKEN.append(('stopped', name, str(stopped.reason)))
"""


def test_daemons_wait_for_their_stop_in_virtual_time(tmp_path: Path) -> None:
    async def scenario(sim: Simulation) -> None:
        woken = script_list("WOKEN")
        sim.create(greeting("g1"))
        await sim.settle()
        assert sorted(woken) == [("async", "g1"), ("sync", "g1")]
        await sim.advance(59.9)
        assert len(woken) == 2, "woken before its time"
        started = time.monotonic()
        await sim.advance(3600 - 59.9)
        real = time.monotonic() - started
        assert woken.count(("sync", "g1")) == woken.count(("async", "g1")) == 61  # at 0, 60, ... 3600 s
        assert real < 30, f"an hour took {real:.1f} s of real time"

        sim.delete("greetings", "g1")
        await sim.settle()
        assert woken[-1] == ("stopped", "g1", str(kopf.DaemonStoppingReason.RESOURCE_DELETED))
        assert sim.get("greetings", "g1") is None, "its daemons exited at once: the finalizer is gone"
        assert sim.now < 3601, "the stop waited for the clock"
    simulate(tmp_path, MONITORS, scenario)


SLEEPER = """
import time
import kopf

@kopf.daemon('greetings')
def sleeper(stopped, **_):
    while not stopped:
        time.sleep(0.05)  # real time: the virtual clock cannot move meanwhile
"""


def test_a_daemon_that_sleeps_in_real_time_fails_the_test_by_name(tmp_path: Path) -> None:
    async def scenario(sim: Simulation) -> None:
        sim.create(greeting("g1"))
        with pytest.raises(RuntimeError, match=r"The daemon 'sleeper' of default/g1 has held the virtual clock"
                                               r" for 0.5 seconds of real time without waiting in stopped.wait\(\)"):
            await sim.advance(60)

    async def run() -> None:
        simulation = Simulation(paths=[write_script(tmp_path, SLEEPER)], stuck_after=0.5)
        simulation.create(CRD)
        async with simulation:  # and it stops: the daemon holds the clock no more
            await scenario(simulation)
    asyncio.run(run())
    with pytest.raises(ValueError, match="not for 0"):
        Simulation(stuck_after=0)


CLIENTS = """
import kopf
import kr8s.asyncio
import kubernetes
import kubernetes_asyncio
import lightkube
import lightkube.resources.core_v1
import lightkube.models.meta_v1
import pykube


def note(name, namespace, client):
    return {'apiVersion': 'v1', 'kind': 'ConfigMap',
            'metadata': {'name': f'{name}-{client}', 'namespace': namespace}, 'data': {'by': client}}


@kopf.on.create('greetings')
def by_kubernetes(name, namespace, **_):
    kubernetes.config.load_kube_config()  # its own login, not the one the engine made
    kubernetes.client.CoreV1Api().create_namespaced_config_map(namespace, note(name, namespace, 'kubernetes'))


@kopf.on.create('greetings')
async def by_kubernetes_asyncio(name, namespace, **_):
    await kubernetes_asyncio.config.load_kube_config()
    async with kubernetes_asyncio.client.ApiClient() as client:
        api = kubernetes_asyncio.client.CoreV1Api(client)
        await api.create_namespaced_config_map(namespace, note(name, namespace, 'kubernetes-asyncio'))


@kopf.on.create('greetings')
def by_pykube(name, namespace, **_):
    api = pykube.HTTPClient(pykube.KubeConfig.from_env())
    pykube.ConfigMap(api, note(name, namespace, 'pykube')).create()


@kopf.on.create('greetings')
async def by_kr8s(name, namespace, **_):
    api = await kr8s.asyncio.api()
    made = await kr8s.asyncio.objects.ConfigMap(note(name, namespace, 'kr8s'), api=api)
    await made.create()


@kopf.on.create('greetings')
def by_lightkube(name, namespace, **_):
    client = lightkube.Client()
    client.create(lightkube.resources.core_v1.ConfigMap(
        metadata=lightkube.models.meta_v1.ObjectMeta(name=f'{name}-lightkube', namespace=namespace),
        data={'by': 'lightkube'}))
"""


@pytest.mark.filterwarnings("ignore:Kubernetes version v1.36:UserWarning")  # kr8s's: it knows up to 1.35
def test_the_handlers_clients_reach_the_simulated_api_and_never_another(tmp_path: Path,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    # Another cluster, which the clients imported before would find: the kubernetes clients read
    # $KUBECONFIG once, when imported, into the default of their load_kube_config().
    import kubernetes
    import kubernetes_asyncio
    other = Simulation()
    elsewhere = tmp_path / "elsewhere.kubeconfig"
    elsewhere.write_text(json.dumps({
        "apiVersion": "v1", "kind": "Config", "current-context": "c",
        "clusters": [{"name": "c", "cluster": {"server": other.url}}], "users": [{"name": "u", "user": {}}],
        "contexts": [{"name": "c", "context": {"cluster": "c", "user": "u"}}]}))
    monkeypatch.setenv("KUBECONFIG", str(elsewhere))
    for module in (kubernetes.config, kubernetes.config.kube_config,
                   kubernetes_asyncio.config, kubernetes_asyncio.config.kube_config):
        monkeypatch.setattr(module, "KUBE_CONFIG_DEFAULT_LOCATION", str(elsewhere))

    async def scenario(sim: Simulation) -> None:
        sim.create(greeting("g1"))
        await sim.settle()
        made = {c["metadata"]["name"]: c["data"]["by"] for c in sim.list("configmaps", namespace="default")}
        clients = ("kubernetes", "kubernetes-asyncio", "pykube", "kr8s", "lightkube")
        assert made == {f"g1-{client}": client for client in clients}
    try:
        simulate(tmp_path, CLIENTS, scenario)
        assert other.list("configmaps") == [], "a handler's client reached another cluster"
        assert kubernetes.config.kube_config.KUBE_CONFIG_DEFAULT_LOCATION == str(elsewhere), "not restored"
    finally:
        other._api.stop()


def test_a_sync_simulation_runs_steps_that_block_and_refuses_a_coroutine(tmp_path: Path) -> None:
    simulation = Simulation(paths=[write_script(tmp_path, GREETER)])
    simulation.create(CRD)
    with SyncSimulation(simulation) as sim:
        sim.create(greeting("g1", who="steps"))
        sim.settle()
        g1 = sim.get("greetings", "g1")
        assert g1 is not None and g1["status"]["greet"] == "Hello, steps!"
        sim.advance(60)
        assert 60 <= sim.now < 61

        async def in_a_coroutine() -> None:
            sim.settle()
        with pytest.raises(RuntimeError, match="for tests that are not coroutines"):
            asyncio.run(in_a_coroutine())
    with pytest.raises(RuntimeError, match="not started"):
        sim.settle()
