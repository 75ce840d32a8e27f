"""The Python side of the core's hooks: the core decides what to call and when;
this module builds the handlers' keyword arguments, calls them, and answers."""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextvars
import copy
import dataclasses
import datetime
import functools
import json
import logging
from collections.abc import Iterable, Mapping
from typing import Any

from kopf._bridge.protocol import (
    ConversionAnswer,
    ConversionRequest,
    DaemonCall,
    HandlerKind,
    Invocation,
    Invoked,
    ObjectRef,
    PlanRequest,
    ResourceInfo,
    ResourceSelection,
    Target,
    Threading,
)
from kopf._bridge.services import CoreBody
from kopf._handling import lifecycles as lifecycles
from kopf._handling import subhandling as _subhandling
from kopf._handling.activities import authenticate, run_activity
from kopf._handling.conversions import Converting
from kopf._handling.daemons import AsyncDaemonStopperChecker, DaemonStopper, SyncDaemonStopperChecker
from kopf._handling.execution import Outcome, execute_in_thread, execute_once, is_async_fn
from kopf._handling.handlers import (
    Activity,
    ChangingHandler,
    DaemonHandler,
    OperatorRegistry,
    Reason,
    ResourceHandler,
    SpawningHandler,
)
from kopf._handling.lifecycles import LifeCycleFn
from kopf._handling.subhandling import Declared
from kopf._handling.tracing import current_span
from kopf._logs.loggers import CoreSaying, core_writing, log_here
from kopf._running.kinds import BY_NAME, KINDS
from kopf._structures import indices as _indices
from kopf._structures import selectors as _selectors
from kopf._structures.errors import AdmissionError, PermanentError, TemporaryError
from kopf._structures.hierarchies import cause_body_var
from kopf._structures.memos import ObjectMemos
from kopf._structures.references import Resource
from kopf._structures.requeues import Requeue
from kopf._structures.settings import OperatorSettings, is_default_executor
from kopf._structures.structs import Body, Diff, LazyRaw, Patch

engine_logger = logging.getLogger('kopf._core.engine')

_ABSENT_VALUE = object()
_NO_RUNTIME = datetime.timedelta(0)  # the first attempt's (timedeltas are immutable)


def _resolve(data: Any, path: tuple[str, ...] | None) -> Any:
    for key in path or ():
        if not isinstance(data, Mapping) or key not in data:
            return _ABSENT_VALUE
        data = data[key]
    return data


