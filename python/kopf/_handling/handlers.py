"""Handlers as the decorators register them, and the registry that holds them."""

from __future__ import annotations

import dataclasses
import enum
import functools
import re
from collections.abc import Callable, Collection, Iterable, Mapping
from types import FunctionType, MethodType
from typing import Any, ClassVar, TypeVar

from kopf._connecting import piggybacking as _piggybacking
from kopf._structures.errors import ErrorsMode
from kopf._structures.filters import spec_of
from kopf._structures.references import Selector

MetaFilter = Mapping[str, Any]


class Activity(enum.StrEnum):
    STARTUP = 'startup'
    CLEANUP = 'cleanup'
    AUTHENTICATION = 'authentication'
    PROBE = 'probe'


class Reason(enum.StrEnum):
    """Why a change handler is called: the ``reason`` kwarg."""
    CREATE = 'create'
    UPDATE = 'update'
    DELETE = 'delete'
    RESUME = 'resume'
    NOOP = 'noop'
    FREE = 'free'
    GONE = 'gone'

    def __str__(self) -> str:
        return str(self.value)


@dataclasses.dataclass(frozen=True)
class BaseHandler:
    fn: Callable[..., Any]
    id: str
    param: Any
    errors: ErrorsMode | None
    timeout: float | None
    retries: int | None
    backoff: float | None

    def __str__(self) -> str:
        return f"Handler {self.id!r}"


@dataclasses.dataclass(frozen=True)
class ActivityHandler(BaseHandler):
    activity: Activity | None
    _fallback: bool = False

    def __str__(self) -> str:
        return f"Activity {self.id!r}"


@dataclasses.dataclass(frozen=True)
class ResourceHandler(BaseHandler):
    selector: Selector | None
    labels: MetaFilter | None
    annotations: MetaFilter | None
    when: Callable[..., bool] | None
    field: tuple[str, ...] | None
    value: Any

    def filters_for_engine(self) -> dict[str, Any]:
        """The filters that the core evaluates without Python (callbacks are only marked);
        sub-handlers have no selector (they serve their parent's resource)."""
        return {
            'selector': self.selector.for_engine() if self.selector is not None else None,
            'labels': [[key, spec_of(value)] for key, value in (self.labels or {}).items()],
            'annotations': [[key, spec_of(value)] for key, value in (self.annotations or {}).items()],
            'field': list(self.field) if self.field else None,
            'value': spec_of(self.value) if self.value is not None else None,
            'has_when': self.when is not None,
        }


@dataclasses.dataclass(frozen=True)
class ChangingHandler(ResourceHandler):
    reason: Reason | None
    initial: bool | None
    deleted: bool | None
    requires_finalizer: bool | None
    field_needs_change: bool | None
    old: Any
    new: Any

    def changing_for_engine(self) -> dict[str, Any]:
        """The handler as the core needs it (it is called back by its position, given apart)."""
        return {
            'id': self.id, 'reason': self.reason.value if self.reason else None,
            'initial': bool(self.initial), 'deleted': bool(self.deleted),
            'requires_finalizer': bool(self.requires_finalizer),
            'field_needs_change': bool(self.field_needs_change),
            'old': spec_of(self.old) if self.old is not None else None,
            'new': spec_of(self.new) if self.new is not None else None,
            **self.filters_for_engine(),
        }


@dataclasses.dataclass(frozen=True)
class WatchingHandler(ResourceHandler):
    pass


@dataclasses.dataclass(frozen=True)
class IndexingHandler(ResourceHandler):
    def __str__(self) -> str:
        return f"Indexer {self.id!r}"


class WebhookType(enum.StrEnum):
    VALIDATING = 'validating'
    MUTATING = 'mutating'

    def __str__(self) -> str:
        return str(self.value)


