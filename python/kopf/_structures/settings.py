"""``kopf.OperatorSettings``: what an operator can tune, with Kopf 1.45's defaults."""

from __future__ import annotations

import concurrent.futures
import dataclasses
import itertools
import logging
import math
import numbers
import warnings
import weakref
from collections.abc import Iterable, Sized
from typing import Any

from kopf._structures import diffbase as _diffbase
from kopf._structures import progress as _progress
from kopf._structures.selectors import SelectorMapping

# How each setting is read, Kopf 1.45.2's way and ours: the settings page shows it, and a
# change after the start to one that the engine read at its start is warned about (never
# silently ignored). Ours is "at start" unless said here: read when the core starts, after the
# startup and login handlers, from the values they left.
AT_EACH_USE = 'at each use'
LAZILY = 'at each use; an iterable anew each time, one pause per retry'
READING: dict[str, tuple[str, str]] = {
    # setting: (Kopf 1.45.2, ours where not "at start")
    'process.ultimate_exiting_timeout': ('at exit', 'at exit'),
    'posting.enabled': (AT_EACH_USE, "at each kopf.event() and log line; at start for the core's own lines"),
    'posting.loggers': (AT_EACH_USE, AT_EACH_USE),
    'posting.level': (AT_EACH_USE, AT_EACH_USE),
    'posting.default_backoffs': (LAZILY, LAZILY),
    'posting.logging_backoffs': (LAZILY, LAZILY + "; at start for the core's own lines"),
    'posting.worker_limit': ('at start', ''),
    'peering.mandatory': ('at start', ''),
    'peering.standalone': ('at start', ''),
    'peering.clusterwide': ('at start', ''),
    'queueing.worker_limit': ('at start', ''),
    'queueing.exit_timeout': ('at exit', ''),
    'queueing.error_delays': ('at each row of errors; an iterable anew each time, one delay per error',
                              'at start (the object); an iterable anew at each row of errors, one delay per error'),
    'queueing.batch_window': ('never (deprecated)', 'never (deprecated)'),
    'scanning.disabled': ('at start', ''),
    'execution.default_backoff': (AT_EACH_USE, AT_EACH_USE),
    'execution.executor': (AT_EACH_USE, AT_EACH_USE),
    'execution.max_workers': ('when set', 'when set'),
    'networking.error_backoffs': (LAZILY, 'at start (the object); an iterable anew at each use, one pause per retry'),
    'networking.trust_env': ('at each login', 'at each login'),
    'admission.server': ('at start (entered, or called)', 'at start (entered, or called)'),
    'admission.managed': ('at start', ''),
    'secrets.fields': ('', 'at start, once (an endless iterable is refused)'),
    'reconciling.backoff_base': ('', ''),
    'reconciling.backoff_cap': ('', ''),
    'reconciling.backoff_jitter': ('', ''),
    'reconciling.retry_rate': ('', ''),
    'reconciling.retry_burst': ('', ''),
}


def reading(name: str) -> tuple[str, str]:
    """How ``settings.<name>`` (``'group.field'``) is read: by Kopf (at each use unless said;
    ``''`` for ours alone) and here."""
    kopfs, ours = READING.get(name, (AT_EACH_USE, ''))
    return kopfs, ours or 'at start'


_settings_logger = logging.getLogger('kopf._cogs.configs.configuration')


class _Section:
    """A group of settings: a change after the engine has read it at start is warned about
    (once per field and run) when the field is one that is read only at start."""

    def __setattr__(self, name: str, value: Any) -> None:
        super().__setattr__(name, value)
        group = self.__dict__.get('_read_as')
        if group is None or name.startswith('_'):
            return
        setting = f'{group}.{name}'
        warned: set[str] = self.__dict__['_warned']
        if reading(setting)[1].startswith('at start') and setting not in warned:
            warned.add(setting)
            _settings_logger.warning(
                f"settings.{setting} was changed after the operator had started: it is read "
                f"at the start, so the new value is not in force until the operator restarts.")

    def _mark_read(self, group: str | None) -> None:
        object.__setattr__(self, '_read_as', group)
        object.__setattr__(self, '_warned', set())


