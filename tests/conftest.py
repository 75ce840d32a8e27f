"""Shared fixtures: the real control plane (checks/cluster) for the whole session, namespaces,
the examples' CRDs, PyPI's Kopf. The helpers the tests share are in `support/`."""

from __future__ import annotations

import os
import subprocess
import sys
import tarfile
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from support import certmanager
from support.cluster import CLUSTER, EXAMPLES, apply, kubectl


def _cluster(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(CLUSTER), *args], capture_output=True, text=True, env=env, check=False)


@pytest.fixture(scope="session")
def cluster() -> Iterator[dict[str, str]]:
    """Bring the control plane up once; stop it at the end only if this session started it.

    The shell lines that `cluster up` prints are applied to this process's environment,
    so kubectl, the operator processes and the Python clients all find the cluster.
    """
    was_running = _cluster("status").returncode == 0
    result = _cluster("up")
    if result.returncode != 0:
        pytest.fail(f"cluster up failed:\n{result.stderr}", pytrace=False)
    for line in result.stdout.splitlines():
        name, _, value = line.removeprefix("export ").partition("=")
        value = value.strip('"').replace("$PATH", os.environ.get("PATH", ""))
        os.environ[name] = value
    yield {"KUBECONFIG": os.environ["KUBECONFIG"]}
    if not was_running and not os.environ.get("KOPF_CLUSTER_KEEP"):
        _cluster("down")


@pytest.fixture()
def namespace(cluster: dict[str, str]) -> Iterator[str]:
    """A fresh namespace per test, deleted (without waiting) afterwards."""
    name = f"test-{uuid.uuid4().hex[:8]}"
    kubectl("create", "namespace", name)
    yield name
    kubectl("delete", "namespace", name, "--wait=false", check=False)


@pytest.fixture(scope="session")
def crd(cluster: dict[str, str]) -> None:
    """The examples' custom resource (`greetings.demo.kopf.dev`), established and discoverable."""
    kubectl("apply", "-f", str(EXAMPLES / "crd.yaml"))
    kubectl("wait", "--for=condition=Established", "crd/greetings.demo.kopf.dev", "--timeout=30s")


@pytest.fixture()
def contacts(cluster: dict[str, str]) -> Iterator[None]:
    """The conversion example's CRD (`contacts.demo.kopf.dev`, examples/conversion), new for each
    test (its conversion as an operator leaves it is gone)."""
    name = "contacts.demo.kopf.dev"
    kubectl("delete", "crd", name, "--ignore-not-found", "--timeout=60s")
    kubectl("apply", "-f", str(EXAMPLES / "conversion" / "crd.yaml"))
    kubectl("wait", "--for=condition=Established", f"crd/{name}", "--timeout=30s")
    yield
    kubectl("delete", "crd", name, "--ignore-not-found", "--wait=false")


@pytest.fixture(scope="session")
def cert_manager(cluster: dict[str, str], tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """cert-manager running in the control plane (its controllers and cainjector), for this session."""
    log = tmp_path_factory.mktemp("cert-manager") / "cert-manager.log"
    process = certmanager.start(log)
    yield
    process.terminate()
    process.wait(timeout=30)


@pytest.fixture(scope="session")
def peering_crds(cluster: dict[str, str]) -> None:
    kubectl("apply", "-f", str(EXAMPLES / "peering.yaml"))
    for name in ("kopfpeerings.kopf.dev", "clusterkopfpeerings.kopf.dev"):
        kubectl("wait", "--for=condition=Established", f"crd/{name}", "--timeout=30s")


@pytest.fixture()
def peering(peering_crds: None, crd: None, namespace: str) -> Iterator[str]:
    """A `KopfPeering` named `test` in the test's namespace."""
    apply({"apiVersion": "kopf.dev/v1", "kind": "KopfPeering", "metadata": {"name": "test", "namespace": namespace}})
    yield "test"


@pytest.fixture(scope="session")
def reference_kopf() -> Path:
    """The `kopf` command of PyPI's Kopf 1.45.2, in its own virtualenv (checks/reference-kopf)."""
    venv = os.environ.get("KOPF_REFERENCE_VENV")
    if not venv:
        script = Path(__file__).parents[1] / "checks" / "reference-kopf"
        result = subprocess.run([str(script)], capture_output=True, text=True, check=False)
        if result.returncode != 0:
            pytest.fail(f"checks/reference-kopf failed:\n{result.stderr}", pytrace=False)
        venv = result.stdout.strip().splitlines()[-1]
    return Path(venv) / "bin" / "kopf"


# Kopf 1.45.2's sdist (its examples and tests), downloaded at test time into a cache
# outside the repository (never stored in it), and its examples' CRD in the cluster.
KOPF_VERSION = "1.45.2"
CACHE = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "kopf-rs" / f"kopf-{KOPF_VERSION}"


@pytest.fixture(scope="session")
def kopf_source() -> Path:
    """Kopf's sdist, downloaded once into the cache and unpacked there."""
    root = CACHE / f"kopf-{KOPF_VERSION}"
    if not (root / "examples").is_dir():
        CACHE.mkdir(parents=True, exist_ok=True)
        subprocess.run([sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", "--no-binary", ":all:",
                        "--disable-pip-version-check", "-d", str(CACHE), f"kopf=={KOPF_VERSION}"], check=True)
        with tarfile.open(CACHE / f"kopf-{KOPF_VERSION}.tar.gz") as archive:
            archive.extractall(CACHE, filter="data")
    return root


@pytest.fixture(scope="session")
def example_crd(cluster: dict[str, str], kopf_source: Path) -> None:
    kubectl("apply", "-f", str(kopf_source / "examples" / "crd.yaml"))
    kubectl("wait", "--for=condition=Established", "crd/kopfexamples.kopf.dev", "--timeout=30s")
