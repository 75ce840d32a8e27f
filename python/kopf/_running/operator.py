"""The operator's life: activities (startup, login, cleanup) and the core's run, until a
signal or a flag stops it (``stopping``). ``kopf.run()`` for scripts, ``kopf.operator()`` for embedding."""

from __future__ import annotations

import asyncio
import json
import logging
import os
import re
import warnings
from collections.abc import Collection, Coroutine
from typing import Any

from kopf._bridge import services
from kopf._connecting import webhooks as _webhooks
from kopf._connecting.peering import detect_own_id
from kopf._handling import lifecycles as lifecycles
from kopf._handling.activities import authenticate, run_activity
from kopf._handling.handlers import Activity, OperatorRegistry, get_default_registry
from kopf._logs.posting import engine_var, settings_var
from kopf._running import stopping
from kopf._running.calls import Bridge
from kopf._running.patience import Patience
from kopf._running.stopping import Flag
from kopf._structures.errors import LoginError, OperatorError
from kopf._structures.indices import Index
from kopf._structures.settings import OperatorSettings, posting_level
from kopf._structures.structs import Memo

logger = logging.getLogger('kopf._core.reactor.running')



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
        traces_endpoint: str | None = None,
        traces_ratio: float | None = None,
        liveness_endpoint: str | None = None,
        clusterwide: bool = False,
        namespaces: Collection[str] = (),
        namespace: str | None = None,
        stop_flag: Flag | None = None,
        ready_flag: Flag | None = None,
        vault: Any = None,
        memo: object | None = None,
        _command: Coroutine[None, None, None] | None = None,
        _simulation: Any = None,
) -> None:
    """Run an operator in the current asyncio loop until it is stopped (by a signal or ``stop_flag``)."""
    clusterwide, namespaces = _scope(clusterwide=clusterwide, namespaces=namespaces, namespace=namespace)
    _refuse_shared_state(indexers=indexers, memories=memories, insights=insights, vault=vault, _command=_command)
    settings = _settings_with(
        settings if settings is not None else OperatorSettings(),
        clusterwide=clusterwide, peering_name=peering_name, lease_name=lease_name, shards=shards,
        metrics_address=metrics_address, traces_endpoint=traces_endpoint, traces_ratio=traces_ratio,
        standalone=standalone, priority=priority)
    life = _Life(
        registry=registry if registry is not None else get_default_registry(),
        lifecycle=lifecycle if lifecycle is not None else lifecycles.get_default_lifecycle(),
        settings=settings, memo=memo if memo is not None else Memo(),
        stop_flag=stop_flag, ready_flag=ready_flag, simulation=_simulation)
    await life.run(identity=identity, namespaces=namespaces, liveness_endpoint=liveness_endpoint)


def _scope(*, clusterwide: bool, namespaces: Collection[str], namespace: str | None) -> tuple[bool, Collection[str]]:
    """Cluster-wide or the namespaces' patterns, from the arguments as Kopf takes them."""
    if namespaces and namespace:
        raise TypeError("Either namespaces= or namespace= can be passed. Got both.")
    if namespace:
        warnings.warn("namespace= is deprecated; use namespaces=[...]", DeprecationWarning, stacklevel=3)
        namespaces = [namespace]
    if clusterwide and namespaces:
        raise TypeError("The operator can be either cluster-wide or namespaced, not both.")
    if not clusterwide and not namespaces:
        warnings.warn("Absence of either namespaces or cluster-wide flag will become an error soon."
                      " For now, switching to the cluster-wide mode for backward compatibility.",
                      FutureWarning, stacklevel=1)  # located in kopf's own code, as Kopf's is (not in asyncio's)
        clusterwide = True
    return clusterwide, namespaces


def _refuse_shared_state(**given: Any) -> None:
    """Kopf's internal state objects, for sharing it with an embedding program: this engine keeps
    that state in its core, so none can be given (rather than taken and silently not used)."""
    instead = {
        'indexers': "the indices are read in handlers, as kwargs named by the @kopf.index ids",
        'memories': "the objects' memos are the `memo` kwarg of handlers",
        'insights': "the served resources and namespaces are not shared",
        'vault': "the credentials come from the @kopf.on.login handlers",
        '_command': "run the coroutine as a task beside the operator",
    }
    for name, value in given.items():
        if value is not None:
            raise TypeError(f"{name}= is not supported by this engine (kopf-rs), which keeps the "
                            f"operator's state in its core: {instead[name]}.")