@dataclasses.dataclass
class ProcessSettings(_Section):
    ultimate_exiting_timeout: float | None = 10 * 60
    """On exit, how long to wait for the core (handlers in progress, daemons) to stop; then exit anyway."""


@dataclasses.dataclass
class PostingSettings(_Section):
    enabled: bool = True
    """Post Kubernetes Events at all (``kopf.event()`` & co)."""
    loggers: bool = False
    """Also post the object-related log messages as Events."""
    level: int = logging.INFO
    """The minimal level of messages to post as Events."""
    default_backoffs: float | Iterable[float] = (1, 1, 2, 3, 5, 8, 13, 21)
    """Pauses before each retry of a refused ``kopf.event()`` post (unless it gives ``backoffs=``)."""
    logging_backoffs: float | Iterable[float] = (1, 1, 2, 3, 5)
    """Pauses before each retry of a refused post of a log line (``loggers``)."""
    worker_limit: int | None = None
    """How many objects' Events are posted at once (each object's in order); none: no limit."""
    idle_timeout: float = 1.0
    """An object's poster ends after this many seconds with nothing to post."""
    reporting_component: str = 'kopf'
    """The Events' ``reportingComponent`` (and ``source.component``)."""
    reporting_instance: str = 'dev'
    """The Events' ``reportingInstance``."""
    event_name_prefix: str = 'kopf-event-'
    """The start of the Events' names (the API server adds a random end)."""


@dataclasses.dataclass
class PeeringSettings(_Section):
    name: str = 'default'
    """The peering object (``KopfPeering`` or ``ClusterKopfPeering``) to announce ourselves in."""
    stealth: bool = False
    """Do not log the keep-alives (pauses and resumes are logged anyway)."""
    priority: int = 0
    """Operators pause while a live peer has a higher priority; equal ones all pause."""
    lifetime: int = 60
    """How long our record is valid; it is renewed 5–10 seconds before it expires."""
    mandatory: bool = False
    """Refuse to start without the peering object (``--peering``); else run standalone."""
    standalone: bool = False
    """Do not peer at all, even if the peering object exists."""
    clusterwide: bool = False
    """Peer in ``ClusterKopfPeering`` (cluster-wide operators) rather than ``KopfPeering``."""

    @property
    def namespaced(self) -> bool:
        return not self.clusterwide


@dataclasses.dataclass
class LeadershipSettings(_Section):
    """Lease-based leader election (not in Kopf; opt-in): of the replicas that name the same
    Lease, only its holder handles objects; another one takes over when it stops renewing."""
    lease_name: str | None = None
    """The ``coordination.k8s.io/v1`` Lease to compete for (``kopf run --lease NAME``); none: no election."""
    lease_namespace: str | None = None
    """Where the Lease is; by default ``$POD_NAMESPACE``, the operator's only namespace, or ``default``."""
    lease_duration: float = 15
    """Seconds a Lease is valid after its last renewal; a replica takes over after that."""
    renew_deadline: float = 10
    """A holder that has not renewed for this long stops handling (shorter than the duration)."""
    retry_period: float = 2
    """How often the holder renews and the other replicas look at the Lease."""


@dataclasses.dataclass
class ShardingSettings(_Section):
    """Automatic sharding (not in Kopf; opt-in): the replicas of one operator share the objects,
    each watching only its part of them (Kubernetes' sharded list & watch). They find each
    other by Leases (one per replica, with ``leadership``'s timings and namespace), split the
    objects evenly among the live ones, and split them again when one joins or leaves; a part
    changes hands only once its previous replica has stopped handling it."""
    auto: bool = False
    """Share the objects among the replicas (``kopf run --shards auto``)."""
    group: str = 'kopf'
    """The replicas that share the objects (a DNS label): their Leases are labelled with it."""


@dataclasses.dataclass
class MetricsSettings(_Section):
    """Prometheus metrics of the engine (not in Kopf; opt-in)."""
    address: str | None = None
    """Where ``/metrics`` is served: ``PORT`` (all interfaces) or ``HOST:PORT``
    (``kopf run --metrics``, ``$KOPF_RUN_METRICS``); none: no metrics are kept."""


