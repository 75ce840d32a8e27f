"""The operator's life: activities (startup, login, cleanup), the core's run, and stopping
by signals or flags. ``kopf.run()`` for scripts, ``kopf.operator()`` for embedding."""

from __future__ import annotations

import asyncio
import concurrent.futures
import json
import logging
import os
import re
import signal
import threading
import warnings
from collections.abc import Collection, Coroutine
from typing import Any

from kopf import _engine, _webhooks
from kopf import _lifecycles as lifecycles
from kopf._activities import authenticate, run_activity
from kopf._bridge.calls import Bridge
from kopf._errors import OperatorError
from kopf._handlers import Activity, OperatorRegistry, get_default_registry
from kopf._indices import Index
from kopf._peering import detect_own_id
from kopf._posting import engine_var, settings_var
from kopf._settings import OperatorSettings, posting_level
from kopf._structs import Memo

logger = logging.getLogger('kopf._core.reactor.running')

Flag = asyncio.Future | asyncio.Event | concurrent.futures.Future | threading.Event  # type: ignore[type-arg]


async def _wait_flag(flag: Flag) -> Any:
    if isinstance(flag, asyncio.Future):
        return await asyncio.shield(flag)
    if isinstance(flag, asyncio.Event):
        return await flag.wait()
    if isinstance(flag, concurrent.futures.Future):
        return await asyncio.wrap_future(flag)
    while not flag.is_set():  # threading.Event: poll, as there is no awaitable for it
        await asyncio.sleep(0.1)
    return True  # what its wait() returns once it is set (Kopf logs the flag's value)


def _raise_flag(flag: Flag | None) -> None:
    if flag is None:
        return
    if isinstance(flag, asyncio.Future):
        if not flag.done():
            flag.set_result(None)
    elif isinstance(flag, concurrent.futures.Future):
        if not flag.done():
            flag.set_result(None)
    else:
        flag.set()


def specific_namespaces(patterns: Collection[str]) -> list[str] | None:
    """The namespaces as plain names, watched one by one (as the core decides it:
    ``src/client/namespaces.rs``); none if any pattern is a glob, a negation or a list."""
    names = list(patterns)
    return None if any(c in name for name in names for c in '*?!,') else names


def only_namespace(patterns: Collection[str]) -> str | None:
    """The operator's only namespace, if it is exactly one named one."""
    names = specific_namespaces(patterns)
    return names[0] if names is not None and len(names) == 1 else None


def _lease_namespace(settings: OperatorSettings, namespaces: Collection[str]) -> str:
    """Where the election's Lease is: as set, or the pod's namespace, or the operator's
    only (exactly named) namespace, or ``default``."""
    if settings.leadership.lease_namespace:
        return settings.leadership.lease_namespace
    return os.environ.get('POD_NAMESPACE') or only_namespace(namespaces) or 'default'


_DNS_LABEL = re.compile(r'[a-z0-9]([-a-z0-9]{0,38}[a-z0-9])?')


def _check_sharding(settings: OperatorSettings) -> None:
    """Automatic sharding and what contradicts it, refused before anything starts."""
    if not settings.sharding.auto:
        return
    if settings.watching.shard_selectors:
        raise OperatorError("Automatic sharding (--shards auto) chooses each replica's shard itself: "
                            "settings.watching.shard_selectors cannot be used with it.")
    if not _DNS_LABEL.fullmatch(settings.sharding.group):
        raise OperatorError(f"settings.sharding.group must be a DNS label of at most 40 characters "
                            f"(lowercase letters, digits, '-'): {settings.sharding.group!r}.")


def _check_posting(settings: OperatorSettings) -> None:
    """A posting level that is no logging level, refused before anything starts."""
    try:
        posting_level(settings.posting)
    except ValueError as e:
        raise OperatorError(str(e)) from None


def _check_conversion(settings: OperatorSettings) -> None:
    """A cleanup of CRDs that the operator does not manage could not happen: refused."""
    if settings.conversion.cleanup and not settings.conversion.managed:
        raise OperatorError("settings.conversion.cleanup cleans up only what the operator manages: "
                            "set settings.conversion.managed = True too, or leave cleanup off.")


