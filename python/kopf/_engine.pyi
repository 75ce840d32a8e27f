"""The Rust core (``src/binding/``): the operator's engine and the calls it makes into the loop."""

from collections.abc import Awaitable, Callable, Generator
from typing import Any, final

__version__: str

def check_cron(pattern: str, timezone: str | None = None) -> None:
    """A ValueError if the cron pattern (five fields) or the time zone (an IANA name) is wrong."""

def log_pattern_matches(pattern: str, flags: int, lines: list[bytes]) -> list[bool]:
    """Which lines a log handler's pattern (Python's syntax, ``re`` flags) matches as the core
    matches them; a ValueError with the reason if the core cannot take the pattern."""

def parse_kubeconfig(text: str) -> Any:
    """A kubeconfig file's YAML as Python values (None if empty); a ValueError if it is not YAML."""

def settings_as_read(json: str) -> str:
    """The settings' JSON (``OperatorSettings.for_engine()``) as the core reads it, as JSON; a
    ValueError naming a key that the core does not know."""

def protocol_samples() -> dict[str, Any]:
    """One dict of each shape that the core sends (``kopf._bridge.protocol``), made by the core's own
    builders with every optional part present, by the name of its TypedDict."""

def invoked_as_read(answer: Any) -> str:
    """An answer to a call (``kopf._bridge.protocol.Invoked``) as the core reads it, as JSON by key;
    a ValueError for a key that the core does not read."""

def converted_as_read(answer: Any) -> str:
    """``Bridge.convert()``'s answer (``kopf._bridge.protocol.ConversionAnswer``) as the core reads
    it, as JSON; a ValueError for a key that the core does not read."""


def log_writing_as_read(answer: str) -> str:
    """``Bridge.log_writing()``'s answer (``kopf._bridge.protocol.LogWriting``, JSON) as the core
    reads it, as JSON; a ValueError for a key that it does not read or misses."""

@final
class Pending:
    """A running core future, as the core's awaitables are: ``await`` it (``kopf._bridge.awaiting``)."""

    def fileno(self) -> int:
        """The file descriptor that becomes readable once the future has finished."""
    def result(self) -> Any:
        """The finished future's value (its error raised); a RuntimeError before, or taken twice."""
    def cancel(self) -> None:
        """Stop the future where it is."""
    def __await__(self) -> Generator[Any, None, Any]: ...

@final
class Operator:
    """The core of one operator run: ``run()`` once, ``stop()`` from anywhere."""

    def __init__(self) -> None: ...
    def run(self, spec: str, connection: str, bridge: Any, storages: list[Any],
            simulation: Simulation | None = None) -> Awaitable[None]:
        """Run until stopped; ``spec`` and ``connection`` are JSON, ``bridge`` serves the core's calls,
        ``storages`` are the objects its settings name by index (custom storages, iterables of pauses);
        with ``simulation``, on its runtime and virtual clock."""
    def post_event(self, event: str, drawn: Any = None) -> None:
        """Queue a Kubernetes Event (JSON) for posting; ``drawn``: the iterable of its backoffs
        when they are not a list (its JSON names it as ``{"drawn": 0, ...}``)."""
    def stop(self) -> None:
        """Ask the running core to stop (thread-safe; idempotent)."""
    def index(self, id: str) -> IndexView:
        """The index of this id (``@kopf.index``), as it is whenever it is read."""
    def serve_webhooks(self, options: str) -> Awaitable[WebhookServing]:
        """Start the core's webhook server (options as JSON) once the API is discovered."""
    def review(self, request: bytes, webhook: str | None, headers: list[tuple[str, str]],
               sslpeer: str, reason: str | None) -> Awaitable[tuple[int, str]]:
        """Review an AdmissionReview: (200, the response's JSON) or (an HTTP status, why)."""
    def webhooks_configured(self, client_config: str) -> None:
        """Where the apiserver reaches the webhooks now (JSON), for managed configurations."""

@final
class WebhookServing:
    """A running webhook server of the core."""

    port: int
    cert_pem: bytes | None
    def stop(self) -> None: ...

@final
class IndexView:
    """One index of the core: its keys and values converted to Python on each read."""

    def __len__(self) -> int: ...
    def keys(self) -> list[Any]: ...
    def contains(self, key: Any) -> bool: ...
    def values(self, key: Any) -> list[Any] | None: ...
    def items(self) -> list[tuple[Any, list[Any]]]: ...
    def count(self, key: Any) -> int: ...

@final
class CoreBody:
    """An object's body as the core holds it, converted one top-level field at a time."""

    def keys(self) -> list[str]: ...
    def item(self, key: str) -> Any:
        """The field as Python objects (a new conversion each time); KeyError if absent."""
    def same(self, other: CoreBody) -> bool:
        """Whether both are the same body of the core (not merely equal ones)."""
    def identity(self) -> tuple[str | None, str | None, str | None, str | None, str | None]:
        """``(apiVersion, kind, name, uid, namespace)``, each None unless a string."""

@final
class PendingArgument:
    """A queued call's argument, built on first use."""

    def build(self) -> Any: ...