@dataclasses.dataclass
class TracingSettings(_Section):
    """OpenTelemetry's traces of the engine, exported with OTLP over HTTP (not in Kopf; opt-in):
    a span per processed event, handler call, API request and webhook review. OpenTelemetry's
    ``OTEL_*`` environment variables configure the rest (headers, TLS, queue, service name)."""
    endpoint: str | None = None
    """The collector's OTLP/HTTP endpoint, e.g. ``http://otel-collector:4318`` (``/v1/traces``
    is added): ``kopf run --traces``, ``$KOPF_RUN_TRACES``; none: ``$OTEL_EXPORTER_OTLP_ENDPOINT``
    (or ``$OTEL_EXPORTER_OTLP_TRACES_ENDPOINT``) if set, else no traces."""
    ratio: float | None = None
    """The fraction of the traces kept, from 0 to 1, decided at their roots; a review that comes
    with its caller's span follows the caller's decision (``kopf run --traces-ratio``); none:
    ``$OTEL_TRACES_SAMPLER`` and ``$OTEL_TRACES_SAMPLER_ARG``, else all of them."""


@dataclasses.dataclass
class SecretsSettings(_Section):
    """What the engine's own log lines never show (not in Kopf).

    The values of core Secrets' ``data`` and ``stringData`` are always shown as
    ``'<redacted>'`` (keys kept) in the body dumps, patches and diffs that the engine logs at
    any level, also inside annotations that hold an object's JSON. Handlers' own lines are theirs.
    """
    fields: Iterable[str | Iterable[str]] = ()
    """More field paths whose values are redacted likewise, in every resource: dotted strings
    (``'spec.credentials.password'``) or sequences of keys; a dict's keys stay, its values go."""
    diffbase_digests: bool = False
    """Keep Secrets' values out of the diff base (the ``last-handled-configuration``
    annotation): each value of ``data`` is kept as a digest salted with the Secret's uid, so a
    changed value is still a change. ``old``, ``new`` and ``diff`` of Secrets' handlers then hold
    the digests (``body`` the values). Kopf cannot read digests: while this is on, a peering
    with Kopf's operators (or this engine's without it) is refused."""


@dataclasses.dataclass
class LogsSettings(_Section):
    """How ``@kopf.on.log`` handlers follow the pods' logs (not in Kopf)."""
    max_streams: int = 500
    """How many containers' logs are followed at once; more wait for a place."""
    queue_size: int = 1000
    """How many matched lines of one pod may wait for its handlers: beyond that, its logs are
    read no further until the handlers catch up (the API server keeps the rest)."""


@dataclasses.dataclass
class WatchingSettings(_Section):
    server_timeout: float | None = None
    """The server-side timeout of a watch request."""
    client_timeout: float | None = None
    """A watch request's whole life on the client's side; then it is opened again where it was."""
    connect_timeout: float | None = None
    """Connecting for a watch request (else ``networking.connect_timeout``)."""
    reconnect_backoff: float = 0.1
    """A pause between watch requests when a stream ends normally."""
    inactivity_timeout: float = 70.0
    """A stream with no events (bookmarks included) for this long is restarted."""
    chunk_size: int | None = None
    """The page size of the initial listing (all at once if unset)."""
    initial_streaming: bool = False
    """List the objects in the watch-stream itself (``sendInitialEvents``), not by a listing."""

    label_selectors: SelectorMapping[str] = dataclasses.field(default_factory=SelectorMapping)
    """Server-side label selectors by resource (``settings.watching.label_selectors['pods'] =
    'app=x'``): those that apply to a resource are joined with commas (all must match)."""
    field_selectors: SelectorMapping[str] = dataclasses.field(default_factory=SelectorMapping)
    """Server-side field selectors by resource, joined as the label selectors are."""
    shard_selectors: SelectorMapping[str] = dataclasses.field(default_factory=SelectorMapping)
    """Kubernetes' sharded list & watch (``shardRange(object.metadata.uid, ...)``) by resource:
    the first one that applies is used. Peers with shards do not pause each other."""


