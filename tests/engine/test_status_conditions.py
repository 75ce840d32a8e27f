"""`kopf.set_condition()` in a running operator: `kubectl wait --for=condition=Ready` sees the
condition a handler set, the transition time stays while the status does not change, and the
condition follows the object's generation."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

from support.cluster import kubectl
from support.operators import OperatorProcess, eventually, write_script

HANDLERS = """
import kopf

@kopf.on.create('greetings')
def create_fn(patch, **_):
    kopf.set_condition(patch, 'Ready', False, reason='Starting')

@kopf.on.update('greetings', field='spec.who')
def who_fn(patch, new, **_):
    kopf.set_condition(patch, 'Ready', True, reason='Greeted', message=f"Greeted {new}.")
    kopf.set_condition(patch, 'Degraded', False, reason='Fine')
"""


def test_kubectl_waits_for_a_condition_that_a_handler_set(crd: None, namespace: str, tmp_path: Path) -> None:
    script = write_script(tmp_path, HANDLERS)
    operator = OperatorProcess(["run", "-n", namespace, "--standalone", str(script)], cwd=tmp_path)
    try:
        kubectl("create", "-f", "-", input=json.dumps({
            "apiVersion": "demo.kopf.dev/v1", "kind": "Greeting",
            "metadata": {"name": "g1", "namespace": namespace}, "spec": {"who": "world"}}))
        operator.wait_for(r"Handler 'create_fn' succeeded")
        started = eventually(lambda: conditions("g1", namespace), what="the conditions")
        assert [(c["type"], c["status"], c["reason"]) for c in started] == [("Ready", "False", "Starting")]
        kubectl("patch", "greeting", "g1", "-n", namespace, "--type=merge", "-p", '{"spec": {"who": "moon"}}')
        waited = subprocess.run(["kubectl", "wait", "--for=condition=Ready", "greeting/g1", "-n", namespace,
                                 "--timeout=30s"], capture_output=True, text=True, check=False)
        assert waited.returncode == 0, waited.stderr
    finally:
        assert operator.stop() == 0
    ready, degraded = conditions("g1", namespace)
    assert ready["status"] == "True" and ready["message"] == "Greeted moon." and ready["observedGeneration"] == 2
    assert ready["lastTransitionTime"] >= started[0]["lastTransitionTime"]
    assert degraded["type"] == "Degraded" and degraded["status"] == "False"


def conditions(name: str, namespace: str) -> list[dict[str, str]]:
    found = json.loads(kubectl("get", "greeting", name, "-n", namespace, "-o", "json"))
    return list(found.get("status", {}).get("conditions", []))
