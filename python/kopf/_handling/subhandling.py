"""Sub-handlers: what a change handler declares during its call (``@kopf.subhandler``,
``kopf.register``, ``kopf.execute``), and their execution.

The core keeps their progress and picks which of them run (the lifecycle), as for the
operator's own handlers; here is what only Python can do: collect the functions while the
parent runs, hand them to the core (through the call's ``kopf._engine.Scope``), and
resolve them when the core calls them back. A parent is done when all its sub-handlers
are: until then its call ends with ``HandlerChildrenRetry`` and it runs again.
"""

from __future__ import annotations

import collections.abc
import contextvars
import dataclasses
import datetime
import json
from collections.abc import Callable, Iterable, Mapping, MutableMapping
from typing import Any

from kopf._handling.handlers import ChangingHandler, ResourceHandler, deduplicated, generate_id
from kopf._handling.lifecycles import LifeCycleFn, engine_name
from kopf._structures.errors import HandlerChildrenRetry


@dataclasses.dataclass
class Declared:
    """Sub-handlers given to the core once: looked up by their position when called back."""
    handlers: list[ChangingHandler]
    lifecycle: LifeCycleFn
    call: Call


@dataclasses.dataclass
class Call:
    """One handler call, as its sub-handlers see it."""
    handler: ResourceHandler
    scope: Any  # `kopf._engine.Scope` of a change handler's call; None for other handlers
    lifecycle: LifeCycleFn  # the one this call's handler was run by: the sub-handlers' default
    kwargs: Mapping[str, Any]  # what the sub-handlers' calls share with it (body, patch, memo, ...)
    scopes: MutableMapping[int, Declared]  # the operator's table of executing scopes
    declared: list[ChangingHandler] = dataclasses.field(default_factory=list)
    executed: bool = False

    async def execute(self, handlers: list[ChangingHandler], lifecycle: LifeCycleFn) -> None:
        """Run the sub-handlers once (the lifecycle's pick); unfinished ones end the call."""
        children, name = self._hand_over(handlers, lifecycle)
        try:
            answer = json.loads(await self.scope.execute(children, name))
        finally:
            self.scopes.pop(self.scope.id, None)
        self._conclude(answer)

    def execute_blocking(self, handlers: list[ChangingHandler], lifecycle: LifeCycleFn) -> None:
        """The same for a synchronous handler in a thread of the core's."""
        children, name = self._hand_over(handlers, lifecycle)
        try:
            answer = json.loads(self.scope.execute_blocking(children, name))
        finally:
            self.scopes.pop(self.scope.id, None)
        self._conclude(answer)

    def _hand_over(self, handlers: list[ChangingHandler], lifecycle: LifeCycleFn) -> tuple[str, str]:
        unique = deduplicated(handlers)
        self.scopes[self.scope.id] = Declared(handlers=unique, lifecycle=lifecycle, call=self)
        children = [{'index': index, **handler.changing_for_engine()} for index, handler in enumerate(unique)]
        return json.dumps(children), engine_name(lifecycle)

    @staticmethod
    def _conclude(answer: Mapping[str, Any]) -> None:
        if not answer['done']:
            raise HandlerChildrenRetry(delay=answer['delay'])


current: contextvars.ContextVar[Call] = contextvars.ContextVar('kopf_subhandling_call')


def current_call(what: str) -> Call:
    """The handler call in progress, for `kopf.subhandler` and the like."""
    call = current.get(None)
    if call is None:
        raise LookupError(f"{what} can only be used inside a handler, while it runs.")
    return call


def sub_handler(fn: Callable[..., Any], *, parent: ChangingHandler, id: str | None, **options: Any) -> ChangingHandler:
    """A sub-handler of this parent: its id is prefixed with the parent's."""
    return ChangingHandler(
        fn=fn, id=generate_id(fn=fn, id=id, prefix=parent.id),
        selector=None, reason=None, initial=None, deleted=None, requires_finalizer=None,
        field_needs_change=parent.field_needs_change, **options,
    )


_NO_OPTIONS: dict[str, Any] = dict(param=None, errors=None, timeout=None, retries=None, backoff=None,
                                   labels=None, annotations=None, when=None, field=None, value=None,
                                   old=None, new=None)


