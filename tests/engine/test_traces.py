"""`kopf run --traces`: OpenTelemetry's spans of a Greeting's life on the real control plane, as an
OTLP collector receives them (the tests' own receiver, decoding with the official definitions):
the events' spans with their handlers' and requests' spans under them, a retried handler's
failure, the operator's own spans nested under its handler's through OpenTelemetry's Python
API, and what an absent collector or a wrong setting does."""

from __future__ import annotations

import json
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest
from support.cluster import kubectl, kubectl_json
from support.metrics import scrape, value
from support.network import free_port
from support.operators import OperatorProcess, eventually, write_script
from support.otlp import Receiver, Span, receiving

SERVER, CLIENT, CONSUMER, INTERNAL = 2, 3, 5, 1  # OTLP's span kinds
ERROR = 2  # OTLP's status code
EVENT = "event greetings.v1.demo.kopf.dev"

HANDLERS = """
    import kopf
    from opentelemetry import trace
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor

    # The operator's own tracing, as its authors would set it up: OTLP to the same collector,
    # by the same OTEL_* variables.
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(OTLPSpanExporter()))
    trace.set_tracer_provider(provider)
    tracer = trace.get_tracer("greeter")

    @kopf.on.create('greetings')
    def create_fn(spec, **_):
        with tracer.start_as_current_span("compose greeting"):
            return {'greeted': spec.get('who')}

    @kopf.on.update('greetings')
    async def update_fn(retry, **_):
        with tracer.start_as_current_span("async work"):
            if retry < 1:
                raise kopf.TemporaryError("not yet", delay=0.5)

    @kopf.timer('greetings', interval=0.5)
    def tick(**_):
        pass
"""


def greeting(name: str, namespace: str) -> str:
    return json.dumps({"apiVersion": "demo.kopf.dev/v1", "kind": "Greeting",
                       "metadata": {"name": name, "namespace": namespace}, "spec": {"who": name}})


@pytest.fixture()
def receiver() -> Iterator[Receiver]:
    yield from receiving()


def named(spans: list[Span], name: str, **attributes: object) -> list[Span]:
    return [s for s in spans if s.name == name and all(s.attributes.get(k) == v for k, v in attributes.items())]


def only(spans: list[Span]) -> Span:
    assert len(spans) == 1, spans
    return spans[0]


def test_a_greetings_life_as_a_tree_of_spans(crd: None, namespace: str, tmp_path: Path, receiver: Receiver) -> None:
    script = write_script(tmp_path, HANDLERS)
    env = {"OTEL_EXPORTER_OTLP_ENDPOINT": receiver.url, "OTEL_SERVICE_NAME": "greeter",
           "OTEL_BSP_SCHEDULE_DELAY": "200"}
    operator = OperatorProcess(["run", "-n", namespace, "--standalone", str(script)], cwd=tmp_path, env=env)
    try:
        operator.wait_for(rf"Traces are exported to {receiver.url}/v1/traces\.")
        kubectl("create", "-f", "-", input=greeting("g1", namespace))
        operator.wait_for(r"Handler 'create_fn' succeeded")
        kubectl("patch", "greeting", "g1", "-n", namespace, "--type=merge", "-p", '{"spec": {"x": 1}}')
        operator.wait_for(r"Handler 'update_fn' succeeded")
        uid = kubectl_json("get", "greeting", "g1", "-n", namespace)["metadata"]["uid"]

        # The creation: the event's span, its handler's under it, the operator's own under that.
        creating = receiver.wait_for(lambda spans: named(spans, "compose greeting"))
        handler = only(named(receiver.received(), "handler create_fn"))
        event = only([s for s in receiver.received() if s.span_id == handler.parent_id])
        assert (event.name, event.kind, handler.kind) == (EVENT, CONSUMER, INTERNAL)
        assert event.attributes["kopf.cause"] == "create"
        assert event.attributes["kopf.object.name"] == "g1"
        assert event.attributes["kopf.object.uid"] == uid
        assert event.attributes["k8s.namespace.name"] == namespace
        assert event.attributes["kopf.object.resource_version"]
        assert event.attributes["kopf.queue.wait_s"] >= 0
        assert event.parent_id == "" and event.resource["service.name"] == "greeter"
        assert handler.attributes == {
            "kopf.handler.id": "create_fn", "kopf.handler.kind": "changing", "kopf.handler.retry": 0,
            "kopf.resource": "greetings.v1.demo.kopf.dev", "k8s.namespace.name": namespace,
            "kopf.object.name": "g1", "kopf.handler.outcome": "success",
        }
        own = only(creating)
        assert (own.trace_id, own.parent_id, own.scope) == (handler.trace_id, handler.span_id, "greeter")
        assert handler.trace_id == event.trace_id

        # The cycle's write: a request's span under the event's.
        patches = [s for s in receiver.received() if s.parent_id == event.span_id and s.kind == CLIENT]
        assert patches and all(p.name == "PATCH" and p.attributes["http.request.method"] == "PATCH"
                               for p in patches)
        assert any(p.attributes["url.path"].endswith(f"/namespaces/{namespace}/greetings/g1") for p in patches)

        # The update: failed once (its span says how), then succeeded in the next cycle's span.
        updates = receiver.wait_for(lambda spans: len(named(spans, "handler update_fn")) == 2
                                    and named(spans, "handler update_fn"))
        failed = only([s for s in updates if s.attributes["kopf.handler.retry"] == 0])
        retried = only([s for s in updates if s.attributes["kopf.handler.retry"] == 1])
        assert (failed.status, failed.message, failed.attributes["kopf.handler.outcome"]) == \
            (ERROR, "not yet", "temporary")
        assert failed.events == [("exception", {"exception.type": "TemporaryError", "exception.message": "not yet"})]
        assert retried.status != ERROR and retried.attributes["kopf.handler.outcome"] == "success"
        parents = {s.span_id: s for s in receiver.received()}
        assert parents[failed.parent_id].attributes["kopf.cause"] == "update"
        assert failed.parent_id != retried.parent_id
        assert {s.parent_id for s in named(receiver.received(), "async work")} == {failed.span_id, retried.span_id}

        # A timer's call is a trace of its own.
        tick = receiver.wait_for(lambda spans: named(spans, "handler tick"))[0]
        assert tick.parent_id == "" and tick.attributes["kopf.handler.kind"] == "timer"

        kubectl("delete", "greeting", "g1", "-n", namespace, "--timeout=30s")
    finally:
        assert operator.stop() == 0
    # Nothing of a secret's kind in any span: the requests' spans carry paths, no headers.
    assert not [s for s in receiver.received() if "authorization" in json.dumps(s.attributes).lower()]


