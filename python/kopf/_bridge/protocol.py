"""The call protocol between the core and the bridge: the shapes of what crosses the PyO3
boundary. The core builds and reads them in ``src/binding/hooks.rs`` (and ``logs.rs``), and
nowhere else; ``kopf._running.calls.Bridge`` takes and answers them. ``tests/unit/test_protocol.py``
checks these TypedDicts against the core's own builders and readers
(``_engine.protocol_samples()``, ``_engine.invoked_as_read()``; ``_engine.log_writing_as_read()``
in ``tests/unit/test_engine_log_lines.py``): a key added, dropped or misspelt on one side alone
fails there."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Literal, NotRequired, TypedDict

if TYPE_CHECKING:
    from kopf._engine import DaemonHold

# The kinds of resource handlers, as the core names them (its `HandlerKind`).
HandlerKind = Literal['changing', 'watching', 'spawning', 'indexing', 'admission', 'logging', 'reconciling',
                      'relating']

# Which handler a call invokes: its kind and its position in the bridge's lists (conversion
# handlers are called for whole reviews, not by invocations: `Bridge.convert*()`).
Target = tuple[HandlerKind | Literal['conversion'], int]


class ObjectRef(TypedDict):
    """Which object a log line is about (the ``k8s_ref`` of Kopf's log records)."""
    apiVersion: str
    kind: str
    namespace: str | None
    name: str | None
    uid: str | None


class ResourceInfo(TypedDict):
    """A resource as the core's discovery found it (``kopf.Resource.from_engine()``)."""
    group: str
    version: str
    plural: str
    kind: str
    singular: str
    shortcuts: list[str]
    categories: list[str]
    subresources: list[str]
    namespaced: bool
    preferred: bool
    verbs: list[str]


class DaemonCall(TypedDict):
    """What a daemon's or timer's call carries besides the usual."""
    token: int  # its stopper (the ``stopped`` kwarg)
    key: str  # the object, for the live body that long-running daemons see
    reason: int  # the stopping reasons so far (bits of ``kopf.DaemonStoppingReason``)
    hold: DaemonHold | None  # a daemon's hold on a simulation's clock (None elsewhere, and for timers)


class AdmissionCall(TypedDict):
    """What an admission handler's call carries: the request's details."""
    webhook: str | None  # the handler addressed by the request's path; None: all
    operation: str | None  # CREATE, UPDATE, DELETE, CONNECT
    subresource: str | None
    dryrun: bool
    userinfo: dict[str, Any]
    headers: dict[str, str]
    sslpeer: dict[str, Any]  # the client's verified certificate, as ``getpeercert()`` has it


class LogCall(TypedDict):
    """What a log handler's call carries: the line matched."""
    line: str  # without its newline; bytes that are not UTF-8 replaced
    container: str
    timestamp: str  # the line's time (RFC 3339, UTC, in microseconds)


class Invocation(TypedDict):
    """A handler call (``Bridge.invoke()``), or a question to its filters' callbacks."""
    kind: HandlerKind
    handler: int
    resource: ResourceInfo
    # A dict for `on.event` and admission handlers; else the core's body (`kopf._engine.CoreBody`),
    # read lazily (`kopf._structures.structs.LazyRaw`).
    body: Any
    event_type: str | None  # on.event: ADDED, MODIFIED, DELETED; None for listings
    reason: str | None  # change handlers: create, update, delete, resume
    old: Any
    new: Any
    diff: list[tuple[str, tuple[str, ...], Any, Any]] | None
    retry: int
    started: str | None  # ISO 8601, of the first attempt
    runtime: float  # seconds since the first attempt
    scope: int | None  # a sub-handler's call: the scope (of its parent's call) it is declared in
    children: Any  # a change handler's call: the `kopf._engine.Scope` of its own sub-handlers
    daemon: NotRequired[DaemonCall]
    admission: NotRequired[AdmissionCall]
    log: NotRequired[LogCall]
    trace: NotRequired[str]  # the call's span (W3C traceparent), if traces are on


class Invoked(TypedDict, total=False):
    """How a call ended, for the core; a cancelled daemon's call has only ``final`` and
    ``cancelled``. ``None`` instead of it: succeeded, with nothing to keep or apply (most
    calls of timers and ``on.event`` handlers: no dict for them, none read by the core)."""
    final: bool  # no more retries: succeeded or failed for good
    delay: float | None  # until the next attempt, if not final
    result: Any  # the handler's return value, for ``status.<handler id>``
    exception: str | None  # the error's text, if it failed
    failure: str | None  # how it failed, for the metrics: temporary, permanent, exception
    error_type: str | None  # the exception's class name, if it failed, for the traces
    subrefs: list[str]
    patch: dict[str, Any] | None  # the handler's changes to the ``patch`` kwarg
    cancelled: bool  # a daemon stopped by force: no outcome
    indexed: Any  # an indexing function's result, as it returned it (the core converts it)
    warnings: list[str]  # an admission handler's additions to the ``warnings`` kwarg
    rejection: tuple[str, str, int | None] | None  # an admission handler's error: kind, text, code
    said: tuple[str, bool] | None  # the "succeeded" line that the core writes, and if it posts it
    requeue: float | None  # a reconcile handler's ``kopf.Requeue``: call it again after so many seconds
    related: list[tuple[str | None, str]]  # a related function's owners: (namespace, name) each


class ConversionRequest(TypedDict):
    """The objects of one conversion review (``Bridge.convert()``), each with its chain of steps:
    the conversion handlers' positions, in order, from its version to the desired one."""
    resource: ResourceInfo  # the custom resource, in the desired version
    objects: list[tuple[dict[str, Any], list[int]]]


class ConversionAnswer(TypedDict, total=False):
    """``Bridge.convert()``'s answer: the converted objects (in order), or why they are not."""
    converted: str  # as a JSON list (Python's encoder is 3× faster than the core reading objects)
    error: str  # which object, which handler, what error


class ResourceSelection(TypedDict):
    """Which of these resources a handler's callable selector wants."""
    kind: HandlerKind
    handler: int
    resources: list[ResourceInfo]


class PlanRequest(TypedDict):
    """A custom lifecycle's question: which of the awakened handlers run now."""
    scope: int | None  # the sub-handlers of this scope, or the operator's handlers
    call: Invocation  # the cause, for the lifecycle's kwargs
    handlers: list[tuple[int, str]]  # the awakened ones: their positions and ids
    states: dict[str, dict[str, Any]]  # every handler's progress record, by id


# `Bridge.threading()`: the executor's size and the handlers the core may call on its
# own threads; None if all calls go through the loop.
Threading = tuple[int, list[Target]] | None


class LoggerWriting(TypedDict):
    """How the core writes one logger's lines itself (``LogWriting``)."""
    levels: list[int]  # the levels whose lines the core writes to the stream itself
    posted: list[int]  # of those, the levels whose lines about objects it also posts as Events


class LogWriting(TypedDict):
    """`Bridge.log_writing()`: the core's lines that only ``kopf run``'s own stream handler would
    take, which the core writes to that stream's file itself, formatted as that handler would
    (the others are still sent to Python's ``logging``). Read once, when the core starts."""
    fd: int  # the stream's file descriptor
    timed: bool  # the ``full`` format (time, logger, level), else ``plain`` (the message only)
    prefixed: bool  # lines about objects start with ``[namespace/name]``
    levelnames: dict[str, str]  # ``logging.getLevelName()`` of the levels, by their number
    loggers: dict[str, LoggerWriting]  # by the logger's name; absent: none written directly
    event_types: dict[str, str]  # the posted lines' Events' types, by the level's number
    event_reason: str  # the posted lines' Events' reason