@dataclasses.dataclass(frozen=True)
class WebhookHandler(ResourceHandler):
    reason: WebhookType
    operations: Collection[str] | None
    subresource: str | None
    persistent: bool | None
    side_effects: bool | None
    ignore_failures: bool | None

    def __str__(self) -> str:
        return f"Webhook {self.id!r}"

    def webhook_for_engine(self) -> dict[str, Any]:
        """The handler as the core serves it and writes it into managed configurations."""
        return {
            'id': self.id, 'reason': self.reason.value,
            'operations': list(self.operations) if self.operations is not None else None,
            'subresource': self.subresource, 'persistent': self.persistent,
            'side_effects': self.side_effects, 'ignore_failures': self.ignore_failures,
            **self.filters_for_engine(),
        }


@dataclasses.dataclass(frozen=True)
class LogHandler(ResourceHandler):
    regex: re.Pattern[str] | None
    containers: tuple[str, ...] | None
    # Called for lines by the thousand: its successes are logged at DEBUG, not INFO.
    quiet: ClassVar[bool] = True

    def __str__(self) -> str:
        return f"Log handler {self.id!r}"

    def logging_for_engine(self) -> dict[str, Any]:
        """What the core matches: the pattern (with its flags) and the containers."""
        regex = None if self.regex is None else {'pattern': self.regex.pattern, 'flags': int(self.regex.flags)}
        return {'regex': regex, 'containers': list(self.containers) if self.containers is not None else None}


@dataclasses.dataclass(frozen=True)
class ReconcilingHandler(ResourceHandler):
    """``@kopf.on.reconcile`` (not in Kopf): the object's state, level-based."""
    finalizer: bool
    owns: tuple[Selector, ...]  # the children's resources: their changes wake their owners
    # Called on every change and requeue: its successes are logged at DEBUG, not INFO.
    quiet: ClassVar[bool] = True
    # Retried after the object's own backoff (``settings.reconciling``), not ``backoff=``.
    backoff_by_core: ClassVar[bool] = True

    def __str__(self) -> str:
        return f"Reconcile handler {self.id!r}"

    def reconciling_for_engine(self) -> dict[str, Any]:
        """The handler as the core needs it (it is called back by its position, given apart)."""
        return {'id': self.id, 'finalizer': bool(self.finalizer),
                'owns': [selector.for_engine() for selector in self.owns], **self.filters_for_engine()}


@dataclasses.dataclass(frozen=True)
class RelatingHandler(ResourceHandler):
    """``@kopf.related`` (not in Kopf): which owners an object of another resource concerns."""
    owners: Selector  # the owners' resource: their reconcile handlers are woken
    # Called on every change of every related object: its successes are logged at DEBUG.
    quiet: ClassVar[bool] = True

    def __str__(self) -> str:
        return f"Related function {self.id!r}"

    def relating_for_engine(self) -> dict[str, Any]:
        """The function as the core needs it (it is called back by its position, given apart)."""
        return {'id': self.id, 'owners': self.owners.for_engine(), **self.filters_for_engine()}


@dataclasses.dataclass(frozen=True)
class ConversionHandler(BaseHandler):
    """One step between two versions of a custom resource (``@kopf.on.convert``)."""
    selector: Selector
    source: str
    target: str

    def __str__(self) -> str:
        return f"Conversion handler {self.id!r}"

    def conversion_for_engine(self) -> dict[str, Any]:
        """The step as the core chains it: its resource and its two versions."""
        return {'id': self.id, 'selector': self.selector.for_engine(), 'source': self.source, 'target': self.target}


@dataclasses.dataclass(frozen=True)
class SpawningHandler(ResourceHandler):
    requires_finalizer: bool | None
    initial_delay: float | Callable[..., float] | None

    def spawning_for_engine(self) -> dict[str, Any]:
        """The schedule the core keeps: delays, intervals, cancellation timings."""
        delay = self.initial_delay
        return {
            'initial_delay': None if delay is None or callable(delay) else float(delay),
            'initial_delay_callable': callable(delay),
        }


@dataclasses.dataclass(frozen=True)
class DaemonHandler(SpawningHandler):
    cancellation_backoff: float | None
    cancellation_timeout: float | None
    cancellation_polling: float | None

    def __str__(self) -> str:
        return f"Daemon {self.id!r}"

    def spawning_for_engine(self) -> dict[str, Any]:
        return {**super().spawning_for_engine(), 'kind': 'daemon',
                'cancellation_backoff': self.cancellation_backoff,
                'cancellation_timeout': self.cancellation_timeout,
                'cancellation_polling': self.cancellation_polling}


