"""The Skafos example (`examples/skafos/`) run as its Deployment would: with the service
account and RBAC of its `deployment.yaml`, and leader election."""

from __future__ import annotations

import signal
import sys
from pathlib import Path

from support.cluster import EXAMPLES, apply, kubectl
from support.network import free_port
from support.operators import OperatorProcess, account_kubeconfig, eventually, get, refused, yaml_documents


def test_the_example_greets_with_its_deployments_rbac(crd: None, namespace: str, tmp_path: Path) -> None:
    documents = yaml_documents(EXAMPLES / "skafos" / "deployment.yaml")
    apply([document for document in documents if document["kind"] != "Deployment"])
    kubectl("delete", "configmap", "skafos-greeter-le", "-n", "default", "--ignore-not-found")
    kubeconfig = account_kubeconfig("skafos-greeter", tmp_path)
    port = free_port()
    env = {"KUBECONFIG": str(kubeconfig), "HEALTH_PORT": str(port), "LEADER_ELECTION_NS": "default",
           "HOSTNAME": "skafos-greeter-5d9f8c7b-x2x4z"}
    operator = OperatorProcess([str(EXAMPLES / "skafos" / "app.py")], cwd=tmp_path, env=env,
                               kopf=Path(sys.executable))
    try:
        operator.wait_for(r"Leading: the ConfigMap 'default/skafos-greeter-le' is held by skafos-greeter-5d9f8c7b")
        apply({"apiVersion": "demo.kopf.dev/v1", "kind": "Greeting",
               "metadata": {"name": "skafos", "namespace": namespace}, "spec": {"who": "Skafos"}})
        eventually(lambda: get("greetings", "skafos", namespace).get("status", {}).get("message") == "Hello, Skafos!",
                   what="the greeting greeted by the example")
        kubectl("patch", "greetings", "skafos", "-n", namespace, "--type=merge", "-p", '{"spec": {"n": 1}}')
        operator.wait_for(r"skafos updated \(\d+ updates of greetings so far\)")
        assert operator.stop(signal.SIGINT) == 0, operator.output
    finally:
        operator.kill()
    output = operator.output
    assert "Released the ConfigMap 'default/skafos-greeter-le'." in output
    assert not refused(output), output
