"""A fault-injecting HTTP proxy between an operator and the test cluster's API server, for
the faults a real server does not make on demand: throttling (429, 503) with or without a
Status body and a Retry-After header, server errors, watch streams cut in the middle of an
event. The operator talks plain HTTP to the proxy on loopback (a kubeconfig of its own,
without credentials); the proxy talks HTTPS to the API server with the admin's token."""

from __future__ import annotations

import http.client
import http.server
import json
import os
import socketserver
import ssl
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path


@dataclass
class Fault:
    """What to do instead of forwarding a request (or to its response)."""

    code: int = 0  # answer this status instead of forwarding (0: forward)
    headers: dict[str, str] = field(default_factory=dict)
    body: bytes = b""
    cut_after: int | None = None  # forward, but cut the response after this many bytes


# Decides for each request (method, path with query): None forwards it as it is.
Rule = Callable[[str, str], Fault | None]


@dataclass
class Seen:
    method: str
    path: str
    at: float  # time.monotonic()
    fault: Fault | None


class FaultProxy:
    """Listens on loopback; `rule` may be changed while it runs; `seen` records requests."""

    def __init__(self, rule: Rule | None = None) -> None:
        kubeconfig = json.loads(Path(os.environ["KUBECONFIG"]).read_text())
        pki = Path(os.environ["KUBECONFIG"]).parent / "pki"
        server = kubeconfig["clusters"][0]["cluster"]["server"]
        host, port = server.removeprefix("https://").split(":")
        self.upstream = (host, int(port))
        self.token = (pki / "admin.token").read_text().strip()
        self.context = ssl.create_default_context(cafile=str(pki / "ca.crt"))
        self.rule: Rule = rule or (lambda method, path: None)
        self.seen: list[Seen] = []
        proxy = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: object) -> None:
                pass

            def handle_one(self) -> None:
                proxy.serve(self)

            do_GET = do_POST = do_PATCH = do_PUT = do_DELETE = handle_one

        class Server(socketserver.ThreadingMixIn, http.server.HTTPServer):
            daemon_threads = True

        self.server = Server(("127.0.0.1", 0), Handler)
        self.port = self.server.server_address[1]
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def kubeconfig(self, directory: Path) -> Path:
        """A kubeconfig that leads to the proxy."""
        path = directory / "proxy-kubeconfig"
        path.write_text(json.dumps({
            "apiVersion": "v1", "kind": "Config", "current-context": "proxy",
            "clusters": [{"name": "proxy", "cluster": {"server": f"http://127.0.0.1:{self.port}"}}],
            "users": [{"name": "nobody", "user": {}}],
            "contexts": [{"name": "proxy", "context": {"cluster": "proxy", "user": "nobody"}}],
        }))
        return path

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()

    def serve(self, handler: http.server.BaseHTTPRequestHandler) -> None:
        length = int(handler.headers.get("Content-Length") or 0)
        body = handler.rfile.read(length) if length else b""
        fault = self.rule(handler.command, handler.path)
        self.seen.append(Seen(handler.command, handler.path, time.monotonic(), fault))
        if fault is not None and fault.code:
            handler.send_response(fault.code)
            for name, value in {"Content-Length": str(len(fault.body)), **fault.headers}.items():
                handler.send_header(name, value)
            handler.end_headers()
            handler.wfile.write(fault.body)
            return
        upstream = http.client.HTTPSConnection(*self.upstream, context=self.context, timeout=300)
        headers = {name: value for name, value in handler.headers.items()
                   if name.lower() not in ("host", "authorization", "connection", "accept-encoding")}
        headers["Authorization"] = f"Bearer {self.token}"
        upstream.request(handler.command, handler.path, body=body or None, headers=headers)
        response = upstream.getresponse()
        # Streamed as it comes (watches), delimited by the connection's end.
        handler.send_response(response.status)
        for name, value in response.getheaders():
            if name.lower() not in ("transfer-encoding", "content-length", "connection"):
                handler.send_header(name, value)
        handler.send_header("Connection", "close")
        handler.end_headers()
        handler.close_connection = True
        sent = 0
        try:
            while chunk := response.read1(65536):
                if fault is not None and fault.cut_after is not None and sent + len(chunk) > fault.cut_after:
                    handler.wfile.write(chunk[:fault.cut_after - sent])
                    handler.wfile.flush()
                    break  # cut: the rest of the stream (and of the event) never comes
                handler.wfile.write(chunk)
                handler.wfile.flush()
                sent += len(chunk)
        except OSError:
            pass
        finally:
            upstream.close()
