"""The handler's side of the traces (`kopf._handling.tracing`): the call's span made current for
OpenTelemetry's Python API, and nothing of it at all without the package."""

from __future__ import annotations

import sys

import pytest
from kopf._handling import tracing
from opentelemetry import trace

PARENT = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"


@pytest.fixture(autouse=True)
def fresh(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(tracing, "_api", None)  # looked for again in each test


def test_the_calls_span_is_current_within_and_not_after() -> None:
    with tracing.current_span(PARENT):
        context = trace.get_current_span().get_span_context()
        assert (format(context.trace_id, "032x"), format(context.span_id, "016x")) == \
            ("0af7651916cd43dd8448eb211c80319c", "b7ad6b7169203331")
        assert context.is_remote and context.trace_flags.sampled
    assert not trace.get_current_span().get_span_context().is_valid


def test_without_a_span_nothing_is_looked_for() -> None:
    with tracing.current_span(None):
        pass
    assert tracing._api is None


def test_without_opentelemetry_the_calls_go_as_without_traces(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "opentelemetry", None)  # as if not installed: its imports fail
    with tracing.current_span(PARENT):
        pass
    assert tracing._api is False
