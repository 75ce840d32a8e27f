"""The kinds of resource handlers, one row each: where the registry keeps them, what the core
is told about each handler, which logger their calls get, and what their errors mean unless
they say. The bridge (``calls.Bridge``) reads them from here only; the core's own list of
kinds (``HandlerKind`` in ``crates/intents``) is checked against ``protocol.HandlerKind`` by
``tests/unit/test_protocol.py``, and this table against both by ``tests/unit/test_kinds.py``."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

from kopf._bridge.protocol import HandlerKind
from kopf._handling.handlers import OperatorRegistry, TimerHandler
from kopf._logs.loggers import LocalObjectLogger, ObjectLogger, TerseObjectLogger
from kopf._structures.errors import ErrorsMode


@dataclasses.dataclass(frozen=True)
class Kind:
    """One kind of resource handlers."""
    name: HandlerKind  # as the core calls it
    registry: str  # the registry's list of them (``OperatorRegistry._changing`` & co.)
    spec: str  # their key in the spec the core starts with (``Bridge.spec()``)
    describe: Callable[[Any], dict[str, Any]]  # a handler's fields in that spec
    logger: type[ObjectLogger] = ObjectLogger  # a call's ``logger`` kwarg
    errors: ErrorsMode = ErrorsMode.TEMPORARY  # what an exception means unless ``errors=`` says
    once: bool = False  # no progress is kept: each call is its first and only attempt
    label: str = 'handler'  # how RBAC's comments and warnings name one (`kopf rbac`)
    watched: bool = True  # its resource is watched (admission handlers' is not)
    patches: bool = True  # and its objects patched: finalizers, progress, results (`kopf rbac`)

    def handlers(self, registry: OperatorRegistry) -> list[Any]:
        """The registry's handlers of this kind, as they are now (a copy)."""
        return list(getattr(registry, self.registry))


def _filtered(handler: Any) -> dict[str, Any]:
    return {'id': handler.id, **handler.filters_for_engine()}


# Silent handlers log locally (no Kubernetes Events); indexing ones, called often, even less.
# A review is answered at once, with no retries; `on.event`, indexing and log handlers are not
# retried; the others are.
KINDS: tuple[Kind, ...] = (
    Kind('changing', '_changing', 'changing', lambda h: h.changing_for_engine()),
    Kind('watching', '_watching', 'watching', _filtered, LocalObjectLogger, ErrorsMode.IGNORED, once=True,
         label='on.event handler'),
    Kind('spawning', '_spawning', 'spawning', lambda h: {**_filtered(h), **h.spawning_for_engine()},
         label='daemon'),  # (or timer: see `label_of`)
    Kind('indexing', '_indexing', 'indexing', _filtered, TerseObjectLogger, ErrorsMode.IGNORED, label='index',
         patches=False),
    Kind('admission', '_webhooks', 'webhooks', lambda h: h.webhook_for_engine(), LocalObjectLogger,
         ErrorsMode.PERMANENT, once=True, label='admission handler', watched=False),
    Kind('logging', '_logging', 'logging', lambda h: {**_filtered(h), **h.logging_for_engine()},
         LocalObjectLogger, ErrorsMode.IGNORED, label='log handler'),
    # Called on every change and requeue: its lines are not posted as Events (writes to the
    # cluster that a requeue every few seconds would multiply); its own `kopf.event()`s are.
    Kind('reconciling', '_reconciling', 'reconciling', lambda h: h.reconciling_for_engine(), LocalObjectLogger,
         label='reconcile handler'),
    # Called for every state of every related object; an error keeps the owners named before.
    Kind('relating', '_relating', 'relating', lambda h: h.relating_for_engine(), TerseObjectLogger,
         ErrorsMode.IGNORED, once=True, label='related function', patches=False),
)
BY_NAME: dict[str, Kind] = {kind.name: kind for kind in KINDS}


def label_of(handler: Any, registry: OperatorRegistry) -> str | None:
    """What kind of handler this is, as people call it ('on.event handler', 'timer', ...);
    ``None`` if it is none of the registry's resource handlers."""
    for kind in KINDS:
        if handler in getattr(registry, kind.registry):
            if kind.name == 'spawning':
                return 'timer' if isinstance(handler, TimerHandler) else 'daemon'
            return kind.label
    return None