@dataclasses.dataclass
class QueueingSettings(_Section):
    worker_limit: int | None = None
    """How many objects are processed at once (no limit if unset)."""
    idle_timeout: float = 5.0
    """How long an object's worker waits for new events before it exits.

    An idle worker waits as data, not as a task: thousands of them cost little.
    """
    exit_timeout: float = 2.0
    """How long the workers may finish their cycles when the operator exits."""
    error_delays: Iterable[float] = (1, 1, 2, 3, 5, 8, 13, 21, 34, 55, 89, 144, 233, 377, 610)
    """Delays after unexpected errors of processing (not of handlers)."""
    _batch_window: float = 0.1  # Kopf's deprecated field: kept for the scripts that set it

    @property
    def batch_window(self) -> float:
        """Deprecated in Kopf, and without effect there as here (events are not batched by time)."""
        warnings.warn("Time-based event batching was removed. Please stop configuring it.",
                      DeprecationWarning, stacklevel=2)
        return self._batch_window

    @batch_window.setter
    def batch_window(self, value: float) -> None:
        warnings.warn("Time-based event batching was removed. Please stop configuring it.",
                      DeprecationWarning, stacklevel=2)
        self._batch_window = value


@dataclasses.dataclass
class ScanningSettings(_Section):
    disabled: bool = False
    """Serve only the resources found at start: new and removed CRDs are not watched for."""


_default_executors: weakref.WeakSet[concurrent.futures.Executor] = weakref.WeakSet()

# A list or tuple longer than this is read lazily, as any other iterable: not copied at start.
_LISTED_AT_MOST = 10_000


def pauses(value: Any, name: str, customs: list[Any]) -> list[float] | dict[str, Any]:
    """Pauses in seconds as the core takes them (``settings.networking.error_backoffs`` & co).

    As Kopf takes them: one number is one pause; a list or tuple is the same list at every
    use; any other iterable (a generator, an object whose ``__iter__`` yields for ever) is
    iterated anew at every use and read one pause at a time, only when a retry needs one:
    never turned into a list. Such an iterable is appended to ``customs`` and named by its
    index there. Anything else is refused here, at start, with the setting's name.
    """
    if isinstance(value, numbers.Real) and not isinstance(value, bool):
        return [float(value)]
    if isinstance(value, list | tuple) and len(value) <= _LISTED_AT_MOST:
        for pause in value:
            if not isinstance(pause, numbers.Real) or isinstance(pause, bool):
                raise TypeError(f"{name}: {pause!r} in {value!r} is not a number of seconds.")
        return [float(pause) for pause in value]
    if isinstance(value, Iterable) and not isinstance(value, str | bytes | dict):
        count: int | None = None
        if isinstance(value, Sized):
            try:
                count = len(value)
            except Exception:  # its own __len__ failed: its attempts are not numbered
                count = None
        customs.append(value)
        return {'drawn': len(customs) - 1, 'count': count, 'name': name}
    raise TypeError(f"{name} must be a number of seconds or an iterable of them (a list, a "
                    f"generator, an object with __iter__): {value!r}")


def posting_level(posting: PostingSettings) -> int:
    """``settings.posting.level`` as a number: a level's name (``'INFO'``) is taken as
    ``logging`` takes it (``Logger.setLevel``). Kopf 1.45.2 compares the name with numbers and
    stops the operator at its first object's log line; anything else is refused here."""
    level = posting.level
    if isinstance(level, str) and level in logging.getLevelNamesMapping():
        return logging.getLevelNamesMapping()[level]
    if isinstance(level, int) and not isinstance(level, bool):
        return level
    raise ValueError(f"settings.posting.level must be a logging level, a number or a name such as 'INFO': {level!r}")


def _default_executor() -> concurrent.futures.Executor:
    """The executor an operator gets unless it sets its own (then that one runs the sync
    handlers; the default one's threads may be the engine's own)."""
    executor = concurrent.futures.ThreadPoolExecutor()
    _default_executors.add(executor)
    return executor