@final
class CallQueue:
    """The core's calls into the operator's loop, behind a readable socket."""

    def fileno(self) -> int: ...
    def take(self) -> list[tuple[int, str, tuple[str, int] | None, PendingArgument]]:
        """The queued calls as ``(id, method, target, argument)``; notes have the id 0."""
    def processed(self, stopped: bool = False) -> None:
        """The notes taken so far are written; with ``stopped``, none will be any more."""
    def complete(self, id: int, result: Any) -> None: ...
    def fail(self, id: int, error: BaseException) -> None: ...

@final
class Scope:
    """Where one change handler call's sub-handlers are executed (by the core)."""

    @property
    def id(self) -> int: ...
    @property
    def parent(self) -> str: ...
    def execute(self, children: str, lifecycle: str) -> Awaitable[str]:
        """Run the sub-handlers (JSON) once by the lifecycle (its name): JSON ``{done, delay}``."""
    def execute_blocking(self, children: str, lifecycle: str) -> str:
        """The same, waiting in a thread (without the GIL)."""

@final
class EventStream:
    """One resource's events for Skafos' listeners (``skafos.stream_watch``), by the core."""

    def __init__(self, connection: str, spec: str) -> None: ...
    def next(self, timeout: float) -> tuple[int, str, dict[str, Any]] | None:
        """The next ``(number, type, object)``, or ``None`` after ``timeout`` or when stopped."""
    def may_handle(self, number: int) -> bool: ...
    def done(self, number: int) -> None: ...
    def stop(self) -> None: ...
    def close(self) -> None:
        """Stop, and release the election's lock with the handled version."""

def discover(connection: str) -> Awaitable[str]: ...
def review_access(connection: str, attributes: str) -> Awaitable[str]: ...
def metrics_described() -> str:
    """Every metric's ``# HELP`` and ``# TYPE`` lines, as the exposition writes them."""
def read_objects(connection: str, paths: list[str]) -> Awaitable[str]:
    """The objects at these API paths as JSON, ``null`` for an absent one."""
def webhooks_for_manager(handlers: str, conversion_crds: list[str], name_suffix: str) -> str:
    """The webhooks as another manager (OLM) writes them: JSON ``{admission: [webhook], conversion: {crd: path}}``
    of the admission handlers ``[[handler, [resources]], ...]`` and the CRDs with conversions."""
def touch_peering(connection: str, request: str) -> Awaitable[str]:
    """Write (or with lifetime 0, remove) our record in the peering objects: JSON ``[[where, found], ...]``."""

def describe_certificate(pem: bytes) -> str:
    """A certificate (PEM) as ``ssl.SSLSocket.getpeercert()`` describes it, as JSON."""

class Recording:
    """``kopf rbac record``'s proxy, running: forwards with a login's credentials, journals."""
    port: int
    cert_pem: bytes
    def entries(self) -> str:
        """The journal as JSON: ``[{agent, verb, resource: {group, version, resource, subresource,
        namespace} | null, path, code, count, example}, ...]``."""
    def stop(self) -> None: ...

def start_recording(connection: str, port: int) -> Awaitable[Recording]:
    """A recording proxy on 127.0.0.1 (port 0: a free one) that forwards with these credentials."""

class Simulation:
    """A simulated API (plain HTTP on 127.0.0.1), its objects in memory, on a virtual clock
    that stands still until moved."""
    url: str
    def stop(self) -> None:
        """Stop serving; the operators on its clock stop with it."""
    def release(self) -> None:
        """Let the clock move by itself whenever nothing else can happen (for a stop)."""
    def now(self) -> float:
        """Seconds of virtual time since the start."""
    def today(self) -> str:
        """The virtual time of day (ISO 8601, UTC)."""
    def advance(self, seconds: float) -> Awaitable[None]:
        """Move the clock: what is due happens in order; then what is pending at the end."""
    def settle(self) -> Awaitable[None]:
        """Let everything pending happen (the clock moves by a millisecond at most)."""
    def fail(self, method: str | None, path: str, status: int, retry_after: int | None = None,
             times: int | None = None) -> None:
        """Fail the matching requests to come with this status (``times`` of them, or all)."""
    def heal(self) -> None:
        """Fail no more requests."""
    def stuck(self, seconds: float) -> str | None:
        """The daemon that has held the clock for longer than ``seconds`` of real time, by name."""
    def cut_watches(self, expire: bool) -> None:
        """End every watch; with ``expire``, the versions before now are gone (410)."""
    def request(self, method: str, uri: str, body: str | None = None,
                content_type: str = "application/json") -> tuple[int, str]:
        """A request answered without HTTP: the status code and the document (JSON)."""

@final
class DaemonHold:
    """A daemon's hold on a simulation's clock: held while its code runs, let go while it waits."""
    def rename(self, what: str) -> None:
        """Name the daemon, for the message if it holds the clock too long."""
    def sleep(self, seconds: float | None, done: Callable[[], object]) -> bool:
        """Let the clock go for ``seconds`` (for ever with None) or until the stop; then hold it
        and call ``done()`` from another thread. False if stopped already: no wait, no call."""
    def wake(self) -> None:
        """The daemon is told to stop: it holds the clock while it exits."""

def start_simulation(port: int) -> Simulation:
    """A simulated API with the built-in resources on 127.0.0.1 (port 0: a free one)."""