def _settings_with(settings: OperatorSettings, *, clusterwide: bool, peering_name: str | None,
                   lease_name: str | None, shards: str | None, metrics_address: str | None,
                   traces_endpoint: str | None, traces_ratio: float | None,
                   standalone: bool | None, priority: int | None) -> OperatorSettings:
    """The settings with the operator's arguments (the CLI's options) put in them."""
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
    if traces_endpoint is not None:
        settings.tracing.endpoint = traces_endpoint
    if traces_ratio is not None:
        settings.tracing.ratio = traces_ratio
    if standalone is not None:
        settings.peering.standalone = standalone
    if priority is not None:
        settings.peering.priority = priority
    return settings


def _check_settings(settings: OperatorSettings, registry: OperatorRegistry) -> None:
    """What the settings contradict, refused before the core starts."""
    _webhooks.check_configured(settings.admission.server, registry._webhooks, registry._conversions)
    _check_sharding(settings)
    _check_posting(settings)
    _check_conversion(settings)


class _Life:
    """One run of an operator, step by step: the startup activity, the login, the core (and the
    webhook server) started and followed until a stop, then the cleanup activity."""

    def __init__(self, *, registry: OperatorRegistry, lifecycle: Any, settings: OperatorSettings,
                 memo: Any, stop_flag: Flag | None, ready_flag: Flag | None, simulation: Any = None) -> None:
        self.registry = registry
        self.simulation = simulation  # `kopf.testing.Simulation`'s API: the core runs on its clock
        self.lifecycle = lifecycle
        self.settings = settings
        self.memo = memo
        self.ready_flag = ready_flag
        self.loop = asyncio.get_running_loop()
        self.engine = services.Operator()
        # Empty until the core fills them: even startup handlers get them (as in Kopf).
        self.indices: dict[str, Index[Any, Any]] = {
            h.id: Index(self.engine.index(h.id)) for h in registry._indexing}
        engine_var.set(self.engine)
        settings_var.set(settings)
        self.stop: asyncio.Future[Any] = self.loop.create_future()
        self.watchers = ([asyncio.create_task(stopping.wait_flag(stop_flag), name='stop-flag')]
                         if stop_flag is not None else [])
        self.engine_task: asyncio.Task[None] | None = None
        self.admission_task: asyncio.Task[None] | None = None
        self.bridge: Bridge | None = None
        self.started = False
        # Until the core watches its resources: what the start waits for, said every minute.
        self.patience = Patience(self._activity('the startup handlers', Activity.STARTUP))

    async def run(self, *, identity: Any, namespaces: Collection[str], liveness_endpoint: str | None) -> None:
        """The whole life; the cleanup activity runs if the startup activity has finished."""
        stopping.install_signals(self.loop, self.stop)
        try:
            # A signal or the stop-flag stops the operator in its startup or login too, as in
            # Kopf: a startup handler retried forever must not keep it from exiting.
            if not await self._startup():
                return
            self.patience.waiting_for(self._activity('the login', Activity.AUTHENTICATION))
            connection = await self._login()
            if connection is None:
                return
            ready = self._launch(connection, identity=identity, namespaces=namespaces,
                                 liveness_endpoint=liveness_endpoint)
            self.patience.waiting_for("the engine's start (the API's discovery, the CRDs, the peering)")
            await self._follow(ready)
        finally:
            self.patience.over()
            await self._finish()

    def _activity(self, what: str, activity: Activity) -> str:
        """What a stage waits for, with its handlers' names (``the startup handlers: configure``)."""
        names = [h.id for h in self.registry._activities if h.activity == activity]
        return f"{what} ({', '.join(names)})" if names else what

    async def _startup(self) -> bool:
        startup = asyncio.create_task(run_activity(
            registry=self.registry, settings=self.settings, activity=Activity.STARTUP, memo=self.memo,
            indices=self.indices), name='startup activity')
        if not await stopping.unless_stopped(startup, self.stop, self.watchers):
            logger.warning("Startup activity is only partially executed due to cancellation.")
            return False  # (no cleanup activity after a startup that has not finished, as in Kopf)
        self.started = True
        _webhooks.serve_as_installed(self.settings)
        return True

    async def _login(self) -> Any:
        """The connection info from the login handlers; ``None`` if stopped meanwhile."""
        login = asyncio.create_task(authenticate(
            registry=self.registry, settings=self.settings, memo=self.memo, indices=self.indices),
            name='initial authentication')
        if not await stopping.unless_stopped(login, self.stop, self.watchers):
            return None
        connection = login.result()
        if self.simulation is not None and connection.get('server') != self.simulation.url:
            # Never a real cluster's credentials on the simulated API, nor a test on a real cluster.
            raise LoginError(f"The login handlers connect to {connection.get('server')!r}, not to the simulated "
                             f"API at {self.simulation.url!r}: a simulation never reaches another cluster.")
        return connection

    def _launch(self, connection: Any, *, identity: Any, namespaces: Collection[str],
                liveness_endpoint: str | None) -> asyncio.Event:
        """The core started with the handlers' spec, and the webhook server beside it (if any);
        the event the core sets once all its watchers are started."""
        settings, registry = self.settings, self.registry
        ready = asyncio.Event()
        self.bridge = Bridge(registry=registry, settings=settings, memo=self.memo, ready=ready, loop=self.loop,
                             lifecycle=self.lifecycle, indices=self.indices)
        storages: list[Any] = []  # the custom ones, called as Python from the engine
        self.patience.waiting_for("the settings to be read")
        engine_settings = settings.for_engine(storages)
        settings.mark_read()  # later changes to what the core read now are warned about
        engine_settings['peering']['identity'] = str(identity or detect_own_id(manual=False))
        engine_settings['leadership']['lease_namespace'] = _lease_namespace(settings, namespaces)
        spec = {**self.bridge.spec(), 'namespaces': list(namespaces), 'settings': engine_settings,
                'lifecycle': lifecycles.engine_name(self.lifecycle),
                'liveness_endpoint': liveness_endpoint,
                'admission_managed': settings.admission.managed}
        _check_settings(settings, registry)
        _webhooks.connection_var.set(connection)
        running = self.engine.run(json.dumps(spec), json.dumps(connection), self.bridge, storages,
                                  self.simulation)
        self.engine_task = asyncio.create_task(_as_coroutine(running))
        # As Kopf: a configured server runs (and its managed configurations are kept) even
        # with no admission handlers yet.
        if registry._webhooks or registry._conversions or settings.admission.server is not None:
            self.admission_task = asyncio.create_task(_webhooks.serve(settings.admission.server, self.engine),
                                                      name='admission webhook server')
        return ready

    async def _follow(self, ready: asyncio.Event) -> None:
        """Until the core ends (its error raised), or a signal or the stop-flag comes; the
        ready-flag is raised once the core is ready."""
        assert self.engine_task is not None
        ready_task = asyncio.create_task(ready.wait())
        waiting: set[asyncio.Future[Any]] = {self.stop, self.engine_task, ready_task, *self.watchers}
        if self.admission_task is not None:
            waiting.add(self.admission_task)
        while True:
            done, _ = await asyncio.wait(waiting, return_when=asyncio.FIRST_COMPLETED)
            if ready_task in done:
                waiting.discard(ready_task)
                self.patience.over()
                stopping.raise_flag(self.ready_flag)
            if self.admission_task is not None and self.admission_task in done:
                try:
                    self.admission_task.result()
                except Exception as e:
                    logger.error(f"The admission webhook server has failed: {e!r}")
                    raise
                waiting.discard(self.admission_task)  # the server has ended by itself: nothing to serve
            if self.engine_task in done:
                try:
                    self.engine_task.result()
                except RuntimeError as e:  # the core's errors come as RuntimeError
                    raise OperatorError(str(e)) from None
                break
            if stopping.stopping(done, self.stop, self.watchers):
                break

    async def _finish(self) -> None:
        """The core stopped, then the webhook server, then the cleanup activity."""
        self.engine.stop()
        self.settings.mark_read(False)  # a next run reads them anew
        if self.engine_task is not None and not self.engine_task.done():
            await asyncio.wait({self.engine_task}, timeout=self.settings.process.ultimate_exiting_timeout)
        # The webhooks are served until the core has stopped: its last requests may need its
        # own conversions (and reviews keep being answered while its workers finish).
        if self.admission_task is not None and not self.admission_task.done():
            self.admission_task.cancel()  # stops listening (the core has cleaned up the managed webhooks)
            await asyncio.wait({self.admission_task})
        if self.bridge is not None:
            self.bridge.detach()
        for task in self.watchers:
            task.cancel()
        stopping.uninstall_signals(self.loop)
        try:
            if self.started:
                await run_activity(registry=self.registry, settings=self.settings, activity=Activity.CLEANUP,
                                   memo=self.memo, indices=self.indices)
            # Kopf's last words, which tools (and Kopf's own tests) wait for.
            logger.debug("Root tasks are stopped: finishing normally; tasks left: set()")
            await stopping.stop_hung_tasks(self.bridge.running_calls() if self.bridge is not None else set())
        finally:
            stopping.raise_flag(self.ready_flag)  # if never ready, do not leave the waiters hanging


async def _as_coroutine(awaitable: Any) -> None:
    await awaitable


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