async def execute(
        *,
        fns: Iterable[Callable[..., Any]] | None = None,
        handlers: Iterable[ChangingHandler] | None = None,
        registry: Any = None,
        lifecycle: LifeCycleFn | None = None,
        cause: Any = None,
) -> None:
    """Execute sub-handlers of the current handler in a lifecycle of their own.

    Either ``fns`` (functions, or a mapping of ids to functions), ``handlers`` (made by the
    decorators' machinery), or a ``registry`` (its change handlers); without any of them, the
    sub-handlers declared so far with ``@kopf.subhandler`` / ``kopf.register`` (which are
    otherwise executed after the handler returns). Raises if some of them are not finished
    yet: the handler is then called again later (it must be idempotent).
    """
    call = current_call("kopf.execute()")
    if cause is not None:
        raise TypeError("kopf.execute(cause=...) is not supported: sub-handlers run for the cause "
                        "of the handler that executes them.")
    if len([v for v in (fns, handlers, registry) if v is not None]) > 1:
        raise TypeError("Only one of the fns, handlers, registry can be passed. Got more.")
    if call.scope is None:
        raise RuntimeError("Sub-handlers of event-handlers are not supported and have "
                           "no practical use (there are no retries or state tracking).")
    assert isinstance(call.handler, ChangingHandler)  # only change handlers' calls have scopes
    parent = call.handler
    children: list[ChangingHandler]
    if fns is not None and isinstance(fns, collections.abc.Mapping):
        children = [sub_handler(fn, parent=parent, id=id, **_NO_OPTIONS) for id, fn in fns.items()]
    elif fns is not None and isinstance(fns, collections.abc.Iterable):
        children = [sub_handler(fn, parent=parent, id=None, **_NO_OPTIONS) for fn in fns]
    elif fns is not None:
        raise ValueError(f"fns must be a mapping or an iterable, got {fns.__class__}.")
    elif handlers is not None:
        children = list(handlers)
    elif registry is not None:
        children = list(getattr(registry, '_changing', None) or [])
    elif call.executed:
        return  # the declared ones have run already in this call
    else:
        call.executed = True
        children = call.declared
    await call.execute(children, lifecycle if lifecycle is not None else call.lifecycle)


async def execute_declared(call: Call) -> None:
    """After a handler returns: its declared sub-handlers, unless it has executed them."""
    if call.declared and not call.executed:
        call.executed = True
        await call.execute(call.declared, call.lifecycle)


def execute_declared_blocking(call: Call) -> None:
    """The same for a synchronous handler that returned in a thread of the core's."""
    if call.declared and not call.executed:
        call.executed = True
        call.execute_blocking(call.declared, call.lifecycle)


@dataclasses.dataclass(frozen=True)
class HandlerState:
    """A handler's progress, as a custom lifecycle sees it in its ``state`` argument."""
    started: datetime.datetime | None
    stopped: datetime.datetime | None
    delayed: datetime.datetime | None
    purpose: str | None
    retries: int
    success: bool
    failure: bool
    message: str | None
    subrefs: tuple[str, ...]

    @classmethod
    def from_record(cls, record: Mapping[str, Any]) -> HandlerState:
        def time(key: str) -> datetime.datetime | None:
            text = record.get(key)
            if not text:
                return None
            parsed = datetime.datetime.fromisoformat(text)
            return parsed if parsed.tzinfo else parsed.replace(tzinfo=datetime.UTC)
        return cls(started=time('started'), stopped=time('stopped'), delayed=time('delayed'),
                   purpose=record.get('purpose'), retries=int(record.get('retries') or 0),
                   success=bool(record.get('success')), failure=bool(record.get('failure')),
                   message=record.get('message'), subrefs=tuple(record.get('subrefs') or ()))

    @property
    def finished(self) -> bool:
        return bool(self.success or self.failure)

    @property
    def sleeping(self) -> bool:
        now = datetime.datetime.now(datetime.UTC)
        return not self.finished and self.delayed is not None and self.delayed > now

    @property
    def awakened(self) -> bool:
        return not self.finished and not self.sleeping

    @property
    def runtime(self) -> datetime.timedelta:
        now = datetime.datetime.now(datetime.UTC)
        return now - (self.started or now)