class Bridge:
    """Called by the core (see ``src/binding/hooks.rs``) from the operator's loop."""

    def __init__(self, *, registry: OperatorRegistry, settings: OperatorSettings, memo: Any,
                 ready: asyncio.Event, loop: asyncio.AbstractEventLoop,
                 lifecycle: LifeCycleFn = lifecycles.asap, indices: Mapping[str, Any] | None = None) -> None:
        self.registry = registry
        # The operator's indices by id: every handler gets them as kwargs, over any other kwarg.
        self.indices = dict(indices or {})
        self.lifecycle = lifecycle  # the operator's: which change handlers of a cause run at once
        self.scopes: dict[int, Declared] = {}  # sub-handlers being executed, by their scope
        # The handlers of each kind, as the registry has them now: their positions name them.
        self._by_kind: dict[HandlerKind, list[Any]] = {kind.name: kind.handlers(registry) for kind in KINDS}
        self.changing: list[ChangingHandler] = self._by_kind['changing']
        self.spawning: list[SpawningHandler] = self._by_kind['spawning']
        self.conversions = list(registry._conversions)
        self.settings = settings
        self.memobase = memo
        self.memos = ObjectMemos(memo)
        self.converting = Converting(handlers=self.conversions, settings=settings, memos=self.memos,
                                     indices=self.indices)
        self.stoppers: dict[int, DaemonStopper] = {}  # by the core's daemon tokens
        self._resources: dict[int, tuple[ResourceInfo, Resource]] = {}
        self.live_bodies: dict[str, LazyRaw] = {}  # what daemons & timers see, by object
        self.live_users: dict[str, int] = {}  # how many daemons & timers use each live body
        self._ready = ready
        self._loop = loop
        self._queue: Any = None
        self._context = contextvars.copy_context()  # what handlers on the core's threads start with
        self._saying = CoreSaying(None)  # which handlers' "succeeded" lines the core writes
        self._serving: dict[int, asyncio.Task[None]] = {}  # the calls' tasks, by the calls' ids
        # Sync handlers in an operator's own executor (see `threading`) wait for its threads
        # anyway; making them wait before their arguments are built keeps a burst of calls
        # from holding all those bodies at once.
        threads = getattr(settings.execution.executor, '_max_workers', None) or 32
        self._executor_slots = asyncio.Semaphore(2 * threads)
        # Decided once per handler (by its identity: the lists keep them alive), not per call:
        # whether it is async; which are sync handlers that return soon (daemons run for long
        # and do not count); and, unless it is a change handler, what its calls show to
        # `@kopf.subhandler` and `kopf.execute()`: only the handler, as they refuse it.
        registered = [handler for handlers in self._by_kind.values() for handler in handlers]
        self._asyncs = {id(handler): is_async_fn(handler.fn) for handler in registered}
        self._threaded: set[Target] = {(kind, index) for kind, handlers in self._by_kind.items()
                          for index, handler in enumerate(handlers)
                          if not self._asyncs[id(handler)] and not isinstance(handler, DaemonHandler)}
        self._refusing = {id(handler): _subhandling.Call(handler=handler, scope=None, lifecycle=lifecycle,
                                                         kwargs={}, scopes=self.scopes)
                          for handler in registered if not isinstance(handler, ChangingHandler)}

    def spec(self) -> dict[str, Any]:
        """The handlers as the core needs them (their positions identify them in calls back)."""
        spec = {kind.spec: [{'index': i, **kind.describe(h)} for i, h in enumerate(self._by_kind[kind.name])]
                for kind in KINDS}
        spec['conversions'] = [{'index': i, **h.conversion_for_engine()} for i, h in enumerate(self.conversions)]
        return spec

    # -- the core's calls: queued by the core, served on this loop ------------------------------

    def attach(self, queue: Any) -> None:
        """Serve the core's calls (``kopf._engine.CallQueue``) whenever its socket is readable."""
        self._queue = queue
        self._loop.add_reader(queue.fileno(), self._drain)

    def detach(self) -> None:
        """Stop serving; the core's last notes (log lines of its exit) are still delivered."""
        if self._queue is not None:
            self._loop.remove_reader(self._queue.fileno())
            self._drain(notes_only=True)
            self._queue.processed(stopped=True)  # no handler's thread waits for notes now

    def running_calls(self) -> set[asyncio.Task[None]]:
        """The core's calls that are still running (handlers, daemons)."""
        return {task for task in self._serving.values() if not task.done()}

    def _drain(self, notes_only: bool = False) -> None:
        for call_id, method, target, argument in self._queue.take():
            if not call_id:  # a note: a plain method, in order, nothing to answer
                try:
                    getattr(self, method)(*argument.build())
                except Exception:
                    engine_logger.exception(f"The engine's note {method!r} has failed.")
                continue
            if notes_only:
                continue
            coro = self._serve(call_id, getattr(self, method), argument, tuple(target or ()) in self._threaded)
            task = self._loop.create_task(coro)
            if not task.done():  # (an eager task factory may have run it to its end already)
                self._serving[call_id] = task
        self._queue.processed()  # the notes are written: handlers' threads may start their calls

    async def _serve(self, call_id: int, method: Any, pending: Any, needs_a_thread: bool) -> None:
        # The call forgets its task itself when it ends: a done-callback would be one more
        # callback on the loop for every call. (A task cancelled before it started, which
        # happens only when the operator exits, stays listed; it is done, so not running.)
        try:
            if needs_a_thread:
                async with self._executor_slots:
                    result = await method(pending.build())
            else:
                result = await method(pending.build())
        except BaseException as e:
            self._queue.fail(call_id, e)
            if not isinstance(e, Exception | asyncio.CancelledError):
                raise
        else:
            self._queue.complete(call_id, result)
        finally:
            self._serving.pop(call_id, None)

    # -- called by the core -------------------------------------------------------------------

    def threading(self) -> Threading:
        """Which handlers the core may call on its own threads (``invoke_in_thread``), and how
        many at once: the synchronous ones, with the default executor (its size is all that
        matters, ``settings.execution.max_workers``); an operator's own executor runs them
        itself (None: all calls come through the loop)."""
        executor = self.settings.execution.executor
        if not is_default_executor(executor) or not isinstance(executor, concurrent.futures.ThreadPoolExecutor):
            return None
        conversions: set[Target] = {('conversion', index) for index, handler in enumerate(self.conversions)
                                    if not is_async_fn(handler.fn)}
        return executor._max_workers, sorted(self._threaded | conversions)

    def log_levels(self, names: list[str]) -> dict[str, int]:
        """The effective levels of the loggers the core writes to: lines below them are not sent."""
        return {name: logging.getLogger(name).getEffectiveLevel() for name in names}

    def log_writing(self, names: list[str]) -> str | None:
        """Which of the core's lines it writes to ``kopf run``'s stream itself (``LogWriting``,
        as JSON): a line sent here costs a wake-up of the loop and the GIL."""
        writing = core_writing(names, self.settings)
        self._saying = CoreSaying(writing)
        return None if writing is None else json.dumps(writing)

    def log(self, name: str, level: int, ref: ObjectRef | None, message: str, local: bool = False) -> None:
        """A line of the core, to one of Kopf's loggers (by its name); about an object if ``ref``
        (not posted as an Event if ``local``)."""
        extra = None if ref is None else {'k8s_ref': ref, 'k8s_skip': local, 'settings': self.settings}
        log_here(logging.getLogger(name), level, message, extra)

    def ready(self) -> None:
        self._loop.call_soon_threadsafe(self._ready.set)

    async def select_resources(self, request: ResourceSelection) -> list[bool]:
        """Which of the resources a handler's callable selector wants (`@kopf.on.event(callable)`)."""
        handler = self._by_kind[request['kind']][request['handler']]
        assert handler.selector is not None and handler.selector.fn is not None
        verdicts = []
        for data in request['resources']:
            try:
                verdicts.append(bool(handler.selector.fn(Resource.from_engine(data))))
            except Exception:
                engine_logger.exception(f"The resource selector of {handler} has failed for {data['plural']}.")
                verdicts.append(False)
        return verdicts

    async def server_selectors(self, resources: list[ResourceInfo]) -> list[tuple[str | None, str | None, str | None]]:
        """What each served resource's streams ask the server to filter (Kopf's joining)."""
        watching = self.settings.watching
        found = []
        for data in resources:
            selectors = _selectors.server_selectors(watching.label_selectors, watching.field_selectors,
                                                    watching.shard_selectors, Resource.from_engine(data))
            found.append((selectors['label'], selectors['field'], selectors['shard']))
        return found

    async def probe(self, _: None) -> dict[str, Any]:
        return await run_activity(registry=self.registry, settings=self.settings, activity=Activity.PROBE,
                                  memo=self.memobase, indices=self.indices)

    async def relogin(self, _: None) -> str:
        """The server refused the credentials (401): run the login handlers again."""
        connection = await authenticate(registry=self.registry, settings=self.settings, memo=self.memobase,
                                        indices=self.indices, title="Re-authentication")
        return json.dumps(connection)

    def forget(self, key: str) -> None:
        self.memos.forget(key)

    def release(self, number: int) -> None:
        """The core has dropped a value that referred to an object kept for it."""
        _indices.release(number)

    def daemon_stopping(self, token: int, reason: int) -> None:
        self._stopper(token).set(reason)

    def daemon_cancel(self, token: int) -> None:
        self._stopper(token).cancel()

    def daemon_forget(self, token: int) -> None:
        stopper = self.stoppers.pop(token, None)
        if stopper is not None and stopper.key is not None:
            self.live_users[stopper.key] -= 1
            if not self.live_users[stopper.key]:
                del self.live_users[stopper.key], self.live_bodies[stopper.key]

    def refresh_body(self, key: str, source: CoreBody) -> None:
        live = self.live_bodies.get(key)
        if live is not None:
            live._replace(source)

    async def initial_delay(self, call: Invocation) -> float:
        handler = self.spawning[call['handler']]
        kwargs, _, _ = self._kwargs(call, handler)
        assert callable(handler.initial_delay)
        try:
            return float(handler.initial_delay(**kwargs))
        except Exception:
            engine_logger.exception(f"The initial delay of {handler} has failed; starting with no delay.")
            return 0.0

    async def invoke(self, call: Invocation) -> Invoked | None:
        handler = self._handler(call)
        kwargs, logger, patch = self._call_kwargs(call, handler)
        if _unmatched(handler, kwargs):
            return None
        daemon = call.get('daemon')
        stopper = self.stoppers.get(daemon['token']) if daemon is not None else None  # made by `_kwargs`
        if stopper is not None and stopper.cancelled:
            return {'final': True, 'cancelled': True}
        sub = self._subhandling(call, handler, kwargs)
        declaring = _subhandling.current.set(sub)
        # Only change handlers may declare sub-handlers (`@kopf.subhandler` refuses others).
        after = functools.partial(_subhandling.execute_declared, sub) if isinstance(handler, ChangingHandler) else None
        try:
            if stopper is not None:
                stopper.task = asyncio.current_task(self._loop)
            with current_span(call.get('trace')):
                outcome = await execute_once(
                    handler=handler, kwargs=kwargs, logger=logger, retry=call['retry'], runtime=call['runtime'],
                    settings=self.settings, default_errors=BY_NAME[call['kind']].errors,
                    after=after, is_async=self._asyncs.get(id(handler)), saying=self._saying.posted,
                )
        except asyncio.CancelledError:
            if stopper is None or not stopper.cancelled:
                raise
            return {'final': True, 'cancelled': True}  # stopped by force, as the core asked
        finally:
            _subhandling.current.reset(declaring)
            if stopper is not None:
                stopper.task = None
        return self._answer(call, outcome, patch, kwargs, handler)

    def invoke_in_thread(self, call: Invocation) -> Invoked | None:
        """A synchronous handler, called on one of the core's threads (see ``threading``),
        in a copy of the loop's context, as the executor would have run it."""
        return self._context.copy().run(self._invoke_here, call)

    def _invoke_here(self, call: Invocation) -> Invoked | None:
        handler = self._handler(call)
        kwargs, logger, patch = self._call_kwargs(call, handler)
        if _unmatched(handler, kwargs):
            return None
        sub = self._subhandling(call, handler, kwargs)
        _subhandling.current.set(sub)  # in this call's own context (see `invoke_in_thread`)
        changing = isinstance(handler, ChangingHandler)
        after = functools.partial(_subhandling.execute_declared_blocking, sub) if changing else None
        with current_span(call.get('trace')):
            outcome = execute_in_thread(
                handler=handler, kwargs=kwargs, logger=logger, retry=call['retry'], runtime=call['runtime'],
                settings=self.settings, default_errors=BY_NAME[call['kind']].errors,
                after=after, saying=self._saying.posted,
            )
        return self._answer(call, outcome, patch, kwargs, handler)

    async def plan(self, request: PlanRequest) -> list[int]:
        """A custom lifecycle's pick of the awakened handlers: their positions in the request."""
        scope = request['scope']
        declared = self.scopes[scope] if scope is not None else None
        lifecycle = declared.lifecycle if declared is not None else self.lifecycle
        candidates = [declared.handlers[index] if declared is not None else self.changing[index]
                      for index, _ in request['handlers']]
        state = {id: _subhandling.HandlerState.from_record(record) for id, record in request['states'].items()}
        kwargs, _, _ = self._kwargs(request['call'], candidates[0])
        try:
            picked = lifecycle(candidates, state=state, **kwargs)
        except Exception:
            engine_logger.exception(f"The lifecycle {lifecycle!r} has failed; no handlers run in this cycle.")
            return []
        positions = {id(handler): at for at, handler in enumerate(candidates)}
        return [positions[id(handler)] for handler in picked if id(handler) in positions]

    async def convert(self, request: ConversionRequest) -> ConversionAnswer:
        """The objects of a conversion review, each through its chain of conversion handlers."""
        return await self.converting.convert(request, self._resource(request['resource']))

    def convert_in_thread(self, request: ConversionRequest) -> ConversionAnswer:
        """The same, all steps synchronous, on one of the core's threads (see ``threading``), in
        a copy of the loop's context: no trip through the loop and the executor."""
        resource = self._resource(request['resource'])
        return self._context.copy().run(self.converting.convert_here, request, resource)

    async def check_callbacks(self, calls: list[Invocation]) -> list[bool]:
        verdicts = []
        for call in calls:
            handler = self._handler(call)
            kwargs, _, _ = self._kwargs(call, handler)
            try:
                verdicts.append(self._callbacks_match(handler, call, kwargs))
            except Exception:
                engine_logger.exception(f"A filter of {handler} has failed; the handler is skipped.")
                verdicts.append(False)
        return verdicts

    # -- internals -----------------------------------------------------------------------------

    def _call_kwargs(self, call: Invocation, handler: ResourceHandler) -> tuple[dict[str, Any], Any, Patch]:
        """All keyword arguments of a handler's call (the filters' callbacks get fewer)."""
        kwargs, logger, patch = self._kwargs(call, handler)
        kwargs['param'] = handler.param
        cause_body_var.set(kwargs['body'])  # for kopf.adopt() & co without an explicit owner
        started = _started(call['started']) if call['started'] else None
        if started is None and BY_NAME[call['kind']].once:
            # No progress is kept for them: each call is the first and only attempt, from now
            # (naive UTC, as Kopf keeps the times of attempts).
            started = _utcnow()
        runtime = call['runtime']
        kwargs |= {'retry': call['retry'], 'started': started,
                   'runtime': datetime.timedelta(seconds=runtime) if runtime else _NO_RUNTIME}
        if self.indices:
            kwargs |= self.indices
        return kwargs, logger, patch

    def _handler(self, call: Invocation) -> ResourceHandler:
        scope = call.get('scope')
        if scope is not None:
            return self.scopes[scope].handlers[call['handler']]
        return self._by_kind[call['kind']][call['handler']]  # type: ignore[no-any-return]

    def _subhandling(self, call: Invocation, handler: ResourceHandler, kwargs: dict[str, Any]) -> _subhandling.Call:
        """What sub-handlers declared in this call need: its scope in the core (change
        handlers only), the lifecycle it ran by, and the kwargs its sub-handlers share; for
        the other handlers, their one record made at the start (see ``__init__``)."""
        refusing = self._refusing.get(id(handler))
        if refusing is not None:
            return refusing
        scope = call.get('scope')
        lifecycle = self.scopes[scope].lifecycle if scope is not None else self.lifecycle
        return _subhandling.Call(handler=handler, scope=call.get('children'), lifecycle=lifecycle,
                                 kwargs=kwargs, scopes=self.scopes)

    @staticmethod
    def _answer(call: Invocation, outcome: Outcome, patch: Patch,
                kwargs: Mapping[str, Any] | None = None, handler: Any = None) -> Invoked | None:
        """The outcome for the core. A sub-handler's `patch` is its parent's: it goes with
        the parent's outcome. An indexing function's result goes to the core as it is (the
        core converts it, see ``src/binding/indices.rs``), and its `patch` nowhere (as in Kopf).
        An admission handler's warnings and error go to the review's response. A success
        that the handler's thread did not log goes with the line for the core to write."""
        kind = call['kind']
        requeue = None
        if isinstance(outcome.result, Requeue):
            outcome, requeue = _requeued(kind, outcome, handler)
        said = None if outcome.said_by_core is None else (f"{handler} succeeded.", outcome.said_by_core)
        if kind == 'indexing':
            invoked = outcome.for_engine()
            invoked['indexed'] = invoked.pop('result', None)
        elif kind == 'relating':
            # Owners only from a success: without them, the core keeps those named before.
            owners = None
            if outcome.exception is None and not outcome.ignored:
                try:
                    owners = _owners_named(outcome.result, (kwargs or {}).get('namespace'))
                except TypeError as error:
                    (kwargs or {}).get('logger', engine_logger).error(f"{handler} returned {error}")
                    outcome = Outcome(final=True, exception=error)
            invoked = outcome.for_engine()
            invoked.pop('result', None)
            if owners is not None:
                invoked['related'] = owners
        else:
            merge_patch = {} if call.get('scope') is not None else patch._as_merge_patch()
            if (kind != 'admission' and outcome.final and outcome.exception is None and outcome.result is None
                    and not merge_patch and requeue is None):
                # Succeeded, nothing to keep or apply: the core needs no dict to read.
                return None if said is None else {'final': True, 'said': said}
            invoked = outcome.for_engine(merge_patch)
            if kind == 'admission':
                invoked['warnings'] = [str(w) for w in (kwargs or {}).get('warnings', [])]
                invoked['rejection'] = _rejection(outcome.exception)
        if said is not None:
            invoked['said'] = said
        if requeue is not None:
            invoked['requeue'] = requeue
        return invoked

    def _stopper(self, token: int) -> DaemonStopper:
        # The core may raise a flag before the daemon's first call: whoever comes first creates it.
        stopper = self.stoppers.get(token)
        if stopper is None:
            stopper = self.stoppers.setdefault(token, DaemonStopper(self._loop))
        return stopper

    def _live_body(self, daemon: DaemonCall, source: CoreBody, stopper: DaemonStopper) -> LazyRaw:
        """Daemons and timers see one live body per object, replaced when it changes (what
        was read of it is kept while the core's body stays the same)."""
        key = daemon['key']
        if stopper.key is None:
            stopper.key = key
            self.live_users[key] = self.live_users.get(key, 0) + 1
        live = self.live_bodies.get(key)
        if live is None:
            live = self.live_bodies[key] = LazyRaw(source)
        elif not source.same(live._source()):
            live._replace(source)
        return live

    def _raw_body(self, call: Invocation) -> Mapping[str, Any]:
        """The call's body: a dict for `on.event` and admission handlers, else the core's
        body read lazily; for daemons and timers, their object's live one."""
        daemon = call.get('daemon')
        if daemon is not None:
            return self._live_body(daemon, call['body'], self._stopper(daemon['token']))
        body = call['body']
        return body if isinstance(body, dict) else LazyRaw(body)

    def _kwargs(self, call: Invocation, handler: ResourceHandler) -> tuple[dict[str, Any], Any, Patch]:
        scope = call.get('scope')
        if scope is not None:
            # As in Kopf, sub-handlers share their parent's cause: the same body, patch, memo.
            shared = dict(self.scopes[scope].call.kwargs)
            shared |= {'reason': Reason(call['reason'] or 'noop'), 'diff': Diff(call['diff'] or ()),
                       'old': call['old'], 'new': call['new']}
            return shared, shared['logger'], shared['patch']
        daemon = call.get('daemon')
        if daemon is None:
            raw = self._raw_body(call)
            kwargs = self._object_kwargs(call, raw)
        else:
            # A daemon's or timer's calls all see its live body: its views are made once.
            stopper = self._stopper(daemon['token'])
            raw = self._live_body(daemon, call['body'], stopper)
            if stopper.kwargs is None:
                stopper.kwargs = self._object_kwargs(call, raw)
                checker = AsyncDaemonStopperChecker if is_async_fn(handler.fn) else SyncDaemonStopperChecker
                stopper.kwargs['stopped'] = checker(stopper)  # one per daemon, as in Kopf
            kwargs = dict(stopper.kwargs)
            if daemon['hold'] is not None:  # only a daemon's own call has it (a retry: a new one)
                stopper.hold = daemon['hold']
                where = '/'.join(filter(None, [kwargs['namespace'], kwargs['name']]))
                stopper.hold.rename(f"The daemon {handler.id!r} of {where}")
        body, logger = kwargs['body'], kwargs['logger']
        patch = kwargs['patch'] = Patch(body=body)
        watching = call['kind'] == 'watching'
        if watching:
            kwargs |= {'type': call['event_type'], 'event': {'type': call['event_type'], 'object': raw}}
        elif daemon is not None:
            if daemon['reason'] and not stopper.is_set():
                stopper.set(daemon['reason'])
        elif call['kind'] == 'admission':
            admission = call['admission']
            if admission['operation'] == 'CREATE':  # a new object has no memo of its own yet
                kwargs['memo'] = copy.copy(self.memobase)
            kwargs |= {'dryrun': admission['dryrun'], 'headers': admission['headers'],
                       'sslpeer': _sslpeer(admission['sslpeer']), 'userinfo': admission['userinfo'],
                       'warnings': [], 'operation': admission['operation'],
                       'subresource': admission['subresource'], 'diff': Diff(call['diff'] or ()),
                       'old': Body(call['old']) if call['old'] is not None else None,
                       'new': Body(call['new']) if call['new'] is not None else None}
        elif call['kind'] == 'logging' and 'log' in call:
            line = call['log']
            regex = getattr(handler, 'regex', None)
            match = None if regex is None else regex.search(line['line'])
            if match is None and regex is not None:
                _unmatched_line(handler, line['line'], logger)
            kwargs |= {'log': line['line'], 'match': match, 'container': line['container'],
                       'timestamp': _timestamp(line['timestamp'])}
        elif call['kind'] == 'reconciling':
            kwargs['deleting'] = kwargs['meta'].get('deletionTimestamp') is not None
        elif call['kind'] == 'changing' and call['reason'] is not None:
            kwargs |= {'reason': Reason(call['reason']), 'diff': Diff(call['diff'] or ()),
                       'old': call['old'], 'new': call['new']}
        if self.indices:
            kwargs |= self.indices
        return kwargs, logger, patch

    def _object_kwargs(self, call: Invocation, raw: Mapping[str, Any]) -> dict[str, Any]:
        """The kwargs about the object: its body's views, logger, memo, resource."""
        body = Body._with_views(raw)
        meta = body._meta
        # The same values as the views' shortcuts give, read without walking their paths.
        if type(raw) is LazyRaw:  # (not `isinstance`: an ABC's check costs a microsecond)
            api_version, kind, name, uid, namespace = raw.identity()
        else:
            fields = raw.get('metadata')
            fields = fields if isinstance(fields, dict) else {}
            api_version, kind = raw.get('apiVersion'), raw.get('kind')
            name, uid, namespace = fields.get('name'), fields.get('uid'), fields.get('namespace')
        ref = {'apiVersion': api_version, 'kind': kind, 'name': name, 'uid': uid, 'namespace': namespace}
        return {
            'logger': BY_NAME[call['kind']].logger._made(ref, self.settings),
            'memo': self.memos.of(uid or ''),
            'resource': self._resource(call['resource']),
            'body': body,
            'spec': body._spec,
            'meta': meta,
            'status': body._status,
            'uid': uid,
            'name': name,
            'namespace': namespace,
            'labels': meta._labels,
            'annotations': meta._annotations,
        }

    def _resource(self, data: ResourceInfo) -> Resource:
        """The same ``kopf.Resource`` for all calls about one resource (made once). The core
        sends one dict per resource as it is now (a changed CRD: a new dict), kept alive
        there, so the dict's identity names it."""
        found = self._resources.get(id(data))
        if found is None or found[0] is not data:
            found = self._resources[id(data)] = (data, Resource.from_engine(data))
        return found[1]

    def _callbacks_match(self, handler: ResourceHandler, call: Invocation, kwargs: dict[str, Any]) -> bool:
        """Only the callbacks: the static parts of the filters were checked by the core."""
        raw = self._raw_body(call)
        for pattern, field in ((handler.labels, 'labels'), (handler.annotations, 'annotations')):
            for key, value in (pattern or {}).items():
                if callable(value) and not value(kwargs['meta'].get(field, {}).get(key), **kwargs):
                    return False
        def field_of(data: Any) -> Any:
            found = _resolve(data, handler.field)
            return None if found is _ABSENT_VALUE else found

        changing = isinstance(handler, ChangingHandler)
        if handler.field and callable(handler.value):
            values = [field_of(call['new']), field_of(call['old'])] if changing else [field_of(raw)]
            if not any(handler.value(v, **kwargs) for v in values):
                return False
        if isinstance(handler, ChangingHandler) and handler.field:
            if callable(handler.old) and not handler.old(field_of(call['old']), **kwargs):
                return False
            if callable(handler.new) and not handler.new(field_of(call['new']), **kwargs):
                return False
        if handler.when is not None and not handler.when(**kwargs):
            return False
        return True


