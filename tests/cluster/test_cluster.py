"""The local control plane serves what operators rely on, for kubectl and for Python clients."""

from __future__ import annotations

import json
import os
import socket
import ssl
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from support.cluster import CLUSTER, apply, kubectl, kubectl_json
from support.webhooks import admission_server

GROUP = "clustertest.kopf.dev"
CRD = {
    "apiVersion": "apiextensions.k8s.io/v1",
    "kind": "CustomResourceDefinition",
    "metadata": {"name": f"widgets.{GROUP}"},
    "spec": {
        "group": GROUP,
        "scope": "Namespaced",
        "names": {"plural": "widgets", "singular": "widget", "kind": "Widget", "shortNames": ["wdg"]},
        "versions": [{
            "name": "v1", "served": True, "storage": True,
            "subresources": {"status": {}},
            "schema": {"openAPIV3Schema": {"type": "object", "properties": {
                "spec": {"type": "object", "x-kubernetes-preserve-unknown-fields": True},
                "status": {"type": "object", "x-kubernetes-preserve-unknown-fields": True},
            }}},
        }],
    },
}


def eventually(check: Callable[[], bool], timeout: float = 60, what: str = "the condition") -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return
        time.sleep(0.3)
    raise AssertionError(f"{what} did not happen in {timeout}s")


def exists(*args: str) -> bool:
    out = kubectl("get", *args, "--ignore-not-found", "-o", "name")
    return bool(out.strip())


@pytest.fixture(scope="module")
def widgets(cluster: dict[str, str]) -> str:
    apply(CRD)
    kubectl("wait", "--for=condition=Established", f"crd/widgets.{GROUP}", "--timeout=30s")
    eventually(lambda: "widgets" in kubectl("api-resources", f"--api-group={GROUP}", "-o", "name"),
               what="discovery of the CRD")
    return f"widgets.{GROUP}"


def test_custom_resources_are_served_by_every_name(widgets: str, namespace: str) -> None:
    apply({"apiVersion": f"{GROUP}/v1", "kind": "Widget",
           "metadata": {"name": "w1", "namespace": namespace}, "spec": {"size": 3}})
    for name in (widgets, "widget", "wdg", "Widget"):
        assert kubectl_json("get", name, "w1", "-n", namespace)["spec"] == {"size": 3}


def test_status_subresource(widgets: str, namespace: str) -> None:
    apply({"apiVersion": f"{GROUP}/v1", "kind": "Widget", "metadata": {"name": "w2", "namespace": namespace}})
    # Through the main resource, status is ignored; through /status, it is stored.
    kubectl("patch", widgets, "w2", "-n", namespace, "--type=merge", "-p", '{"status": {"main": 1}}')
    kubectl("patch", widgets, "w2", "-n", namespace, "--type=merge", "--subresource=status",
            "-p", '{"status": {"sub": 2}, "spec": {"ignored": true}}')
    obj = kubectl_json("get", widgets, "w2", "-n", namespace)
    assert obj["status"] == {"sub": 2}
    assert "spec" not in obj or "ignored" not in obj["spec"]


def test_finalizers_block_deletion_until_removed(widgets: str, namespace: str) -> None:
    apply({"apiVersion": f"{GROUP}/v1", "kind": "Widget",
           "metadata": {"name": "w3", "namespace": namespace, "finalizers": ["kopf.zalando.org/KopfFinalizerMarker"]}})
    kubectl("delete", widgets, "w3", "-n", namespace, "--wait=false")
    assert kubectl_json("get", widgets, "w3", "-n", namespace)["metadata"]["deletionTimestamp"]
    kubectl("patch", widgets, "w3", "-n", namespace, "--type=merge", "-p", '{"metadata": {"finalizers": null}}')
    eventually(lambda: not exists(widgets, "w3", "-n", namespace), timeout=10, what="deletion of w3")


def test_garbage_collection_deletes_children(widgets: str, namespace: str) -> None:
    apply({"apiVersion": f"{GROUP}/v1", "kind": "Widget", "metadata": {"name": "parent", "namespace": namespace}})
    parent = kubectl_json("get", widgets, "parent", "-n", namespace)
    owner = {"apiVersion": f"{GROUP}/v1", "kind": "Widget", "name": "parent",
             "uid": parent["metadata"]["uid"], "controller": True, "blockOwnerDeletion": True}
    apply({"apiVersion": "v1", "kind": "ConfigMap",
           "metadata": {"name": "child", "namespace": namespace, "ownerReferences": [owner]}})
    assert exists("configmap", "child", "-n", namespace)
    kubectl("delete", widgets, "parent", "-n", namespace, "--wait=false")
    eventually(lambda: not exists("configmap", "child", "-n", namespace), what="garbage collection of the child")


