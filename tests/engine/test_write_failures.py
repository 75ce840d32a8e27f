"""A write that the API refuses (here: by an admission webhook) is retried with the throttling
delays, and the handlers that already ran are not run again."""

from __future__ import annotations

import base64
import http.server
import json
import ssl
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from conftest import apply, kubectl
from operators import OperatorProcess, eventually, get, write_script


@pytest.fixture()
def refusing_webhook(tmp_path: Path, namespace: str) -> Iterator[list[str]]:
    """Deny the operator's first two writes of its state to greetings; record every UPDATE."""
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
                    "-keyout", "key.pem", "-out", "cert.pem", "-subj", "/CN=127.0.0.1",
                    "-addext", "subjectAltName=IP:127.0.0.1"], cwd=tmp_path, check=True, capture_output=True)
    seen: list[str] = []

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            review = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            request = review["request"]
            annotations = request["object"].get("metadata", {}).get("annotations", {})
            state_write = "kopf.zalando.org/last-handled-configuration" in annotations
            seen.append("state" if state_write else "other")
            allowed = not state_write or seen.count("state") > 2
            body = json.dumps({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "response": {
                "uid": request["uid"], "allowed": allowed,
                "status": {"code": 500, "message": "temporarily refused"}}}).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: Any) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(tmp_path / "cert.pem", tmp_path / "key.pem")
    server.socket = context.wrap_socket(server.socket, server_side=True)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    name = f"refuse-{namespace}"
    apply({"apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingWebhookConfiguration",
           "metadata": {"name": name},
           "webhooks": [{
               "name": "refuse.kopf-rs.dev",
               "clientConfig": {"url": f"https://127.0.0.1:{server.server_address[1]}/",
                                "caBundle": base64.b64encode((tmp_path / "cert.pem").read_bytes()).decode()},
               "rules": [{"apiGroups": ["demo.kopf.dev"], "apiVersions": ["v1"], "operations": ["UPDATE"],
                          "resources": ["greetings"]}],
               "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": namespace}},
               "admissionReviewVersions": ["v1"], "sideEffects": "None", "failurePolicy": "Fail",
           }]})
    try:
        yield seen
    finally:
        kubectl("delete", "validatingwebhookconfiguration", name, check=False)
        server.shutdown()


def test_refused_writes_are_retried_without_rerunning_handlers(
        crd: None, namespace: str, tmp_path: Path, refusing_webhook: list[str]) -> None:
    script = write_script(tmp_path, """
        import kopf

        @kopf.on.create('greetings')
        def once(name, logger, **_):
            logger.info(f"once {name}")
            return 'done'
    """)
    kubectl("create", "-f", "-", input=json.dumps({"apiVersion": "demo.kopf.dev/v1", "kind": "Greeting",
                                                   "metadata": {"name": "w1", "namespace": namespace}}))
    # The webhook's configuration takes a moment to become active: probe it with dry-runs.
    eventually(lambda: kubectl("annotate", "greeting", "w1", "-n", namespace, "probe=1", "--overwrite",
                               "--dry-run=server", check=False) is not None and "other" in refusing_webhook,
               what="the webhook to be called")
    operator = OperatorProcess(["run", "-n", namespace, str(script)], cwd=tmp_path)
    try:
        obj = eventually(lambda: (o := get("greeting", "w1", namespace)).get("status") and o,
                         timeout=60, what="the result")
    finally:
        operator.stop()
    output = operator.output
    assert output.count("once w1") == 1
    assert "Throttling for 1 seconds due to an unexpected error" in output
    assert "temporarily refused" in output
    assert obj["status"] == {"once": "done"}
    assert "kopf.zalando.org/last-handled-configuration" in obj["metadata"]["annotations"]