async def operator(
        *,
        lifecycle: Any = None,
        indexers: Any = None,
        registry: OperatorRegistry | None = None,
        settings: OperatorSettings | None = None,
        memories: Any = None,
        insights: Any = None,
        identity: Any = None,
        standalone: bool | None = None,
        priority: int | None = None,
        peering_name: str | None = None,
        lease_name: str | None = None,
        shards: str | None = None,
        metrics_address: str | None = None,
        liveness_endpoint: str | None = None,
        clusterwide: bool = False,
        namespaces: Collection[str] = (),
        namespace: str | None = None,
        stop_flag: Flag | None = None,
        ready_flag: Flag | None = None,
        vault: Any = None,
        memo: object | None = None,
        _command: Coroutine[None, None, None] | None = None,
) -> None:
    """Run an operator in the current asyncio loop until it is stopped (by a signal or ``stop_flag``)."""
    if namespaces and namespace:
        raise TypeError("Either namespaces= or namespace= can be passed. Got both.")
    if namespace:
        warnings.warn("namespace= is deprecated; use namespaces=[...]", DeprecationWarning, stacklevel=2)
        namespaces = [namespace]
    if clusterwide and namespaces:
        raise TypeError("The operator can be either cluster-wide or namespaced, not both.")
    if not clusterwide and not namespaces:
        warnings.warn("Absence of either namespaces or cluster-wide flag will become an error soon."
                      " For now, switching to the cluster-wide mode for backward compatibility.",
                      FutureWarning, stacklevel=1)  # located in kopf's own code, as Kopf's is (not in asyncio's)
        clusterwide = True

    # Kopf's internal state objects, for sharing it with an embedding program: this engine keeps
    # that state in its core, so none can be given (rather than taken and silently not used).
    unsupported = {
        'indexers': (indexers, "the indices are read in handlers, as kwargs named by the @kopf.index ids"),
        'memories': (memories, "the objects' memos are the `memo` kwarg of handlers"),
        'insights': (insights, "the served resources and namespaces are not shared"),
        'vault': (vault, "the credentials come from the @kopf.on.login handlers"),
        '_command': (_command, "run the coroutine as a task beside the operator"),
    }
    for name, (value, instead) in unsupported.items():
        if value is not None:
            raise TypeError(f"{name}= is not supported by this engine (kopf-rs), which keeps the "
                            f"operator's state in its core: {instead}.")

    registry = registry if registry is not None else get_default_registry()
    lifecycle = lifecycle if lifecycle is not None else lifecycles.get_default_lifecycle()
    settings = settings if settings is not None else OperatorSettings()
    settings.peering.clusterwide = clusterwide
    if peering_name is not None:
        settings.peering.mandatory = True
        settings.peering.name = peering_name
    if lease_name is not None:
        settings.leadership.lease_name = lease_name
    if shards is not None:
        if shards != 'auto':
            raise TypeError(f"shards= can only be 'auto' (the replicas share the objects), not {shards!r}.")
        settings.sharding.auto = True
    if metrics_address is not None:
        settings.metrics.address = metrics_address
    if standalone is not None:
        settings.peering.standalone = standalone
    if priority is not None:
        settings.peering.priority = priority
    memo = memo if memo is not None else Memo()
    loop = asyncio.get_running_loop()
    engine = _engine.Operator()
    # Empty until the core fills them: even startup handlers get them (as in Kopf).
    indices: dict[str, Index[Any, Any]] = {h.id: Index(engine.index(h.id)) for h in registry._indexing}
    engine_var.set(engine)
    settings_var.set(settings)

    stop = loop.create_future()
    _install_signals(loop, stop)
    watchers = [asyncio.create_task(_wait_flag(stop_flag), name='stop-flag')] if stop_flag is not None else []

    engine_task: asyncio.Task[None] | None = None
    admission_task: asyncio.Task[None] | None = None
    bridge: Bridge | None = None
    started = False
    try:
        # A signal or the stop-flag stops the operator in its startup or login too, as in
        # Kopf: a startup handler retried forever must not keep it from exiting.
        startup = asyncio.create_task(run_activity(registry=registry, settings=settings, activity=Activity.STARTUP,
                                                   memo=memo, indices=indices), name='startup activity')
        if not await _unless_stopped(startup, stop, watchers):
            logger.warning("Startup activity is only partially executed due to cancellation.")
            return  # (no cleanup activity after a startup that has not finished, as in Kopf)
        started = True
        _webhooks.serve_as_olm_configures(settings)
        login = asyncio.create_task(authenticate(registry=registry, settings=settings, memo=memo,
                                                 indices=indices), name='initial authentication')
        if not await _unless_stopped(login, stop, watchers):
            return
        connection = login.result()
        ready = asyncio.Event()
        bridge = Bridge(registry=registry, settings=settings, memo=memo, ready=ready, loop=loop,
                        lifecycle=lifecycle, indices=indices)
        storages: list[Any] = []  # the custom ones, called as Python from the engine
        engine_settings = settings.for_engine(storages)
        engine_settings['peering']['identity'] = str(identity or detect_own_id(manual=False))
        engine_settings['leadership']['lease_namespace'] = _lease_namespace(settings, namespaces)
        spec = {**bridge.spec(), 'namespaces': list(namespaces), 'settings': engine_settings,
                'lifecycle': lifecycles.engine_name(lifecycle),
                'liveness_endpoint': liveness_endpoint,
                'admission_managed': settings.admission.managed}
        _webhooks.check_configured(settings.admission.server, registry._webhooks, registry._conversions)
        _check_sharding(settings)
        _check_posting(settings)
        _check_conversion(settings)
        _webhooks.connection_var.set(connection)
        running = engine.run(json.dumps(spec), json.dumps(connection), bridge, storages)
        engine_task = asyncio.create_task(_as_coroutine(running))
        ready_task = asyncio.create_task(ready.wait())
        waiting: set[asyncio.Future[Any]] = {stop, engine_task, ready_task, *watchers}
        # As Kopf: a configured server runs (and its managed configurations are kept) even
        # with no admission handlers yet.
        if registry._webhooks or registry._conversions or settings.admission.server is not None:
            admission_task = asyncio.create_task(_webhooks.serve(settings.admission.server, engine),
                                                 name='admission webhook server')
            waiting.add(admission_task)
        while True:
            done, _ = await asyncio.wait(waiting, return_when=asyncio.FIRST_COMPLETED)
            if ready_task in done:
                waiting.discard(ready_task)
                _raise_flag(ready_flag)
            if admission_task is not None and admission_task in done:
                try:
                    admission_task.result()
                except Exception as e:
                    logger.error(f"The admission webhook server has failed: {e!r}")
                    raise
                waiting.discard(admission_task)  # the server has ended by itself: nothing to serve
            if engine_task in done:
                try:
                    engine_task.result()
                except RuntimeError as e:  # the core's errors come as RuntimeError
                    raise OperatorError(str(e)) from None
                break
            if _stopping(done, stop, watchers):
                break
    finally:
        engine.stop()
        if engine_task is not None and not engine_task.done():
            await asyncio.wait({engine_task}, timeout=settings.process.ultimate_exiting_timeout)
        # The webhooks are served until the core has stopped: its last requests may need its
        # own conversions (and reviews keep being answered while its workers finish).
        if admission_task is not None and not admission_task.done():
            admission_task.cancel()  # stops listening (the core has cleaned up the managed webhooks)
            await asyncio.wait({admission_task})
        if bridge is not None:
            bridge.detach()
        for task in watchers:
            task.cancel()
        _uninstall_signals(loop)
        try:
            if started:
                await run_activity(registry=registry, settings=settings, activity=Activity.CLEANUP, memo=memo,
                                   indices=indices)
            # Kopf's last words, which tools (and Kopf's own tests) wait for.
            logger.debug("Root tasks are stopped: finishing normally; tasks left: set()")
            await _stop_hung_tasks(bridge.running_calls() if bridge is not None else set())
        finally:
            _raise_flag(ready_flag)  # if never ready, do not leave the waiters hanging