def is_default_executor(executor: concurrent.futures.Executor) -> bool:
    return executor in _default_executors


@dataclasses.dataclass
class ExecutionSettings(_Section):
    default_backoff: float = 60
    """Seconds before a handler is retried after an arbitrary exception."""
    executor: concurrent.futures.Executor = dataclasses.field(default_factory=_default_executor)
    """Where synchronous handlers run."""
    _max_workers: int | None = None

    @property
    def max_workers(self) -> int | None:
        return self._max_workers

    @max_workers.setter
    def max_workers(self, value: int) -> None:
        if value < 1:
            raise ValueError("Can't set max_workers below 1.")
        self._max_workers = value
        if isinstance(self.executor, concurrent.futures.ThreadPoolExecutor):
            self.executor._max_workers = value  # takes effect for threads spawned from now on


@dataclasses.dataclass
class BackgroundSettings(_Section):
    cancellation_polling: float = 60
    """How often a stopping daemon with no cancellation timeout is checked for having exited."""
    instant_exit_timeout: float | None = None
    """How long a signalled daemon may take to exit and still count as exiting at once."""
    instant_exit_zero_time_cycles: int | None = 10
    """Kopf's other way to say it, in event-loop cycles (10 ms each here), if no timeout is set."""


@dataclasses.dataclass
class NetworkingSettings(_Section):
    request_timeout: float | None = 5 * 60
    """One API request's whole time (not the watches')."""
    connect_timeout: float | None = None
    """Connecting to the API server (else ``request_timeout``)."""
    error_backoffs: float | Iterable[float] = (1, 1, 2, 3, 5, 8, 13, 21)
    """Pauses before each retry of a request that failed (a server error, 429, no connection)."""
    enforce_retry_after: bool = False
    """Wait as long as the server's ``Retry-After`` says even when the backoff is longer."""
    trust_env: bool = False
    """Take the proxies from ``$HTTPS_PROXY`` & co (``$NO_PROXY`` respected)."""


@dataclasses.dataclass
class PersistenceSettings(_Section):
    finalizer: str = 'kopf.zalando.org/KopfFinalizerMarker'
    """The finalizer that blocks deletion until deletion handlers are done."""
    progress_storage: _progress.ProgressStorage = dataclasses.field(
        default_factory=_progress.SmartProgressStorage)
    """Where handlers' progress is kept between processing cycles."""
    diffbase_storage: _diffbase.DiffBaseStorage = dataclasses.field(
        default_factory=_diffbase.AnnotationsDiffBaseStorage)
    """Where the last handled state of an object is kept, to see what has changed."""
    consistency_timeout: float = 5.0
    """How long to wait for the operator's own patch to come back before handling anyway."""


@dataclasses.dataclass
class AdmissionSettings(_Section):
    server: Any = None
    """How admission requests reach the operator: ``kopf.WebhookServer`` or its kin, or a
    custom server (a callable that takes the ``webhookfn`` and yields client configs)."""
    managed: str | None = None
    """The name of the ``Validating/MutatingWebhookConfiguration`` that the operator
    creates and keeps up to date; none: they are managed by other means."""


@dataclasses.dataclass
class ConversionSettings(_Section):
    """The CRDs whose versions ``@kopf.on.convert`` handlers convert (not in Kopf). Their
    reviews come to ``settings.admission.server``."""
    managed: bool = False
    """Point the CRDs' ``spec.conversion`` at the webhook server (strategy ``Webhook``), at
    start and whenever the server's address or certificate changes."""
    cleanup: bool = False
    """On exit, set the managed CRDs' conversion back to strategy ``None``. Off by default:
    a CRD of several versions without its webhook cannot serve its objects in all of them."""


