"""`kopf.testing.KopfCluster` on bad input: programs found nowhere (one error naming the ways),
programs from `$KUBEBUILDER_ASSETS` only, a CRD that never becomes established (named, with its
conditions), and a test that leaves objects with finalizers (the teardown ends, and names them)."""

from __future__ import annotations

import json
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