def test_an_absent_collector_changes_nothing_but_a_counter(crd: None, namespace: str, tmp_path: Path) -> None:
    script = write_script(tmp_path, """
        import kopf

        @kopf.on.create('greetings')
        def create_fn(spec, **_):
            return {'greeted': spec.get('who')}
    """)
    port = free_port()
    nowhere = f"http://127.0.0.1:{free_port()}"
    operator = OperatorProcess(["run", "-n", namespace, "--standalone", "--traces", nowhere,
                                "--metrics", f"127.0.0.1:{port}", str(script)], cwd=tmp_path,
                               env={"OTEL_BSP_SCHEDULE_DELAY": "200", "OTEL_EXPORTER_OTLP_TIMEOUT": "1000"})
    try:
        kubectl("create", "-f", "-", input=greeting("g1", namespace))
        operator.wait_for(r"Handler 'create_fn' succeeded")
        eventually(lambda: kubectl_json("get", "greeting", "g1", "-n", namespace).get("status", {})
                   .get("create_fn") == {"greeted": "g1"}, what="the handler's result")
        eventually(lambda: value(scrape(port), "kopf_trace_spans_dropped_total", reason="export_failed") >= 2,
                   what="the dropped spans counted")
        assert value(scrape(port), "kopf_trace_spans_exported_total") == 0
        kubectl("create", "-f", "-", input=greeting("g2", namespace))
        operator.wait_for(r"Handler 'create_fn' succeeded", count=2)
    finally:
        assert operator.stop() == 0
    # Said once, not per batch.
    assert operator.output.count(f"Traces cannot be exported to {nowhere}/v1/traces") == 1


@pytest.mark.parametrize(("env", "said"), [
    ({"OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"}, "OTEL_EXPORTER_OTLP_PROTOCOL=grpc is not supported"),
    ({"OTEL_TRACES_SAMPLER": "xray"}, "OTEL_TRACES_SAMPLER=xray is not supported"),
    ({"OTEL_SDK_DISABLED": "true"}, "but OTEL_SDK_DISABLED=true turns them off"),
])
def test_what_cannot_be_honoured_stops_the_start(namespace: str, tmp_path: Path, env: dict[str, str],
                                                  said: str) -> None:
    script = write_script(tmp_path, "import kopf")
    operator = OperatorProcess(["run", "-n", namespace, "--standalone", "--traces", "http://127.0.0.1:4318",
                                str(script)], cwd=tmp_path, env=env)
    operator.process.wait(timeout=30)
    assert operator.stop() == 1
    assert said in operator.output


