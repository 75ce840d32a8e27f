"""The operator image (docker/Dockerfile), built and run as a user builds and runs it, with
podman: on stand-ins of the official `python:3.x-slim` bases (checks/image-standin: no image
registry is reachable here), against the project's control plane.

- The image of examples/deploy (the handlers copied in) runs as the Deployment's pods would:
  the Deployment's own arguments, in-cluster login with the token of the ServiceAccount that
  `kopf rbac generate` made, a read-only root file system; a Greeting is created, updated and
  deleted, each handled; the user is not root; the liveness endpoint answers; SIGTERM ends it
  with 0 and the Lease is released.
- The engine's image with the handlers mounted (and a kubeconfig) handles a Greeting in a
  peering, and leaves the peering on SIGTERM.
- The Deployment is accepted by the API server (a server-side dry run); its RBAC is what
  `kopf rbac generate` makes today.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from support.cluster import kubectl, kubectl_json
from support.containers import container_process, greeting, podman, run_options
from support.forwarding import Forwarder
from support.network import free_port
from support.operators import api_server, eventually, get, pod_secrets, refused

ROOT = Path(__file__).parents[2]
CACHE = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "kopf-rs"
DEPLOY = ROOT / "examples" / "deploy"
GREETER = ROOT / "examples" / "greeter" / "operator.py"
SUITES = {"bookworm": "3.11", "trixie": "3.13"}  # the stand-ins' Debian and its Python
ACCOUNT = "greeter-operator"  # examples/deploy: the ServiceAccount, roles and Lease are all named so
GRACE = 30  # Kubernetes' default terminationGracePeriodSeconds, as the Deployment says
SERVICE_ADDRESS = "127.0.0.143"  # kubernetes.default.svc, in the containers (on the host's network)


@pytest.fixture(scope="module")
def standins() -> list[str]:
    """The stand-in bases; waits for checks/run's background preparation, or does it now."""
    result = subprocess.run([str(ROOT / "checks" / "image-standin")], capture_output=True, text=True,
                            check=False, timeout=1800)
    if result.returncode != 0:
        pytest.fail(f"checks/image-standin failed:\n{result.stderr[-3000:]}", pytrace=False)
    return result.stdout.split()


@pytest.fixture(scope="module", params=sorted(SUITES))
def images(request: pytest.FixtureRequest, standins: list[str],
           tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, str]]:
    """The engine's image (docker/Dockerfile) and examples/deploy's (the handlers copied in),
    built on one stand-in base as users build them on the official one."""
    suite = request.param
    base = f"localhost/kopf-rs-python-standin:{suite}"
    assert base in standins
    context = tmp_path_factory.mktemp(f"context-{suite}")
    shutil.copytree(ROOT / "docker", context / "docker")
    (context / "dist").mkdir()
    (wheel,) = (CACHE / "wheels").glob("kopf_rs-*-manylinux2014_x86_64*.whl")
    shutil.copy(wheel, context / "dist")
    (context / "examples" / "greeter").mkdir(parents=True)
    shutil.copy(GREETER, context / "examples" / "greeter")
    engine, operator = f"localhost/kopf-rs-test:{suite}", f"localhost/greeter-operator-test:{suite}"
    # `--from`: the stand-in instead of the Dockerfile's `FROM python:...-slim` (the only change).
    podman("build", "--isolation", "chroot", "--layers=false", "--from", base, "-f", context / "docker" / "Dockerfile",
           "-t", engine, context)
    podman("build", "--isolation", "chroot", "--layers=false", "--build-arg", f"ENGINE_IMAGE={engine}",
           "-f", DEPLOY / "Dockerfile", "-t", operator, context)
    sizes = {image: int(podman("image", "inspect", "--format", "{{.Size}}", image)) for image in (base, engine)}
    added = (sizes[engine] - sizes[base]) / 1e6
    print(f"\nthe image on Debian {suite} (Python {SUITES[suite]}): {sizes[engine] / 1e6:.0f} MB, "
          f"the engine's layer {added:.1f} MB over the base's {sizes[base] / 1e6:.0f} MB")
    assert added < 60, f"the engine adds {added:.1f} MB to the base image"
    version = podman("run", *run_options(f"version-{suite}"), "--entrypoint", "kopf", engine, "--version").strip()
    assert "kopf-rs" in version, version
    yield engine, operator
    subprocess.run(["podman", "rmi", "-f", operator, engine], capture_output=True, check=False)


def deployment() -> dict[str, Any]:
    documents = [document for document in yaml.safe_load_all((DEPLOY / "deployment.yaml").read_text()) if document]
    (found,) = [document for document in documents if document["kind"] == "Deployment"]
    return found


def liveness_from_inside(name: str, url: str) -> str:
    probe = f"import urllib.request; print(urllib.request.urlopen({url!r}, timeout=5).status)"
    return podman("exec", name, "python3", "-c", probe).strip()