def _stopping(done: Collection[asyncio.Future[Any]], stop: asyncio.Future[Any],
              watchers: Collection[asyncio.Task[Any]]) -> bool:
    """Whether a signal or the stop-flag is among the finished; if so, say so as Kopf does."""
    if stop in done:
        logger.info(f"Signal {stop.result().name!s} is received. Operator is stopping.")
        return True
    if any(w in done for w in watchers):
        # As Kopf says it: by the flag's value (a future's result, an event's True).
        value = next(w for w in watchers if w in done).result()
        if value is None:
            logger.info("Stop-flag is raised. Operator is stopping.")
        elif isinstance(value, signal.Signals):
            logger.info(f"Signal {value.name!s} is received. Operator is stopping.")
        else:
            logger.info(f"Stop-flag is set to {value!r}. Operator is stopping.")
        return True
    return False


async def _unless_stopped(task: asyncio.Task[Any], stop: asyncio.Future[Any],
                          watchers: Collection[asyncio.Task[Any]]) -> bool:
    """Wait for the task, unless a signal or the stop-flag comes first: then it is cancelled
    (and awaited). Whether the task has finished; its errors are raised."""
    try:
        done, _ = await asyncio.wait({task, stop, *watchers}, return_when=asyncio.FIRST_COMPLETED)
    except asyncio.CancelledError:  # the operator itself is cancelled (embedded): the task with it
        task.cancel()
        raise
    if task in done:
        task.result()
        return True
    _stopping(done, stop, watchers)
    task.cancel()
    await asyncio.wait({task})
    return False