def test_off_by_default_and_nothing_of_opentelemetry_imported(crd: None, namespace: str, tmp_path: Path,
                                                                receiver: Receiver) -> None:
    script = write_script(tmp_path, """
        import sys
        import kopf

        @kopf.on.create('greetings')
        def create_fn(**_):
            return {'imported': sorted(m for m in sys.modules if m.startswith('opentelemetry'))}
    """)
    # A collector listens, but no option or variable names it.
    operator = OperatorProcess(["run", "-n", namespace, "--standalone", str(script)], cwd=tmp_path)
    try:
        kubectl("create", "-f", "-", input=greeting("g1", namespace))
        operator.wait_for(r"Handler 'create_fn' succeeded")
        eventually(lambda: kubectl_json("get", "greeting", "g1", "-n", namespace).get("status", {})
                   .get("create_fn") == {"imported": []}, what="the handler's result")
    finally:
        assert operator.stop() == 0
    assert receiver.received() == [] and "Traces" not in operator.output


def test_a_ratio_of_zero_keeps_no_trace(crd: None, namespace: str, tmp_path: Path, receiver: Receiver) -> None:
    script = write_script(tmp_path, HANDLERS)
    operator = OperatorProcess(["run", "-n", namespace, "--standalone", "--traces", receiver.url,
                                "--traces-ratio", "0", str(script)], cwd=tmp_path,
                               env={"OTEL_BSP_SCHEDULE_DELAY": "200", "OTEL_EXPORTER_OTLP_ENDPOINT": receiver.url})
    try:
        kubectl("create", "-f", "-", input=greeting("g1", namespace))
        operator.wait_for(r"Handler 'create_fn' succeeded")
        operator.wait_for(r"Timer 'tick' succeeded", count=3)
    finally:
        assert operator.stop() == 0
    # The handler's own spans follow the engine's decision (their parent is not sampled).
    assert receiver.received() == []


ADMISSION = """
    import kopf

    @kopf.on.startup()
    def configure(settings, **_):
        settings.admission.server = kopf.WebhookServer(port=0)
        settings.admission.managed = MANAGED

    @kopf.on.validate('greetings', labels={'traced': 'yes'})
    def check(spec, **_):
        if spec.get('mood') == 'grumpy':
            raise kopf.AdmissionError("No grumpy greetings, please.")
"""


def test_admission_reviews_are_traces_with_their_handlers(crd: None, namespace: str, tmp_path: Path,
                                                          receiver: Receiver) -> None:
    managed = f"{namespace}.kopf.dev"
    script = write_script(tmp_path, f"MANAGED = {managed!r}\n" + textwrap.dedent(ADMISSION))
    operator = OperatorProcess(["run", "-n", namespace, "--standalone", "--verbose", "--traces", receiver.url,
                                str(script)], cwd=tmp_path, env={"OTEL_BSP_SCHEDULE_DELAY": "200"})
    try:
        operator.wait_for(r"Reconfiguring the validating webhook", timeout=30)
        for name, mood in (("grumpy", "grumpy"), ("happy", "happy")):
            manifest = json.loads(greeting(name, namespace))
            manifest["metadata"]["labels"] = {"traced": "yes"}
            manifest["spec"]["mood"] = mood
            kubectl("create", "-f", "-", input=json.dumps(manifest), check=False)
        reviews = receiver.wait_for(lambda spans: len(named(spans, "AdmissionReview")) >= 2
                                    and named(spans, "AdmissionReview"))
    finally:
        assert operator.stop() == 0
        kubectl("delete", "validatingwebhookconfigurations,mutatingwebhookconfigurations", managed,
                "--ignore-not-found")
    by_name = {s.attributes.get("kopf.object.name"): s for s in reviews}
    denied, allowed = by_name["grumpy"], by_name["happy"]
    assert (denied.kind, denied.status, denied.message) == (SERVER, ERROR, "No grumpy greetings, please.")
    assert denied.attributes["kopf.admission.operation"] == "CREATE"
    assert denied.attributes["k8s.namespace.name"] == namespace
    assert allowed.status != ERROR
    handlers = named(receiver.received(), "handler check")
    assert {(h.parent_id, h.attributes["kopf.handler.outcome"]) for h in handlers} == \
        {(denied.span_id, "permanent"), (allowed.span_id, "success")}  # (AdmissionError is permanent)
