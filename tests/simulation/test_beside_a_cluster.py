"""The same scenarios, side by side: once on the simulated API and its virtual clock
(``kopf.testing.Simulation``), once on the control plane with ``kopf run``. Each scenario is
written once, against what both have: objects read and written, the operator's log, and a
wait for what should come (on the virtual clock, the clock is moved in small steps; on the
cluster, the test looks again). A scenario that passes in one and fails in the other is a
difference of the simulation from a cluster.

The operators are the examples' and the docs' own: greeter, children, daemons and timers,
errors (docs/errors.md's ``flaky.py``); and a CRD's schema, which prunes what it does not name.
"""

from __future__ import annotations

import json
import logging
import re
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, Protocol

import kubernetes
import pytest
import yaml
from kopf.testing import SimulatedApiError, Simulation, SyncSimulation
from support.cluster import EXAMPLES, ROOT, apply, kubectl
from support.operators import OperatorProcess, write_script

CRD = yaml.safe_load((EXAMPLES / "crd.yaml").read_text())
PLURALS = {"Greeting": "greetings.demo.kopf.dev", "ConfigMap": "configmaps",
           "StrictGreeting": "strictgreetings.demo.kopf.dev"}

# A CRD whose schema keeps only what it names (no x-kubernetes-preserve-unknown-fields): the
# server prunes the rest, and a handler's result in the status is dropped. Kopf's users meet it.
STRICT_CRD = {
    "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
    "metadata": {"name": "strictgreetings.demo.kopf.dev"},
    "spec": {"group": "demo.kopf.dev", "scope": "Namespaced",
             "names": {"plural": "strictgreetings", "singular": "strictgreeting", "kind": "StrictGreeting"},
             "versions": [{"name": "v1", "served": True, "storage": True, "subresources": {"status": {}},
                           "schema": {"openAPIV3Schema": {"type": "object", "properties": {
                               "spec": {"type": "object", "required": ["who"], "properties": {
                                   "who": {"type": "string"}, "times": {"type": "integer", "default": 1}}},
                               "status": {"type": "object", "properties": {"phase": {"type": "string"}}}}}}}]}}


def docs_file(page: str, caption: str) -> str:
    """A file that a docs page has the reader write (a code block with its name as the caption)."""
    text = (ROOT / "docs" / page).read_text()
    found = re.search(rf"```{{code-block}} python\n:caption: {re.escape(caption)}\n\n(.*?)\n```", text, re.S)
    assert found, f"docs/{page} has no {caption}"
    return found.group(1) + "\n"


class World(Protocol):
    """Where a scenario runs: what both the simulation and the cluster offer."""

    namespace: str

    def create(self, body: dict[str, Any]) -> None: ...
    def get(self, kind: str, name: str) -> dict[str, Any] | None: ...
    def patch(self, kind: str, name: str, patch: dict[str, Any]) -> None: ...
    def delete(self, kind: str, name: str) -> None: ...
    def refusal(self, kind: str, name: str, patch: dict[str, Any]) -> str: ...
    def log(self) -> str: ...
    def until(self, check: Callable[[], Any], within: float) -> Any: ...


Starting = Callable[[str, list[dict[str, Any]]], World]  # an operator's source, and its CRDs


class Simulated:
    """The scenario on the simulated API: the clock moves by 0.1 s until the check passes."""

    STEP = 0.1

    def __init__(self, sim: SyncSimulation, caplog: pytest.LogCaptureFixture) -> None:
        self.sim, self.caplog, self.namespace = sim, caplog, "default"

    def create(self, body: dict[str, Any]) -> None:
        self.sim.create(body)

    def get(self, kind: str, name: str) -> dict[str, Any] | None:
        return self.sim.get(PLURALS[kind], name)

    def patch(self, kind: str, name: str, patch: dict[str, Any]) -> None:
        self.sim.patch(PLURALS[kind], name, patch)

    def delete(self, kind: str, name: str) -> None:
        self.sim.delete(PLURALS[kind], name)

    def refusal(self, kind: str, name: str, patch: dict[str, Any]) -> str:
        with pytest.raises(SimulatedApiError) as refused:
            self.sim.patch(PLURALS[kind], name, patch)
        return refused.value.message

    def log(self) -> str:
        return "\n".join(self.caplog.messages)

    def until(self, check: Callable[[], Any], within: float) -> Any:
        self.sim.settle()
        start = self.sim.now
        while not (result := check()):
            assert self.sim.now - start < within, f"not in {within} s of virtual time"
            self.sim.advance(self.STEP)
        return result


