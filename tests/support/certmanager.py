"""cert-manager in the test control plane: its controllers and cainjector (checks/cert-manager,
built by checks/run: $KOPF_RS_CERT_MANAGER) and its CRDs, and what a kubelet does with the
Secrets it writes (their files in a folder)."""

from __future__ import annotations

import base64
import os
import subprocess
from pathlib import Path

from support.cluster import kubectl, kubectl_json


def program() -> Path:
    path = os.environ.get("KOPF_RS_CERT_MANAGER")
    assert path, "$KOPF_RS_CERT_MANAGER names no cert-manager (checks/run builds it: checks/cert-manager)"
    return Path(path)


def start(log: Path) -> subprocess.Popen[bytes]:
    """cert-manager's CRDs applied, and its controllers running as the plane's admin."""
    crds = sorted((program().parent / "crds").glob("*.yaml"))
    for crd in crds:
        kubectl("apply", "--server-side", "--force-conflicts", "-f", str(crd))
    # (Files named GROUP_PLURAL.yaml.)
    names = [f"crd/{plural}.{group}" for group, _, plural in (crd.stem.partition("_") for crd in crds)]
    kubectl("wait", "--for=condition=Established", "--timeout=180s", *names)
    # (ClusterIssuers keep their Secrets in cert-manager's own namespace.)
    kubectl("create", "namespace", "cert-manager", check=False)
    with log.open("wb") as output:
        return subprocess.Popen([str(program()), os.environ["KUBECONFIG"]], stdout=output, stderr=subprocess.STDOUT)


def mount(namespace: str, secret: str, folder: Path) -> dict[str, bytes]:
    """The Secret's data as files in the folder, swapped in at once as the kubelet does (a new
    folder, then the link to it); the data."""
    data = {key: base64.b64decode(value) for key, value in
            kubectl_json("get", "secret", secret, "-n", namespace)["data"].items()}
    folder.mkdir(exist_ok=True)
    version = folder / f"..v{len(list(folder.glob('..v*')))}"
    version.mkdir()
    for key, value in data.items():
        (version / key).write_bytes(value)
        if not (folder / key).is_symlink():
            (folder / key).symlink_to(Path("..data") / key)
    link = folder / "..data.partial"
    link.symlink_to(version.name)
    link.replace(folder / "..data")
    return data
