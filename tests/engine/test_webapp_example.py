"""examples/webapp, run as its docstring says: one reconcile handler keeps a WebApp's Deployment
and Service; a Deployment deleted or scaled by hand is put back through its owner's reconcile;
the WebApp reports `Ready` as a condition that `kubectl wait` sees once the Deployment's pods
(scheduled onto kwok's nodes by the cluster's own controllers) are available."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from support.cluster import EXAMPLES, kubectl
from support.operators import OperatorProcess, eventually, refused

WEBAPP = EXAMPLES / "webapp"


@pytest.fixture()
def webapps(cluster: dict[str, str]) -> Iterator[None]:
    kubectl("apply", "-f", str(WEBAPP / "crd.yaml"))
    kubectl("wait", "--for=condition=Established", "crd/webapps.demo.kopf.dev", "--timeout=30s")
    yield


def deployment(namespace: str) -> dict[str, Any]:
    """The WebApp hello's Deployment as it is now (empty if there is none)."""
    found = subprocess.run(["kubectl", "get", "deployment", "hello", "-n", namespace, "-o", "json"],
                           capture_output=True, text=True, check=False)
    return json.loads(found.stdout) if found.returncode == 0 else {}


def wait_ready(namespace: str) -> None:
    kubectl("wait", "--for=condition=Ready", "webapp/hello", "-n", namespace, "--timeout=60s")


def test_the_webapp_keeps_its_children_and_reports_ready(webapps: None, namespace: str, tmp_path: Path) -> None:
    operator = OperatorProcess(["run", "--standalone", "-n", namespace, str(WEBAPP / "operator.py")], cwd=tmp_path)
    try:
        kubectl("apply", "-n", namespace, "-f", str(WEBAPP / "webapp.yaml"))
        wait_ready(namespace)
        made = deployment(namespace)
        assert made["spec"]["replicas"] == 2 and made["status"]["availableReplicas"] == 2
        assert made["metadata"]["ownerReferences"][0]["kind"] == "WebApp"
        service = json.loads(kubectl("get", "service", "hello", "-n", namespace, "-o", "json"))
        assert service["spec"]["ports"][0]["targetPort"] == 80
        [ready] = json.loads(kubectl("get", "webapp", "hello", "-n", namespace, "-o", "json"))["status"]["conditions"]
        assert (ready["type"], ready["status"], ready["reason"]) == ("Ready", "True", "Available")
        assert ready["message"] == "2/2 replicas available"

        # Deleted by hand: made again by the owner's reconcile (a new object: a new uid).
        kubectl("delete", "deployment", "hello", "-n", namespace, "--wait=false")
        eventually(lambda: deployment(namespace).get("metadata", {}).get("uid") not in (None, made["metadata"]["uid"]),
                   what="the Deployment made again")
        # Scaled by hand: put back.
        kubectl("scale", "deployment", "hello", "-n", namespace, "--replicas=5")
        eventually(lambda: deployment(namespace)["spec"]["replicas"] == 2, what="the scaling reverted")
        wait_ready(namespace)
        # The spec's change rolls out, and the condition follows it.
        kubectl("patch", "webapp", "hello", "-n", namespace, "--type=merge", "-p", '{"spec": {"replicas": 3}}')
        eventually(lambda: deployment(namespace).get("status", {}).get("availableReplicas") == 3,
                   what="the third replica available")
        eventually(lambda: "3/3 replicas available" in kubectl("get", "webapp", "hello", "-n", namespace),
                   what="the WebApp telling so")
        wait_ready(namespace)
    finally:
        assert operator.stop() == 0
    assert operator.output.count("Made the Deployment hello.") == 2, operator.output
    assert not refused(operator.output), operator.output