def test_the_deployments_image_handles_greetings_as_its_pod_would(
        images: tuple[str, str], crd: None, namespace: str, tmp_path: Path) -> None:
    _, image = images
    kubectl("apply", "-f", str(DEPLOY / "rbac.yaml"))
    secrets = pod_secrets(ACCOUNT, tmp_path / "serviceaccount")
    container = deployment()["spec"]["template"]["spec"]["containers"][0]
    port = free_port()  # the host's network: the Deployment's port 8080 may be taken here
    # The Deployment's arguments, but for the test's namespace only (other tests' Greetings are
    # not this one's to handle).
    args = [part for arg in container["args"]
            for part in (["--namespace", namespace] if arg == "--all-namespaces"
                         else [arg.replace(":8080/", f":{port}/")])]
    # In a pod, the service account's login goes to https://kubernetes.default.svc (as Kopf's
    # does): here, that name is a loopback address of its own, whose port 443 leads to the API.
    service = Forwarder(api_server(), listen=(SERVICE_ADDRESS, 443))
    name = f"greeter-{namespace}"
    options = [*run_options(name), "--read-only", "--read-only-tmpfs=false",  # readOnlyRootFilesystem
               "--add-host", f"kubernetes.default.svc:{SERVICE_ADDRESS}",
               "-e", "POD_ID=greeter-pod", "-e", "POD_NAMESPACE=default",
               "-v", f"{secrets}:/var/run/secrets/kubernetes.io/serviceaccount:ro"]
    operator = container_process(tmp_path, options, image, args)
    try:
        operator.wait_for(rf"Leading: the lease 'default/{ACCOUNT}' is held by greeter-pod", timeout=60)
        kubectl("apply", "-f", "-", input=greeting("hello", namespace, "world"))
        status = eventually(lambda: get("greeting", "hello", namespace).get("status", {}).get("greet"),
                            what="the creation handled")
        assert status == {"message": "Hello, world!"}
        kubectl("apply", "-f", "-", input=greeting("hello", namespace, "container"))
        status = eventually(lambda: get("greeting", "hello", namespace).get("status", {}).get("regreet/spec.who"),
                            what="the update handled")
        assert status == {"message": "Hello again, container!"}
        assert podman("exec", name, "id", "-u").strip() == "1000"
        assert liveness_from_inside(name, f"http://127.0.0.1:{port}/healthz") == "200"
        kubectl("delete", "greeting", "hello", "-n", namespace, "--timeout=30s")  # the finalizer let go
        operator.wait_for(r"Goodbye, hello\.")
    finally:
        code = operator.stop(signal.SIGTERM, timeout=GRACE)
        subprocess.run(["podman", "rm", "-f", name], capture_output=True, check=False)
        service.cut()
    output = operator.output
    assert code == 0, output
    assert f"Released the lease 'default/{ACCOUNT}'." in output, output
    lease = kubectl_json("get", "lease", ACCOUNT, "-n", "default")
    assert not lease["spec"].get("holderIdentity"), lease
    assert not refused(output), output
    assert "Traceback" not in output, output


def test_the_engines_image_runs_mounted_handlers_with_a_kubeconfig(
        images: tuple[str, str], peering: str, namespace: str, tmp_path: Path) -> None:
    image, _ = images
    kubeconfig = tmp_path / "kubeconfig"
    shutil.copy(os.environ["KUBECONFIG"], kubeconfig)
    kubeconfig.chmod(0o644)  # the image's user (uid 1000) reads it
    handlers = tmp_path / "handlers.py"
    shutil.copy(GREETER, handlers)
    handlers.chmod(0o644)
    name = f"mounted-{namespace}"
    options = [*run_options(name), "-e", "KUBECONFIG=/kube/config", "-v", f"{kubeconfig}:/kube/config:ro",
               "-v", f"{handlers}:/operator/handlers.py:ro"]
    operator = container_process(tmp_path, options, image, ["--namespace", namespace, "--peering", peering,
                                                           "/operator/handlers.py"])
    try:
        eventually(lambda: kubectl_json("get", "kopfpeering", peering, "-n", namespace).get("status"),
                   timeout=60, what="the operator in the peering")
        kubectl("apply", "-f", "-", input=greeting("mounted", namespace, "mount"))
        status = eventually(lambda: get("greeting", "mounted", namespace).get("status", {}).get("greet"),
                            timeout=60, what="the creation handled")
        assert status == {"message": "Hello, mount!"}
    finally:
        code = operator.stop(signal.SIGTERM, timeout=GRACE)
        subprocess.run(["podman", "rm", "-f", name], capture_output=True, check=False)
    assert code == 0, operator.output
    assert "Signal SIGTERM is received. Operator is stopping." in operator.output
    assert not kubectl_json("get", "kopfpeering", peering, "-n", namespace).get("status"), "the peer is left behind"


def test_the_deployment_is_accepted_and_its_rbac_is_what_kopf_generates(crd: None) -> None:
    generated = subprocess.run(
        [str(Path(sys.executable).with_name("kopf")), "rbac", "generate", "examples/greeter/operator.py", "-A",
         "--standalone", "--lease", ACCOUNT, "--name", ACCOUNT, "--account-namespace", "default"],
        capture_output=True, text=True, check=False, cwd=ROOT, timeout=120)
    assert generated.returncode == 0, generated.stderr
    assert generated.stdout == (DEPLOY / "rbac.yaml").read_text(), \
        "examples/deploy/rbac.yaml is not what `kopf rbac generate` makes now: regenerate it (deployment.yaml says how)"
    kubectl("apply", "--dry-run=server", "-f", str(DEPLOY / "rbac.yaml"), "-f", str(DEPLOY / "deployment.yaml"))
    container = deployment()["spec"]["template"]["spec"]["containers"][0]
    assert container["livenessProbe"]["httpGet"]["path"] == "/healthz"
    assert "http://0.0.0.0:8080/healthz" in container["args"]
    assert container["resources"]["requests"] and container["resources"]["limits"]