@dataclasses.dataclass(frozen=True)
class TimerHandler(SpawningHandler):
    sharp: bool | None
    idle: float | None
    interval: float | None
    cron: str | None = None  # not in Kopf: a schedule instead of an interval
    timezone: str | None = None

    def __str__(self) -> str:
        return f"Timer {self.id!r}"

    def spawning_for_engine(self) -> dict[str, Any]:
        cron = {'pattern': self.cron, 'timezone': self.timezone} if self.cron is not None else None
        return {**super().spawning_for_engine(), 'kind': 'timer',
                'sharp': bool(self.sharp), 'idle': self.idle, 'interval': self.interval, 'cron': cron}


class OperatorRegistry:
    """All handlers of an operator: activities, change handlers, event watchers, daemons & timers,
    indexing functions, admission, log, conversion and reconcile handlers, related functions."""

    def __init__(self) -> None:
        super().__init__()
        self._activities: list[ActivityHandler] = []
        self._changing: list[ChangingHandler] = []
        self._watching: list[WatchingHandler] = []
        self._spawning: list[SpawningHandler] = []
        self._indexing: list[IndexingHandler] = []
        self._webhooks: list[WebhookHandler] = []
        self._logging: list[LogHandler] = []
        self._conversions: list[ConversionHandler] = []
        self._reconciling: list[ReconcilingHandler] = []
        self._relating: list[RelatingHandler] = []
        self._permissions: list[Any] = []  # kopf.rbac.declare(): the operator's own requests (kopf._operating.rbac)


class SmartOperatorRegistry(OperatorRegistry):
    """The default registry: with the login fallbacks for the installed client libraries."""

    def __init__(self) -> None:
        super().__init__()
        for fn in _piggybacking.fallback_logins():
            self._activities.append(ActivityHandler(
                fn=fn, id=fn.__name__, activity=Activity.AUTHENTICATION, errors=ErrorsMode.IGNORED,
                param=None, timeout=None, retries=None, backoff=None, _fallback=True,
            ))


_default_registry: OperatorRegistry | None = None


def get_default_registry() -> OperatorRegistry:
    """The registry that the decorators use unless another one is given."""
    global _default_registry
    if _default_registry is None:
        _default_registry = SmartOperatorRegistry()
    return _default_registry


def set_default_registry(registry: OperatorRegistry) -> None:
    """Make the decorators and the operator use this registry by default."""
    global _default_registry
    _default_registry = registry


HandlerT = TypeVar('HandlerT', bound=BaseHandler)


def deduplicated(handlers: Iterable[HandlerT]) -> list[HandlerT]:
    """Once per function and id, in order: a function under two decorators of one cause runs
    once (as in Kopf); different functions that share an id are all kept."""
    seen: set[tuple[int, str]] = set()
    found: list[HandlerT] = []
    for handler in handlers:
        key = (id(handler.fn), handler.id)
        if key not in seen:
            seen.add(key)
            found.append(handler)
    return found


def generate_id(fn: Callable[..., Any], id: str | None, prefix: str | None = None,
                suffix: str | None = None) -> str:
    """A handler's persistent id: explicit, or from the function's qualified name."""
    real_id = id if id is not None else get_callable_id(fn)
    real_id = f'{real_id}/{suffix}' if suffix else real_id
    real_id = f'{prefix}/{real_id}' if prefix else real_id
    return real_id


def get_callable_id(c: Callable[..., Any]) -> str:
    if c is None:
        raise ValueError("Cannot build a persistent id of None.")
    if isinstance(c, functools.partial):
        return get_callable_id(c.func)
    if hasattr(c, '__wrapped__'):
        return get_callable_id(c.__wrapped__)
    if isinstance(c, FunctionType) and c.__name__ == '<lambda>':
        return f'lambda:{c.__code__.co_filename}:{c.__code__.co_firstlineno}'
    if isinstance(c, FunctionType | MethodType):
        return str(getattr(c, '__qualname__', getattr(c, '__name__', repr(c))))
    raise ValueError(f"Cannot get id of {c!r}.")