@dataclasses.dataclass
class ReconcilingSettings(_Section):
    """How a failing ``@kopf.on.reconcile`` handler is retried, per object (not in Kopf): after
    ``backoff_base * 2 ** (failures - 1)`` seconds, at most ``backoff_cap``, plus up to
    ``backoff_jitter`` of that at random; a success starts over. The defaults are
    controller-runtime's (5 ms, doubling, up to 1 000 s; 10 retries a second overall, after a
    burst of 100). A ``kopf.TemporaryError``'s own ``delay`` wins over the backoff."""
    backoff_base: float = 0.005
    """Seconds before the first retry."""
    backoff_cap: float = 1000.0
    """The longest wait between two attempts, in seconds."""
    backoff_jitter: float = 0.1
    """The share of the wait added at random (0.1: up to 10 % more), so that objects that failed
    together do not all retry together."""
    retry_rate: float = 10.0
    """The retries of all objects together: at most this many a second on average (0: no
    limit). A ``kopf.TemporaryError``'s own ``delay`` is not limited."""
    retry_burst: float = 100.0
    """How many retries may start at once above ``retry_rate``."""


@dataclasses.dataclass
class OperatorSettings:
    """All settings of an operator; adjust them in ``@kopf.on.startup`` handlers."""

    process: ProcessSettings = dataclasses.field(default_factory=ProcessSettings)
    posting: PostingSettings = dataclasses.field(default_factory=PostingSettings)
    peering: PeeringSettings = dataclasses.field(default_factory=PeeringSettings)
    watching: WatchingSettings = dataclasses.field(default_factory=WatchingSettings)
    queueing: QueueingSettings = dataclasses.field(default_factory=QueueingSettings)
    scanning: ScanningSettings = dataclasses.field(default_factory=ScanningSettings)
    execution: ExecutionSettings = dataclasses.field(default_factory=ExecutionSettings)
    background: BackgroundSettings = dataclasses.field(default_factory=BackgroundSettings)
    networking: NetworkingSettings = dataclasses.field(default_factory=NetworkingSettings)
    persistence: PersistenceSettings = dataclasses.field(default_factory=PersistenceSettings)
    leadership: LeadershipSettings = dataclasses.field(default_factory=LeadershipSettings)
    sharding: ShardingSettings = dataclasses.field(default_factory=ShardingSettings)
    admission: AdmissionSettings = dataclasses.field(default_factory=AdmissionSettings)
    metrics: MetricsSettings = dataclasses.field(default_factory=MetricsSettings)
    tracing: TracingSettings = dataclasses.field(default_factory=TracingSettings)
    logs: LogsSettings = dataclasses.field(default_factory=LogsSettings)
    secrets: SecretsSettings = dataclasses.field(default_factory=SecretsSettings)
    conversion: ConversionSettings = dataclasses.field(default_factory=ConversionSettings)
    reconciling: ReconcilingSettings = dataclasses.field(default_factory=ReconcilingSettings)

    @property
    def batching(self) -> QueueingSettings:
        """Kopf's old name of ``queueing`` (deprecated there too)."""
        warnings.warn("Batching settings are now queueing settings. "
                      "Please rename `settings.batching` -> `settings.queueing`", DeprecationWarning, stacklevel=2)
        return self.queueing

    def mark_read(self, read: bool = True) -> None:
        """The engine has read the settings at its start (or, ``read=False``, has stopped):
        from now on, a change to one read only at start is warned about."""
        for field in dataclasses.fields(self):
            section = getattr(self, field.name)
            if isinstance(section, _Section):
                section._mark_read(field.name if read else None)

    def for_engine(self, customs: list[Any] | None = None) -> dict[str, Any]:
        """The part of the settings that the core acts on.

        Storages the core cannot run natively are appended to ``customs`` and
        referred to by their index there.
        """
        customs = customs if customs is not None else []
        # Python's own (kopf.event()'s), checked here so that a wrong one fails at start.
        pauses(self.posting.default_backoffs, 'settings.posting.default_backoffs', [])
        return {
            'watching': {
                'server_timeout': self.watching.server_timeout,
                'inactivity_timeout': self.watching.inactivity_timeout,
                'reconnect_backoff': self.watching.reconnect_backoff,
                'chunk_size': self.watching.chunk_size,
                'client_timeout': self.watching.client_timeout,
                'connect_timeout': self.watching.connect_timeout,
                'initial_streaming': self.watching.initial_streaming,
                'selecting': bool(self.watching.label_selectors or self.watching.field_selectors
                                  or self.watching.shard_selectors),
            },
            'queueing': {
                'idle_timeout': self.queueing.idle_timeout,
                'exit_timeout': self.queueing.exit_timeout,
                'worker_limit': self.queueing.worker_limit,
                'error_delays': pauses(self.queueing.error_delays, 'settings.queueing.error_delays', customs),
            },
            'persistence': {
                'finalizer': self.persistence.finalizer,
                'consistency_timeout': self.persistence.consistency_timeout,
                'progress_storage': _progress.for_engine(self.persistence.progress_storage, customs),
                'diffbase_storage': _diffbase.for_engine(self.persistence.diffbase_storage, customs),
            },
            'posting': {
                'enabled': self.posting.enabled,
                'reporting_component': self.posting.reporting_component,
                'reporting_instance': self.posting.reporting_instance,
                'event_name_prefix': self.posting.event_name_prefix,
                'worker_limit': self.posting.worker_limit,
                'idle_timeout': self.posting.idle_timeout,
                'logging_backoffs': pauses(self.posting.logging_backoffs,
                                           'settings.posting.logging_backoffs', customs),
            },
            'background': {
                'cancellation_polling': self.background.cancellation_polling,
                'instant_exit_timeout': self.background.instant_exit_timeout,
                'instant_exit_zero_time_cycles': self.background.instant_exit_zero_time_cycles,
            },
            'peering': {
                'name': self.peering.name,
                'priority': self.peering.priority,
                'lifetime': self.peering.lifetime,
                'stealth': self.peering.stealth,
                'mandatory': self.peering.mandatory,
                'standalone': self.peering.standalone,
                'clusterwide': self.peering.clusterwide,
                'sharded': bool(self.watching.shard_selectors) or self.sharding.auto,
                'diffbase_digests': bool(self.secrets.diffbase_digests),
            },
            'leadership': dataclasses.asdict(self.leadership),
            'sharding': dataclasses.asdict(self.sharding),
            'metrics': dataclasses.asdict(self.metrics),
            'tracing': dataclasses.asdict(self.tracing),
            'conversion': dataclasses.asdict(self.conversion),
            'reconciling': _reconciling(self.reconciling),
            'logs': dataclasses.asdict(self.logs),
            'secrets': {'fields': _secret_fields(self.secrets.fields),
                        'diffbase_digests': bool(self.secrets.diffbase_digests)},
            'networking': {
                'request_timeout': self.networking.request_timeout,
                'connect_timeout': self.networking.connect_timeout,
                'error_backoffs': pauses(self.networking.error_backoffs,
                                         'settings.networking.error_backoffs', customs),
                'enforce_retry_after': self.networking.enforce_retry_after,
            },
            'scanning': {'disabled': self.scanning.disabled},
        }