def test_deleted_namespace_goes_away(cluster: dict[str, str]) -> None:
    kubectl("create", "namespace", "doomed-namespace")
    kubectl("create", "configmap", "content", "-n", "doomed-namespace", "--from-literal=a=b")
    kubectl("delete", "namespace", "doomed-namespace", "--wait=false")
    eventually(lambda: not exists("namespace", "doomed-namespace"), what="namespace deletion")


def test_events_of_both_apis(namespace: str) -> None:
    ref = {"apiVersion": "v1", "kind": "ConfigMap", "name": "x", "namespace": namespace}
    apply([
        {"apiVersion": "v1", "kind": "Event", "metadata": {"name": "core-event", "namespace": namespace},
         "involvedObject": ref, "reason": "Tested", "message": "core/v1", "type": "Normal",
         "source": {"component": "kopf"}},
        {"apiVersion": "events.k8s.io/v1", "kind": "Event",
         "metadata": {"name": "new-event", "namespace": namespace},
         "eventTime": "2026-01-01T00:00:00.000000Z", "reportingController": "kopf", "reportingInstance": "kopf-1",
         "action": "Test", "reason": "Tested", "note": "events.k8s.io/v1", "type": "Normal", "regarding": ref},
    ])
    core = kubectl_json("get", "events.v1.", "-n", namespace)["items"]
    new = kubectl_json("get", "events.v1.events.k8s.io", "-n", namespace)["items"]
    # Both APIs are views of the same objects: each sees both events.
    assert {e["metadata"]["name"] for e in core} == {"core-event", "new-event"}
    assert {e.get("note") for e in new} == {"core/v1", "events.k8s.io/v1"}


def test_leases(namespace: str) -> None:
    apply({"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
           "metadata": {"name": "leader", "namespace": namespace},
           "spec": {"holderIdentity": "a", "leaseDurationSeconds": 15}})
    kubectl("patch", "lease", "leader", "-n", namespace, "--type=merge", "-p", '{"spec": {"holderIdentity": "b"}}')
    assert kubectl_json("get", "lease", "leader", "-n", namespace)["spec"]["holderIdentity"] == "b"


# -- admission webhooks served on loopback with a self-signed CA ----------------------------------


@pytest.fixture()
def webhook_server(tmp_path: Path) -> Iterator[tuple[int, str]]:
    """Denies objects labelled `deny=yes`."""
    def decide(request: dict) -> tuple[bool, str]:
        labels = request["object"].get("metadata", {}).get("labels", {})
        return labels.get("deny") != "yes", "denied by the loopback webhook"
    with admission_server(tmp_path, decide) as served:
        yield served


def test_admission_webhook_on_loopback(namespace: str, webhook_server: tuple[int, str]) -> None:
    port, ca_bundle = webhook_server
    name = f"deny-labelled-{namespace}"
    apply({"apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingWebhookConfiguration",
           "metadata": {"name": name},
           "webhooks": [{
               "name": "deny.clustertest.kopf.dev",
               "clientConfig": {"url": f"https://127.0.0.1:{port}/validate", "caBundle": ca_bundle},
               "rules": [{"apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE"],
                          "resources": ["configmaps"]}],
               "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": namespace}},
               "admissionReviewVersions": ["v1"], "sideEffects": "None", "failurePolicy": "Fail",
               "timeoutSeconds": 5,
           }]})
    try:
        # The configuration takes a moment to reach the apiserver's webhook cache.
        labelled = {"apiVersion": "v1", "kind": "ConfigMap",
                    "metadata": {"name": "labelled", "namespace": namespace, "labels": {"deny": "yes"}}}
        eventually(lambda: "denied by the loopback webhook" in kubectl(
            "create", "-f", "-", "--dry-run=server", input=json.dumps(labelled), check=False),
            timeout=30, what="the webhook's denial")
        kubectl("create", "configmap", "unlabelled", "-n", namespace)  # called, and allowed
    finally:
        kubectl("delete", "validatingwebhookconfiguration", name, check=False)


# -- the admin credentials work for Python clients -------------------------------------------------


def test_pykube_ng_client(cluster: dict[str, str]) -> None:
    pykube = pytest.importorskip("pykube")
    api = pykube.HTTPClient(pykube.KubeConfig.from_file(os.environ["KUBECONFIG"]))
    names = {ns.name for ns in pykube.Namespace.objects(api)}
    assert {"default", "kube-system"} <= names


def test_kubernetes_client(cluster: dict[str, str]) -> None:
    kubernetes = pytest.importorskip("kubernetes")
    client = kubernetes.config.new_client_from_config(config_file=os.environ["KUBECONFIG"])
    names = {ns.metadata.name for ns in kubernetes.client.CoreV1Api(client).list_namespace().items}
    assert {"default", "kube-system"} <= names


