"""The handler's side of the engine's traces (``kopf run --traces``): a call's span, which
the core sends as a W3C ``traceparent``, made the current span of OpenTelemetry's API while
the handler runs, so that the operator's own spans and instrumented clients nest under it.

Only if the ``opentelemetry`` package (its API) is installed: without it, nothing is imported
and the calls go as they would without traces. Asked once, at the first traced call.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

# OpenTelemetry's context API and W3C propagator once found; False: the package is absent.
_api: tuple[Any, Any] | bool | None = None


def _load() -> tuple[Any, Any] | None:
    global _api
    if _api is None:
        try:
            from opentelemetry import context
            from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator
        except ImportError:
            _api = False
        else:
            _api = (context, TraceContextTextMapPropagator())
    return _api if isinstance(_api, tuple) else None


@contextlib.contextmanager
def current_span(traceparent: str | None) -> Iterator[None]:
    """The call's span is the current one within (in this context: the call's task or thread)."""
    api = _load() if traceparent is not None else None
    if api is None:
        yield
        return
    context, propagator = api
    token = context.attach(propagator.extract({'traceparent': traceparent}))
    try:
        yield
    finally:
        context.detach(token)