async def _stop_hung_tasks(tasks: set[asyncio.Task[None]]) -> None:
    """Handler calls still running after the core has stopped (e.g. abandoned daemons):
    5 seconds to finish, then cancelled; said as Kopf says it."""
    pending: set[asyncio.Task[None]] = set()
    if tasks:
        _, pending = await asyncio.wait(tasks, timeout=5)
    if not pending:
        logger.debug("Hung tasks stopping is skipped: no tasks given.")
        return
    for task in pending:
        task.cancel()
    while pending:
        _, pending = await asyncio.wait(pending, timeout=1)
        are = 'are' if not pending else 'are not'
        logger.debug(f"Hung tasks {are} stopped: finishing normally; tasks left: {pending!r}")


async def _as_coroutine(awaitable: Any) -> None:
    await awaitable


def _install_signals(loop: asyncio.AbstractEventLoop, stop: asyncio.Future[Any]) -> None:
    if threading.current_thread() is not threading.main_thread():
        logger.warning("OS signals are ignored: running not in the main thread.")
        return
    def received(sig: signal.Signals) -> None:
        if not stop.done():
            stop.set_result(sig)

    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, received, sig)


def _uninstall_signals(loop: asyncio.AbstractEventLoop) -> None:
    if threading.current_thread() is threading.main_thread():
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.remove_signal_handler(sig)


async def spawn_tasks(**kwargs: Any) -> list[asyncio.Task[None]]:
    """The operator as tasks to await (with ``run_tasks()``); it takes ``operator()``'s arguments."""
    return [asyncio.create_task(operator(**kwargs), name='kopf operator')]


async def run_tasks(root_tasks: Collection[asyncio.Task[Any]], *, ignored: Collection[asyncio.Task[Any]] = ()) -> None:
    """Await the tasks from ``spawn_tasks()``; cancel the others when one ends or fails."""
    pending = {task for task in root_tasks if task not in ignored}
    try:
        done, pending = await asyncio.wait(pending, return_when=asyncio.FIRST_COMPLETED)
        for task in done:
            task.result()
    finally:
        for task in pending:
            task.cancel()
        if pending:
            await asyncio.wait(pending)


def run(
        *,
        loop: asyncio.AbstractEventLoop | None = None,
        lifecycle: Any = None,
        indexers: Any = None,
        registry: OperatorRegistry | None = None,
        settings: OperatorSettings | None = None,
        memories: Any = None,
        insights: Any = None,
        identity: Any = None,
        standalone: bool | None = None,
        priority: int | None = None,
        peering_name: str | None = None,
        liveness_endpoint: str | None = None,
        clusterwide: bool = False,
        namespaces: Collection[str] = (),
        namespace: str | None = None,
        stop_flag: Flag | None = None,
        ready_flag: Flag | None = None,
        vault: Any = None,
        memo: object | None = None,
        _command: Coroutine[None, None, None] | None = None,
) -> None:
    """Run the operator synchronously, in the given loop or a new one, until it is stopped."""
    coro = operator(
        lifecycle=lifecycle, indexers=indexers, registry=registry, settings=settings, memories=memories,
        insights=insights, identity=identity, standalone=standalone, priority=priority,
        peering_name=peering_name, liveness_endpoint=liveness_endpoint, clusterwide=clusterwide,
        namespaces=namespaces, namespace=namespace, stop_flag=stop_flag, ready_flag=ready_flag,
        vault=vault, memo=memo, _command=_command,
    )
    if loop is not None:
        loop.run_until_complete(coro)
    else:
        asyncio.run(coro)