class Real:
    """The scenario on the control plane: `kopf run` in a namespace of its own."""

    def __init__(self, operator: OperatorProcess, namespace: str) -> None:
        self.operator, self.namespace = operator, namespace

    def create(self, body: dict[str, Any]) -> None:
        # As the operators' clients send it: the fields a schema does not know are pruned (a
        # kubectl that validates would refuse them instead).
        body = {**body, "metadata": {**body["metadata"], "namespace": self.namespace}}
        kubectl("create", "--validate=false", "-f", "-", input=json.dumps(body))

    def get(self, kind: str, name: str) -> dict[str, Any] | None:
        found = kubectl("get", PLURALS[kind], name, "-n", self.namespace, "-o", "json", "--ignore-not-found")
        return json.loads(found) if found.strip() else None

    def patch(self, kind: str, name: str, patch: dict[str, Any]) -> None:
        kubectl("patch", PLURALS[kind], name, "-n", self.namespace, "--type=merge", "-p", json.dumps(patch))

    def delete(self, kind: str, name: str) -> None:
        kubectl("delete", PLURALS[kind], name, "-n", self.namespace, "--wait=false")

    def refusal(self, kind: str, name: str, patch: dict[str, Any]) -> str:
        # The server's own message (kubectl rewrites it), by a client as operators have it.
        plural, _, group = PLURALS[kind].partition(".")
        api = kubernetes.client.CustomObjectsApi(kubernetes.config.new_client_from_config())
        with pytest.raises(kubernetes.client.ApiException) as refused:
            api.patch_namespaced_custom_object(group, "v1", self.namespace, plural, name, patch)
        message: str = json.loads(refused.value.body)["message"]
        return message

    def log(self) -> str:
        return self.operator.output

    def until(self, check: Callable[[], Any], within: float) -> Any:
        deadline = time.monotonic() + within * 2 + 10  # real time: a loaded machine is slower
        while not (result := check()):
            assert time.monotonic() < deadline, f"not in {within} s (and more) of real time:\n{self.log()}"
            time.sleep(0.2)
        return result


def greeting(name: str, **spec: Any) -> dict[str, Any]:
    return {"apiVersion": "demo.kopf.dev/v1", "kind": "Greeting", "metadata": {"name": name}, "spec": spec}


def status(world: World, name: str, key: str) -> Any:
    body = world.get("Greeting", name)
    return (body or {}).get("status", {}).get(key)


def greeter(world: World) -> None:
    world.create(greeting("hello", who="Tess"))
    world.until(lambda: status(world, "hello", "greet") == {"message": "Hello, Tess!"}, within=5)
    assert "Greeting hello: Hello, Tess!" in world.log()
    world.patch("Greeting", "hello", {"spec": {"who": "Ann"}})
    world.until(lambda: status(world, "hello", "regreet/spec.who") == {"message": "Hello again, Ann!"}, within=5)
    assert "Renamed from 'Tess' to 'Ann'." in world.log()
    world.delete("Greeting", "hello")
    world.until(lambda: world.get("Greeting", "hello") is None, within=5)
    assert "Goodbye, hello." in world.log()


def children(world: World) -> None:
    world.create(greeting("hello", who="Tess"))
    glow = world.until(lambda: world.get("ConfigMap", "hello-glow"), within=5)
    owner = world.get("Greeting", "hello")
    assert owner is not None
    assert glow["data"] == {"message": "Hello, Tess!"}
    assert [ref["uid"] for ref in glow["metadata"]["ownerReferences"]] == [owner["metadata"]["uid"]]
    world.patch("Greeting", "hello", {"spec": {"who": "Ann"}})
    world.until(lambda: (world.get("ConfigMap", "hello-glow") or {}).get("data") == {"message": "Hello again, Ann!"},
                within=5)
    world.delete("Greeting", "hello")
    world.until(lambda: world.get("ConfigMap", "hello-glow") is None, within=10)  # the garbage collector's


def daemons(world: World) -> None:
    world.create(greeting("hello", who="Tess"))
    world.until(lambda: "Heartbeat #3 of hello." in world.log(), within=6)  # every 2 s, the first at once
    world.until(lambda: "Watching over 'Tess'." in world.log(), within=3)  # after its initial delay of 1 s
    world.until(lambda: (status(world, "hello", "uptime") or {}).get("checks", 0) >= 2, within=8)  # every 5 s
    assert (world.get("Greeting", "hello") or {})["status"]["heartbeat"]
    world.patch("Greeting", "hello", {"spec": {"who": "Ann"}})
    world.until(lambda: "Watching over 'Ann'." in world.log(), within=3)  # the live spec, checked every 0.5 s
    world.delete("Greeting", "hello")
    world.until(lambda: world.get("Greeting", "hello") is None, within=10)
    assert "Heartbeat of hello stops: DaemonStoppingReason.RESOURCE_DELETED." in world.log()


