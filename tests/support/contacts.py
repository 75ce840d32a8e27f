"""The conversion example's Contacts (examples/conversion): made, read in either version, its CRD's
conversion; and a self-signed certificate for a webhook server of the tests' own."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

from support.cluster import kubectl, kubectl_json

CRD = "contacts.demo.kopf.dev"
RECONFIGURED = r"Reconfiguring the conversion webhook of contacts\.demo\.kopf\.dev"


def contact(called: str, namespace: str, version: str = "v1", **spec: Any) -> dict[str, Any]:
    return {"apiVersion": f"demo.kopf.dev/{version}", "kind": "Contact",
            "metadata": {"name": called, "namespace": namespace}, "spec": spec}


def create(*objects: dict[str, Any]) -> None:
    kubectl("create", "-f", "-", input=json.dumps({"apiVersion": "v1", "kind": "List", "items": list(objects)}))


def read(name: str, namespace: str, version: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["kubectl", "get", f"contacts.{version}.demo.kopf.dev", name, "-n", namespace,
                           "-o", "json"], capture_output=True, text=True, timeout=30, check=False)


def read_ok(name: str, namespace: str, version: str) -> dict[str, Any]:
    result = read(name, namespace, version)
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)  # type: ignore[no-any-return]


def conversion() -> dict[str, Any]:
    return kubectl_json("get", "crd", CRD)["spec"].get("conversion", {})  # type: ignore[no-any-return]


def certificate(directory: Path, name: str) -> tuple[Path, Path]:
    cert, key = directory / f"{name}.pem", directory / f"{name}.key"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-keyout", str(key),
                    "-out", str(cert), "-subj", f"/CN={name}", "-addext", "subjectAltName=IP:127.0.0.1"],
                   check=True, capture_output=True)
    return cert, key
