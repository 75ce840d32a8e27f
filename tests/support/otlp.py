"""An OTLP/HTTP receiver of the tests' own (what an OpenTelemetry collector does with traces):
it decodes each export with the official protobuf definitions (PyPI's ``opentelemetry-proto``)
and keeps the spans, with their resource's attributes, for the tests to read."""

from __future__ import annotations

import http.server
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.proto.common.v1.common_pb2 import AnyValue


@dataclass(frozen=True)
class Span:
    """One received span, its ids in hex as W3C writes them."""
    name: str
    trace_id: str
    span_id: str
    parent_id: str  # empty for a root
    kind: int
    attributes: dict[str, Any]
    events: list[tuple[str, dict[str, Any]]]
    status: int  # 0 unset, 1 ok, 2 error
    message: str
    resource: dict[str, Any]
    scope: str


def _value(value: AnyValue) -> Any:
    field = value.WhichOneof('value')
    return getattr(value, field) if field is not None else None


def _attributes(pairs: Any) -> dict[str, Any]:
    return {pair.key: _value(pair.value) for pair in pairs}


class Receiver:
    """Listens on the loopback; ``url`` is its base endpoint (``/v1/traces`` is where spans go)."""

    def __init__(self) -> None:
        self.spans: list[Span] = []
        self.requests = 0
        self._lock = threading.Lock()
        receiver = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 (http.server's name)
                body = self.rfile.read(int(self.headers['Content-Length']))
                ok = self.path == '/v1/traces' and self.headers['Content-Type'] == 'application/x-protobuf'
                if ok:
                    receiver._take(ExportTraceServiceRequest.FromString(body))
                answer = ExportTraceServiceResponse().SerializeToString()
                self.send_response(200 if ok else 400)
                self.send_header('Content-Type', 'application/x-protobuf')
                self.send_header('Content-Length', str(len(answer)))
                self.end_headers()
                self.wfile.write(answer)

            def log_message(self, *args: Any) -> None:
                pass

        self._server = http.server.ThreadingHTTPServer(('127.0.0.1', 0), Handler)
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}"
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()

    def _take(self, request: ExportTraceServiceRequest) -> None:
        spans = []
        for resource_spans in request.resource_spans:
            resource = _attributes(resource_spans.resource.attributes)
            for scope_spans in resource_spans.scope_spans:
                for span in scope_spans.spans:
                    spans.append(Span(
                        name=span.name, trace_id=span.trace_id.hex(), span_id=span.span_id.hex(),
                        parent_id=span.parent_span_id.hex(), kind=span.kind,
                        attributes=_attributes(span.attributes),
                        events=[(event.name, _attributes(event.attributes)) for event in span.events],
                        status=span.status.code, message=span.status.message,
                        resource=resource, scope=scope_spans.scope.name,
                    ))
        with self._lock:
            self.requests += 1
            self.spans.extend(spans)

    def received(self) -> list[Span]:
        with self._lock:
            return list(self.spans)

    def wait_for(self, check: Callable[[list[Span]], Any], timeout: float = 30) -> Any:
        """The first truthy result of ``check`` on the spans received so far."""
        deadline = time.monotonic() + timeout
        while True:
            result = check(self.received())
            if result or time.monotonic() > deadline:
                assert result, f"not received in {timeout}s; received: {[s.name for s in self.received()]}"
                return result
            time.sleep(0.2)

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()


def receiving() -> Iterator[Receiver]:
    """A receiver for the duration of a fixture."""
    receiver = Receiver()
    try:
        yield receiver
    finally:
        receiver.close()