def _utcnow() -> datetime.datetime:
    """Now, naive UTC (`.replace(tzinfo=None)`, with its keyword, cost thrice as much)."""
    now = datetime.datetime.now(datetime.UTC)
    return datetime.datetime.combine(now.date(), now.time())


@functools.lru_cache(maxsize=1024)
def _started(text: str) -> datetime.datetime:
    """When a handler was first called: the same for all calls of a timer and for all
    retries of a handler (parsed once; datetimes are immutable)."""
    return datetime.datetime.fromisoformat(text)


@functools.lru_cache(maxsize=256)
def _timestamp(text: str) -> datetime.datetime:
    """A log line's time, aware (UTC); lines of one second share their parsed times often."""
    return datetime.datetime.fromisoformat(text)


def _unmatched(handler: Any, kwargs: Mapping[str, Any]) -> bool:
    """A log handler's call for a line that the core matched and Python's `re` does not: skipped."""
    return kwargs.get('match', _ABSENT_VALUE) is None and getattr(handler, 'regex', None) is not None


def _unmatched_line(handler: Any, line: str, logger: Any) -> None:
    """The core matched the line (Rust's regex), Python's `re` does not: the call is skipped,
    as the handler would get no `match`. The two agree on all a pattern can say in both
    (checked at the declaration), but a line with bytes that are not UTF-8 is text to one only."""
    logger.debug(f"{handler} is not called for a line that Python's re does not match: {line[:200]!r}")


