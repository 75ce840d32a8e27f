"""`kopf.testing.KopfCluster` on bad input: programs found nowhere (one error naming the ways),
programs from `$KUBEBUILDER_ASSETS` only, or a `$KUBEBUILDER_ASSETS` without them (said, with
the programs used instead), a CRD that never becomes established (named, with its conditions),
a CRD file that is not YAML or holds no CRD (named, before anything starts), a test that leaves
objects with finalizers (the teardown ends, and names them), and one that leaves nothing; with
the controller manager, the children of a new CRD's objects collected at once."""

from __future__ import annotations

import json
import re
import time
from pathlib import Path

import pytest
import yaml
from kopf._operating.cluster import binaries
from kopf.testing import KopfCluster, LeftoverWarning


def test_programs_found_nowhere(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KOPF_CLUSTER_CACHE", str(tmp_path / "empty-cache"))
    monkeypatch.delenv("KUBEBUILDER_ASSETS", raising=False)
    with pytest.raises(binaries.BinariesError) as error:
        with KopfCluster():
            pass
    message = str(error.value)
    assert "etcd, kube-apiserver" in message
    assert "KUBEBUILDER_ASSETS" in message and "kopf testing install" in message


def test_programs_of_kubebuilder_assets(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    assets = tmp_path / "assets"
    assets.mkdir()
    for name in binaries.ENVTEST:  # as setup-envtest lays them out
        (assets / name).symlink_to(binaries.find([name])[name])
    monkeypatch.setenv("KUBEBUILDER_ASSETS", str(assets))
    monkeypatch.setenv("KOPF_CLUSTER_CACHE", str(tmp_path / "empty-cache"))
    with KopfCluster() as cluster:
        assert "default" in cluster.kubectl("get", "namespaces", "-o", "name")
        assert cluster.startup_time is not None and cluster.startup_time < 30


def test_a_crd_that_is_never_established(tmp_path: Path) -> None:
    # Two CRDs of one group with one kind: the second's names are not accepted.
    crd = yaml.safe_load((Path(__file__).parents[2] / "examples" / "crd.yaml").read_text())
    other = json.loads(json.dumps(crd))
    other["metadata"]["name"] = "others.demo.kopf.dev"
    other["spec"]["names"].update(plural="others", singular="other", shortNames=[], categories=[])
    (tmp_path / "crds.yaml").write_text(yaml.safe_dump_all([crd, other]))
    with KopfCluster() as cluster:
        with pytest.raises(Exception) as error:
            cluster.install(tmp_path / "crds.yaml", timeout=5)
    assert "others.demo.kopf.dev is not established" in str(error.value)
    assert "NamesAccepted=False" in str(error.value)


def test_leftovers_with_finalizers_are_named(tmp_path: Path) -> None:
    with KopfCluster(crds=[Path(__file__).parents[2] / "examples" / "crd.yaml"]) as cluster:
        with pytest.warns(LeftoverWarning, match=r"Greeting/stuck"):
            with cluster.namespace() as namespace:
                cluster.kubectl("apply", "-n", namespace, "-f", "-", input=json.dumps({
                    "apiVersion": "demo.kopf.dev/v1", "kind": "Greeting",
                    "metadata": {"name": "stuck", "finalizers": ["example.com/never"]}}))


def test_a_namespace_left_empty(tmp_path: Path) -> None:
    """kubectl prints nothing at all for `get --ignore-not-found` of nothing: not a failure."""
    with KopfCluster() as cluster:
        with cluster.namespace() as namespace:
            assert namespace.startswith("test-")


@pytest.mark.parametrize(("text", "said"), [
    ("kind: [unclosed", "is not valid YAML"),
    ("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: x}\n", "holds no CustomResourceDefinition (ConfigMap)"),
    ("", "holds no CustomResourceDefinition (no documents)"),
])
def test_a_crd_file_that_is_no_crd_is_named_before_anything_starts(tmp_path: Path, text: str, said: str) -> None:
    path = tmp_path / "crd.yaml"
    path.write_text(text)
    cluster = KopfCluster(crds=[path], home=tmp_path / "state")
    with pytest.raises(Exception, match=rf"The CRD file {path} {re.escape(said)}"):
        with cluster:
            pass
    assert not (tmp_path / "state" / "pids").exists(), "started anyway"


def test_kubebuilder_assets_without_the_programs_is_said(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KUBEBUILDER_ASSETS", str(tmp_path))  # a folder, but none of envtest's programs
    with pytest.warns(UserWarning, match=rf"KUBEBUILDER_ASSETS={tmp_path} has no etcd, kube-apiserver: "
                                         r"using /\S+/etcd, /\S+/kube-apiserver instead"):
        found = binaries.find(["etcd", "kube-apiserver"])
    assert found["etcd"].parent != tmp_path
    monkeypatch.setenv("KUBEBUILDER_ASSETS", str(tmp_path / "missing"))
    with pytest.warns(UserWarning, match=r"KUBEBUILDER_ASSETS=\S+/missing is not a folder: using"):
        binaries.find(["kubectl"])


def test_children_of_a_new_crds_objects_are_collected_at_once() -> None:
    """The garbage collector looks for new CRDs only every 30 s: `install()` restarts the
    controller manager, so that the first owner's children go as fast as the later ones'."""
    with KopfCluster(crds=[Path(__file__).parents[2] / "examples" / "crd.yaml"], controller_manager=True) as cluster:
        with cluster.namespace() as namespace:
            owner = json.loads(cluster.kubectl("create", "-n", namespace, "-o", "json", "-f", "-", input=json.dumps(
                {"apiVersion": "demo.kopf.dev/v1", "kind": "Greeting", "metadata": {"name": "owner"}})))
            cluster.kubectl("create", "-n", namespace, "-f", "-", input=json.dumps({
                "apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "child", "ownerReferences": [
                    {"apiVersion": "demo.kopf.dev/v1", "kind": "Greeting", "name": "owner",
                     "uid": owner["metadata"]["uid"]}]}}))
            cluster.kubectl("delete", "-n", namespace, "greeting", "owner")
            deadline = time.monotonic() + 10
            while time.monotonic() < deadline and cluster.kubectl(
                    "get", "-n", namespace, "configmap", "child", "--ignore-not-found", "-o", "name").strip():
                time.sleep(0.2)
            assert not cluster.kubectl("get", "-n", namespace, "configmap", "child", "--ignore-not-found",
                                       "-o", "name").strip(), "the child outlived its owner by 10 s"