def errors(world: World) -> None:
    world.create(greeting("patient", who="Ada"))
    world.create(greeting("nameless"))
    world.until(lambda: "Ready after 2 retries." in world.log(), within=5)  # two retries, 1 s apart
    world.until(lambda: "Handler 'check' failed permanently: A greeting needs spec.who" in world.log(), within=5)
    log = world.log()
    assert "Handler 'check' failed temporarily: The service is not ready (attempt 0)." in log
    assert "Handler 'check' failed temporarily: The service is not ready (attempt 1)." in log
    assert "attempt 2" not in log
    world.until(lambda: "Creation is processed: 0 succeeded; 1 failed." in world.log(), within=5)
    for name in ("patient", "nameless"):
        world.delete("Greeting", name)
        world.until(lambda name=name: world.get("Greeting", name) is None, within=5)  # type: ignore[misc]


STRICT = """
import kopf

@kopf.on.create('demo.kopf.dev', 'strictgreetings')
def greet(spec, patch, **_):
    patch.status['phase'] = 'Greeted'
    return {'message': f"Hello, {spec['who']}!"}  # status.greet: not in the schema
"""


def schemas(world: World) -> None:
    world.create({"apiVersion": "demo.kopf.dev/v1", "kind": "StrictGreeting", "metadata": {"name": "strict"},
                  "spec": {"who": "Tess", "extra": "pruned"}})
    body = world.until(lambda: (b := world.get("StrictGreeting", "strict")) and b.get("status", {}).get("phase") and b,
                       within=5)
    assert body["spec"] == {"who": "Tess", "times": 1}  # pruned, and defaulted
    assert body["status"] == {"phase": "Greeted"}  # the handler's result is dropped by the server
    assert "Handler 'greet' succeeded." in world.log()
    refused = world.refusal("StrictGreeting", "strict", {"spec": {"who": 5}})
    assert 'is invalid: spec.who: Invalid value: "integer": spec.who in body must be of type string: "integer"' \
        in refused
    assert 'StrictGreeting.demo.kopf.dev "strict"' in refused


SCENARIOS: dict[str, tuple[Callable[[World], None], Callable[[], str], list[dict[str, Any]]]] = {
    "greeter": (greeter, lambda: (EXAMPLES / "greeter" / "operator.py").read_text(), []),
    "children": (children, lambda: (EXAMPLES / "children" / "operator.py").read_text(), []),
    "daemons": (daemons, lambda: (EXAMPLES / "daemons" / "operator.py").read_text(), []),
    "errors": (errors, lambda: docs_file("errors.md", "flaky.py"), []),
    "schemas": (schemas, lambda: STRICT, [STRICT_CRD]),
}


@pytest.fixture()
def simulated(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> Iterator[Starting]:
    caplog.set_level(logging.DEBUG)  # as `kopf run --verbose`
    started: list[SyncSimulation] = []

    def start(source: str, crds: list[dict[str, Any]]) -> World:
        simulation = Simulation(paths=[write_script(tmp_path, source)])
        for crd in [CRD, *crds]:
            simulation.create(crd)
        sim = SyncSimulation(simulation)
        sim.start()
        started.append(sim)
        return Simulated(sim, caplog)

    try:
        yield start
    finally:
        for sim in started:
            sim.stop()


@pytest.fixture()
def real(tmp_path: Path, crd: None, namespace: str) -> Iterator[Starting]:
    started: list[OperatorProcess] = []

    def start(source: str, crds: list[dict[str, Any]]) -> World:
        for crd in crds:
            apply(crd)
            kubectl("wait", "--for=condition=Established", f"crd/{crd['metadata']['name']}", "--timeout=30s")
        script = write_script(tmp_path, source)
        operator = OperatorProcess(["run", "--verbose", "-n", namespace, str(script)], cwd=tmp_path)
        started.append(operator)
        return Real(operator, namespace)

    try:
        yield start
    finally:
        for operator in started:
            operator.stop()


@pytest.mark.parametrize("name", sorted(SCENARIOS))
@pytest.mark.parametrize("where", ["simulated", "real"])
def test_a_scenario_passes_alike_on_the_simulation_and_on_a_cluster(
        name: str, where: str, request: pytest.FixtureRequest) -> None:
    scenario, source, crds = SCENARIOS[name]
    start = request.getfixturevalue(where)
    world = start(source(), crds)
    scenario(world)


def test_a_scenario_step_that_the_cluster_refuses_is_refused_by_the_simulation_too(
        simulated: Starting, crd: None) -> None:
    world = simulated("import kopf\n", [])
    assert isinstance(world, Simulated)
    with pytest.raises(SimulatedApiError, match="name or generateName is required"):
        world.sim.create({"apiVersion": "demo.kopf.dev/v1", "kind": "Greeting", "metadata": {}})
    nameless = {"apiVersion": "demo.kopf.dev/v1", "kind": "Greeting", "metadata": {"namespace": "default"}}
    refused = kubectl("create", "--validate=false", "-f", "-", input=json.dumps(nameless), check=False)
    assert "name or generateName is required" in refused