def _reconciling(section: ReconcilingSettings) -> dict[str, float]:
    """The reconcile backoff, checked at start: a value that is no number of seconds fails here."""
    values = dataclasses.asdict(section)
    for name, value in values.items():
        if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value) or value < 0:
            raise ValueError(f"settings.reconciling.{name}: {value!r} is not a finite number of seconds "
                             f"(or a share, for the jitter) of zero or more.")
    return {name: float(value) for name, value in values.items()}


def _secret_fields(fields: Iterable[str | Iterable[str]]) -> list[list[str]]:
    """The field paths, read once at start: an endless iterable is refused, not read for ever."""
    paths = [list(_secret_field(field)) for field in itertools.islice(fields, _LISTED_AT_MOST + 1)]
    if len(paths) > _LISTED_AT_MOST:
        raise ValueError(f"settings.secrets.fields: more than {_LISTED_AT_MOST} field paths "
                         "(an endless iterable?); they are read once, at start.")
    return paths


def _secret_field(field: str | Iterable[str]) -> tuple[str, ...]:
    path = tuple(field.split('.')) if isinstance(field, str) else tuple(field)
    if not path or not all(isinstance(key, str) and key for key in path):
        raise ValueError(f"settings.secrets.fields: {field!r} is not a field path "
                         "(a dotted string like 'spec.password', or a sequence of keys).")
    return path