# -- the script itself: idempotence and clear messages in bad situations --------------------------


def run_cluster(*args: str, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, str(CLUSTER), *args], capture_output=True, text=True,
                          check=False, env={**os.environ, **env})


def test_up_is_idempotent(cluster: dict[str, str]) -> None:
    started = time.monotonic()
    result = run_cluster("up")
    assert result.returncode == 0, result.stderr
    assert "already running" in result.stderr
    assert f"export KUBECONFIG={cluster['KUBECONFIG']}" in result.stdout
    assert time.monotonic() - started < 10
    assert run_cluster("status").returncode == 0


def free_port_block() -> int:
    """A port whose two lower neighbours are free too (etcd takes them), and the 2nd above (kwok's)."""
    for _ in range(50):
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            port = sock.getsockname()[1]
        if port > 2000 and all(_free(p) for p in (port - 2, port - 1, port, port + 2)):
            return port
    raise AssertionError("no free ports")


def _free(port: int) -> bool:
    with socket.socket() as sock:
        try:
            sock.bind(("127.0.0.1", port))
            return True
        except OSError:
            return False


def test_apart_from_what_kopf_testing_cluster_keeps(cluster: dict[str, str]) -> None:
    """By default, the suite's control plane is not the one of a user's `kopf testing cluster`:
    neither one's `down` stops the other's (nor does their state or port collide)."""
    env = {name: value for name, value in os.environ.items() if not name.startswith("KOPF_CLUSTER_")}
    users = subprocess.run([sys.executable, "-m", "kopf", "testing", "cluster", "env"], capture_output=True,
                           text=True, check=True, env=env).stdout
    ours = run_cluster("env").stdout
    assert f"export KUBECONFIG={cluster['KUBECONFIG']}" in ours
    users_kubeconfig = next(line for line in users.splitlines() if line.startswith("export KUBECONFIG="))
    assert users_kubeconfig.endswith("/kopf-rs/cluster/kubeconfig")
    assert users_kubeconfig != f"export KUBECONFIG={cluster['KUBECONFIG']}"


def test_port_already_taken(tmp_path: Path, cluster: dict[str, str]) -> None:
    with socket.socket() as blocker:
        blocker.bind(("127.0.0.1", 0))
        blocker.listen()
        port = blocker.getsockname()[1]
        result = run_cluster("up", KOPF_CLUSTER_HOME=str(tmp_path), KOPF_CLUSTER_PORT=str(port + 2))
    assert result.returncode == 1
    assert f"Port {port} (for etcd) is already in use" in result.stderr
    assert "choose another port" in result.stderr
    assert result.stdout == ""


def test_stale_state_from_a_killed_run(tmp_path: Path, cluster: dict[str, str]) -> None:
    port = free_port_block()
    env = {"KOPF_CLUSTER_HOME": str(tmp_path), "KOPF_CLUSTER_PORT": str(port)}
    (tmp_path / "pids").mkdir()
    (tmp_path / "pids" / "kube-apiserver.pid").write_text("999999\n")  # a process that is long gone
    (tmp_path / "etcd-data").mkdir()
    (tmp_path / "etcd-data" / "garbage").write_text("left over")
    try:
        result = run_cluster("up", **env)
        assert result.returncode == 0, result.stderr
        assert "found the state of an earlier run" in result.stderr
        assert run_cluster("status", **env).returncode == 0
    finally:
        down = run_cluster("down", **env)
    assert "stopped" in down.stderr
    assert run_cluster("status", **env).returncode == 3


def test_missing_go_toolchain(tmp_path: Path) -> None:
    # An empty binary cache and no `go` on PATH: the build cannot start.
    result = run_cluster("up", KOPF_CLUSTER_CACHE=str(tmp_path / "cache"), KOPF_CLUSTER_HOME=str(tmp_path),
                         PATH=str(tmp_path / "empty"))
    assert result.returncode == 1
    assert "The Go toolchain is not on PATH" in result.stderr


def test_bearer_token_admin(cluster: dict[str, str]) -> None:
    pki = Path(cluster["KUBECONFIG"]).parent / "pki"
    token = (pki / "admin.token").read_text().strip()
    context = ssl.create_default_context(cafile=str(pki / "ca.crt"))
    server = json.loads(Path(cluster["KUBECONFIG"]).read_text())["clusters"][0]["cluster"]["server"]

    def get(bearer: str) -> int:
        request = urllib.request.Request(f"{server}/api/v1/namespaces", headers={"Authorization": f"Bearer {bearer}"})
        try:
            with urllib.request.urlopen(request, context=context, timeout=5) as response:
                return response.status
        except urllib.error.HTTPError as error:
            return error.code

    assert get(token) == 200
    assert get("not-the-token") == 401
