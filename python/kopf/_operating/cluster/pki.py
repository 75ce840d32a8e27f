"""The control plane's certificates and credentials: a CA; the API server's and kwok's serving
certificates; an admin's client certificate and static tokens; the service accounts' keys;
and the kubeconfigs that use them. Made with ``openssl``, once per state folder.
"""

from __future__ import annotations

import base64
import json
import secrets
import shutil
import subprocess
from pathlib import Path

SERVICE_IP = "10.0.0.1"
# The components' own user (its requests can be left out of an audit log).
COMPONENTS_USER = "kopf-controller-manager"


class PkiError(Exception):
    """The certificates cannot be made; the message says why."""


def openssl(*args: str, cwd: Path) -> None:
    if shutil.which("openssl") is None:
        raise PkiError("`openssl` is not on PATH; it is needed to make the control plane's certificates.")
    result = subprocess.run(["openssl", *args], cwd=cwd, capture_output=True, text=True, check=False)
    if result.returncode != 0:
        raise PkiError(f"openssl {' '.join(args[:2])} failed: {result.stderr.strip()}")


def make(pki: Path) -> None:
    """The CA, the serving and client certificates, the service-account keys, the tokens."""
    if not (pki / "complete").exists():
        shutil.rmtree(pki, ignore_errors=True)
        pki.mkdir(parents=True)
        pki.chmod(0o700)
        days = "3650"
        # ECDSA P-256 keys: made in milliseconds (RSA's took 2 of the control plane's 4-second
        # start), and every client here (Go's, rustls, OpenSSL) takes them.
        key = ("-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1")
        openssl("req", "-x509", *key, "-nodes", "-keyout", "ca.key", "-out", "ca.crt",
                "-days", days, "-subj", "/CN=kopf-rs-test-ca", cwd=pki)
        sans = ",".join(["IP:127.0.0.1", f"IP:{SERVICE_IP}", "DNS:localhost", "DNS:kubernetes",
                         "DNS:kubernetes.default", "DNS:kubernetes.default.svc",
                         "DNS:kubernetes.default.svc.cluster.local"])
        leaves = {
            "apiserver": ("/CN=kube-apiserver", f"subjectAltName={sans}\nextendedKeyUsage=serverAuth\n"),
            "admin": ("/O=system:masters/CN=kopf-admin", "extendedKeyUsage=clientAuth\n"),
            # kwok's kubelet API (the pods' logs), which the API server verifies with the CA.
            "kwok": ("/CN=kwok-kubelet", "subjectAltName=IP:127.0.0.1,DNS:localhost\nextendedKeyUsage=serverAuth\n"),
        }
        for name, (subject, extensions) in leaves.items():
            openssl("req", *key, "-nodes", "-keyout", f"{name}.key", "-out", f"{name}.csr",
                    "-subj", subject, cwd=pki)
            (pki / f"{name}.ext").write_text("basicConstraints=CA:FALSE\nkeyUsage=digitalSignature\n"
                                             + extensions)
            openssl("x509", "-req", "-in", f"{name}.csr", "-CA", "ca.crt", "-CAkey", "ca.key",
                    "-CAcreateserial", "-out", f"{name}.crt", "-days", days, "-extfile", f"{name}.ext", cwd=pki)
        # The service accounts' tokens are signed with ES256.
        openssl("ecparam", "-name", "prime256v1", "-genkey", "-noout", "-out", "sa.key", cwd=pki)
        openssl("ec", "-in", "sa.key", "-pubout", "-out", "sa.pub", cwd=pki)
        (pki / "complete").touch()
    if not (pki / "tokens.csv").exists():
        # An admin's bearer token (for token-based logins) and the components' own.
        token, components = secrets.token_hex(24), secrets.token_hex(24)
        (pki / "admin.token").write_text(token + "\n")
        (pki / "controller-manager.token").write_text(components + "\n")
        (pki / "tokens.csv").write_text(f"{token},kopf-token-admin,kopf-token-admin,system:masters\n"
                                        f"{components},{COMPONENTS_USER},{COMPONENTS_USER},system:masters\n")
        for name in ("admin.token", "controller-manager.token", "tokens.csv"):
            (pki / name).chmod(0o600)


def kubeconfig(home: Path, port: int, *, user: str = "admin") -> Path:
    """A kubeconfig of the API server at 127.0.0.1:port: the admin's (a client certificate) or
    the components' (a token; `user="controller-manager"`)."""
    pki = home / "pki"

    def b64(name: str) -> str:
        return base64.b64encode((pki / name).read_bytes()).decode()

    credentials = (
        {"client-certificate-data": b64("admin.crt"), "client-key-data": b64("admin.key")} if user == "admin"
        else {"token": (pki / "controller-manager.token").read_text().strip()}
    )
    config = {
        "apiVersion": "v1", "kind": "Config",
        "clusters": [{"name": "kopf-rs-test", "cluster": {
            "server": f"https://127.0.0.1:{port}", "certificate-authority-data": b64("ca.crt")}}],
        "users": [{"name": f"kopf-{user}", "user": credentials}],
        "contexts": [{"name": "kopf-rs-test", "context": {
            "cluster": "kopf-rs-test", "user": f"kopf-{user}", "namespace": "default"}}],
        "current-context": "kopf-rs-test",
        "preferences": {},
    }
    path = home / ("kubeconfig" if user == "admin" else f"kubeconfig-{user}")
    path.write_text(json.dumps(config, indent=2))  # JSON is YAML: every client reads it
    path.chmod(0o600)
    return path