def _requeued(kind: HandlerKind, outcome: Outcome, handler: Any) -> tuple[Outcome, float | None]:
    """A ``kopf.Requeue`` returned: the reconcile handler's wish; from any other handler, its
    error (a requeue that nothing would honour is not dropped in silence)."""
    requeue = outcome.result
    if kind == 'reconciling':
        return dataclasses.replace(outcome, result=None), requeue.after
    error = TypeError(f"{handler} returned {requeue!r}, but only @kopf.on.reconcile handlers can be requeued.")
    engine_logger.error(str(error))
    return Outcome(final=True, exception=error), None


def _owners_named(result: Any, namespace: str | None) -> list[tuple[str | None, str]]:
    """The owners that a related function's result names, each as (namespace, name), once each
    in their order: a name (in the object's namespace), a mapping with ``name`` (and
    ``namespace``), an owner's body (with ``metadata``), or an iterable of those; ``None``: none.
    A ``TypeError`` that says what was returned instead."""
    if result is None:
        return []
    items = [result] if isinstance(result, str | Mapping) else result
    if isinstance(items, bytes) or not isinstance(items, Iterable):
        raise TypeError(f"{result!r}, but a related function returns its owners: a name, a dict with "
                        f"'name' (and 'namespace'), an owner's body, a list of those, or None.")
    owners: list[tuple[str | None, str]] = []
    for item in items:
        fields = item.get('metadata', item) if isinstance(item, Mapping) else None
        if isinstance(item, str) and item:
            owner = (namespace, item)
        elif isinstance(fields, Mapping) and isinstance(fields.get('name'), str) and fields['name'] and \
                isinstance(fields.get('namespace', namespace), str | None):
            owner = (fields.get('namespace', namespace), fields['name'])
        else:
            raise TypeError(f"{item!r} among its owners, but each owner is a name, a dict with 'name' "
                            f"(and 'namespace'), or an owner's body.")
        if owner not in owners:
            owners.append(owner)
    return owners


def _rejection(error: BaseException | None) -> tuple[str, str, int | None] | None:
    """An admission handler's error as the review's response tells it (Kopf's ranking)."""
    if error is None:
        return None
    text = str(error) or repr(error)
    if isinstance(error, AdmissionError):
        return 'admission', text, error.code
    if isinstance(error, PermanentError):
        return 'permanent', text, None
    if isinstance(error, TemporaryError):
        return 'temporary', text, None
    return 'other', text, None


def _sslpeer(peer: Mapping[str, Any]) -> dict[str, Any]:
    """The client's certificate as Python's ``getpeercert()`` gives it: tuples, not lists."""
    def tuples(value: Any) -> Any:
        return tuple(tuples(v) for v in value) if isinstance(value, list) else value
    return {key: tuples(value) for key, value in peer.items()}
