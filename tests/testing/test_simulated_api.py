"""The simulated API (issue 90's first part; not a public API yet): the real engine runs against
it unchanged. `kopf run` discovers, lists and watches the resources, calls the handlers, keeps its
finalizer and progress in the objects, and posts the handlers' Events. The handlers' own client
(`kubernetes`) reaches it through the login that the engine hands them. A CRD created in it
serves its resource, and a deleted owner's children go with it."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from kopf import _engine
from support.cluster import EXAMPLES
from support.operators import OperatorProcess, eventually, write_script

OPERATOR = """
import kopf
import kubernetes

@kopf.on.create('greetings')
def greet(name, namespace, spec, body, logger, **_):
    note = {'metadata': {'name': f'{name}-note'}, 'data': {'who': spec['who']}}
    kopf.adopt(note)
    kubernetes.client.CoreV1Api().create_namespaced_config_map(namespace, note)
    kopf.info(body, reason='Greeted', message=f"Greeted {spec['who']}.")
    logger.info(f"greeted {name}")
    return {'message': f"Hello, {spec['who']}!"}

@kopf.on.delete('greetings')
def part(name, logger, **_):
    logger.info(f"parted with {name}")
"""

CRD = yaml.safe_load((EXAMPLES / "crd.yaml").read_text())  # the Greetings of the examples
GREETINGS = "/apis/demo.kopf.dev/v1/namespaces/ns/greetings"


class Api:
    """Plain requests to the simulated API, as any client makes them."""

    def __init__(self, url: str) -> None:
        self.url = url

    def __call__(self, method: str, path: str, body: Any = None) -> tuple[int, Any]:
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(self.url + path, data=data, method=method,
                                         headers={"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(request, timeout=10) as response:
                return response.status, json.loads(response.read())
        except urllib.error.HTTPError as error:
            return error.code, json.loads(error.read())


@pytest.fixture()
def simulated(tmp_path: Path) -> Iterator[tuple[Api, Path]]:
    simulation = _engine.start_simulation(0)
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(json.dumps({
        "apiVersion": "v1", "kind": "Config", "current-context": "simulated",
        "clusters": [{"name": "simulated", "cluster": {"server": simulation.url}}],
        "users": [{"name": "simulated", "user": {}}],
        "contexts": [{"name": "simulated", "context": {"cluster": "simulated", "user": "simulated"}}]}))
    try:
        yield Api(simulation.url), kubeconfig
    finally:
        simulation.stop()


def test_the_engine_runs_unchanged_against_the_simulated_api(
        simulated: tuple[Api, Path], tmp_path: Path) -> None:
    api, kubeconfig = simulated
    assert api("POST", "/apis/apiextensions.k8s.io/v1/customresourcedefinitions", CRD)[0] == 201
    assert api("POST", "/api/v1/namespaces", {"metadata": {"name": "ns"}})[0] == 201
    operator = OperatorProcess(["run", "--standalone", "-n", "ns", str(write_script(tmp_path, OPERATOR))],
                               cwd=tmp_path, env={"KUBECONFIG": str(kubeconfig)})
    try:
        status, _ = api("POST", GREETINGS, {"metadata": {"name": "g1"}, "spec": {"who": "simulation"}})
        assert status == 201
        greeted = eventually(lambda: api("GET", f"{GREETINGS}/g1")[1].get("status", {}).get("greet"),
                             what="the handler's result in the status")
        assert greeted == {"message": "Hello, simulation!"}
        greeting = api("GET", f"{GREETINGS}/g1")[1]
        assert greeting["metadata"]["finalizers"] == ["kopf.zalando.org/KopfFinalizerMarker"]
        assert "kopf.zalando.org/last-handled-configuration" in greeting["metadata"]["annotations"]
        status, note = api("GET", "/api/v1/namespaces/ns/configmaps/g1-note")
        assert status == 200 and note["data"] == {"who": "simulation"}
        assert note["metadata"]["ownerReferences"][0]["uid"] == greeting["metadata"]["uid"]
        events = eventually(lambda: api("GET", "/api/v1/namespaces/ns/events")[1]["items"], what="the Event")
        assert [(e["reason"], e["message"], e["involvedObject"]["name"]) for e in events] == \
            [("Greeted", "Greeted simulation.", "g1")]

        assert api("DELETE", f"{GREETINGS}/g1")[0] == 200
        operator.wait_for(r"parted with g1")
        eventually(lambda: api("GET", f"{GREETINGS}/g1")[0] == 404, what="the greeting gone (its finalizer removed)")
        assert api("GET", "/api/v1/namespaces/ns/configmaps/g1-note")[0] == 404, "its child goes with it"
    finally:
        assert operator.stop() == 0
    assert "greeted g1" in operator.output
    assert "Traceback" not in operator.output, operator.output
