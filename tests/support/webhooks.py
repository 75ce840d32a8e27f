"""A tiny HTTPS admission webhook on loopback with a self-signed CA, for tests."""

from __future__ import annotations

import base64
import contextlib
import http.server
import json
import ssl
import subprocess
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any


@contextlib.contextmanager
def admission_server(directory: Path, decide: Callable[[dict[str, Any]], tuple[bool, str]]
                     ) -> Iterator[tuple[int, str]]:
    """Serve `decide(request) -> (allowed, message)`; yield the port and the CA bundle (base64)."""
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
                    "-keyout", "key.pem", "-out", "cert.pem", "-subj", "/CN=127.0.0.1",
                    "-addext", "subjectAltName=IP:127.0.0.1"], cwd=directory, check=True, capture_output=True)

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            request = json.loads(self.rfile.read(int(self.headers["Content-Length"])))["request"]
            allowed, message = decide(request)
            body = json.dumps({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "response": {
                "uid": request["uid"], "allowed": allowed, "status": {"code": 403, "message": message},
            }}).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: Any) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(directory / "cert.pem", directory / "key.pem")
    server.socket = context.wrap_socket(server.socket, server_side=True)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield server.server_address[1], base64.b64encode((directory / "cert.pem").read_bytes()).decode()
    finally:
        server.shutdown()


@contextlib.contextmanager
def validating_webhook(directory: Path, name: str, decide: Callable[[dict[str, Any]], tuple[bool, str]], *,
                       rule: dict[str, Any], namespace: str) -> Iterator[None]:
    """`decide` as the API's validating webhook for the requests of `rule` in the namespace; the
    configuration is removed afterwards."""
    from support.cluster import apply, kubectl
    with admission_server(directory, decide) as (port, ca_bundle):
        apply({"apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingWebhookConfiguration",
               "metadata": {"name": name},
               "webhooks": [{
                   "name": f"{name}.kopf-rs.dev",
                   "clientConfig": {"url": f"https://127.0.0.1:{port}/", "caBundle": ca_bundle},
                   "rules": [rule],
                   "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": namespace}},
                   "admissionReviewVersions": ["v1"], "sideEffects": "None", "failurePolicy": "Fail",
               }]})
        try:
            yield
        finally:
            kubectl("delete", "validatingwebhookconfiguration", name, check=False)


# An operator with a validating webhook, as developed (its own server and configuration), which
# an installer (an OLM bundle, a chart) runs with its own Service, certificate and configuration.
POLITE = """
import kopf

@kopf.on.startup()
def configure(settings, **_):
    # In development: a local server whose configuration the operator keeps. In an installed
    # pod, the installer's service and certificate, and the installer's configuration.
    settings.admission.server = kopf.WebhookAutoServer()
    settings.admission.managed = 'greeter.example.com'

@kopf.on.validate('greetings', operations=['CREATE'])
def polite(spec, **_):
    if spec.get('greeting') == 'go away':
        raise kopf.AdmissionError("Greetings are polite here.")
"""
