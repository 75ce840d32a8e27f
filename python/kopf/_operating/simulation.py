"""Handler tests in milliseconds (``kopf.testing.Simulation``): the real engine runs an
operator's handlers against a simulated Kubernetes API, in memory, on a virtual clock that
moves only when the test says so."""

from __future__ import annotations

import asyncio
import builtins
import contextlib
import json
import os
import sys
import tempfile
import types
import urllib.parse
from collections.abc import Awaitable, Collection, Coroutine, Iterable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kopf._bridge import services
from kopf._handling.handlers import OperatorRegistry, SmartOperatorRegistry, get_default_registry, set_default_registry
from kopf._operating import loading
from kopf._structures.settings import OperatorSettings

if TYPE_CHECKING:
    from kopf._bridge.services import Simulation as _EngineSimulation

# How long (in real time) the operator may take to start: its startup and login activities,
# the API's discovery, the first listings.
STARTUP_TIMEOUT = 60.0

# What the clients read to find a cluster: a kubeconfig, and a pod's API server.
ENVIRON = ('KUBECONFIG', 'KUBERNETES_SERVICE_HOST', 'KUBERNETES_SERVICE_PORT')

# Clients that read $KUBECONFIG once, when imported, into a default that `load_kube_config()`
# uses: imported before the simulation, they would find another cluster (or a file gone).
DEFAULTS = {module: 'KUBE_CONFIG_DEFAULT_LOCATION' for module in (
    'kubernetes.config', 'kubernetes.config.kube_config',
    'kubernetes_asyncio.config', 'kubernetes_asyncio.config.kube_config')}


class SimulatedApiError(Exception):
    """The simulated API has refused a test's request, as a real API server would (with the
    status code ``status`` and the reason ``reason``, e.g. 404 ``NotFound``)."""

    def __init__(self, status: int, reason: str, message: str) -> None:
        super().__init__(f"{status} {reason}: {message}")
        self.status = status
        self.reason = reason
        self.message = message


class SimulatedObjects:
    """The objects of a simulated API, read and written by a test without HTTP, and the
    failures it asks for: what ``Simulation`` and ``SyncSimulation`` share."""

    _api: _EngineSimulation

    @property
    def url(self) -> str:
        """The simulated API's URL (plain HTTP on 127.0.0.1), for clients of the test's own."""
        return self._api.url

    @property
    def now(self) -> float:
        """Seconds of virtual time since the simulation started."""
        return self._api.now()

    def fail(self, path: str = '', *, method: str | None = None, status: int = 500,
             retry_after: int | None = None, times: int | None = 1) -> None:
        """Fail the requests to come that match, as the API server fails (for the engine's and
        the handlers' requests, not for the test's own): e.g. a conflict of a patch, a 429
        with ``Retry-After``, a server error.

        :param path: a part of the requests' path and query that they must contain
            (``/greetings/g1``, ``watch=true``); all requests if empty.
        :param method: only requests of this method (``PATCH``, ``GET``, ...); any if ``None``.
        :param status: the status code to answer with (400 to 599).
        :param retry_after: the ``Retry-After`` header to send, in seconds.
        :param times: how many requests to fail; all of them (until ``heal()``) if ``None``.
        """
        self._api.fail(method, path, status, retry_after, times)

    def heal(self) -> None:
        """Fail no more requests (the failures that ``fail()`` asked for and that are left)."""
        self._api.heal()

    def cut_watches(self, *, expire: bool = False) -> None:
        """End every watch now, as an API server does at a timeout or a restart: the engine
        watches again from where it was. With ``expire``, the versions before now are gone
        too (410 Gone, as after etcd's compaction): the engine lists its resources again.

        :param expire: make the versions before now too old to watch from.
        """
        self._api.cut_watches(expire)

    def create(self, body: Mapping[str, Any], *, namespace: str | None = None) -> dict[str, Any]:
        """Create an object (a CRD serves its resource at once); the object as created.

        :param body: the object, with its ``apiVersion``, ``kind`` and ``metadata.name``
            (or ``generateName``).
        :param namespace: its namespace, if the body has none (``default`` if neither has).
        """
        resource = self._resource_of(body)
        metadata = body.get('metadata', {})
        namespace = metadata.get('namespace') or namespace or ('default' if resource.namespaced else None)
        body = {**body, 'metadata': {**metadata, **({'namespace': namespace} if resource.namespaced else {})}}
        return self._request('POST', resource.path(namespace), body)

    def get(self, resource: str, name: str, *, namespace: str | None = None) -> dict[str, Any] | None:
        """The object as it is now; ``None`` if there is none.

        :param resource: its resource: a plural (``configmaps``), with its group
            (``greetings.demo.kopf.dev``), or a kind (``Greeting``).
        :param name: its name.
        :param namespace: its namespace (``default`` for namespaced resources if not given).
        """
        found = self._find(resource)
        try:
            return self._request('GET', found.path(self._namespace(found, namespace), name))
        except SimulatedApiError as e:
            if e.status == 404:
                return None
            raise

    def list(self, resource: str, *, namespace: str | None = None) -> builtins.list[dict[str, Any]]:
        """The objects of a resource: in one namespace, or in all of them (no namespace).

        :param resource: as for ``get()``.
        :param namespace: the namespace, or ``None`` for all.
        """
        found = self._find(resource)
        return builtins.list(self._request('GET', found.path(namespace if found.namespaced else None))['items'])

    def patch(self, resource: str, name: str, patch: Mapping[str, Any], *, namespace: str | None = None,
              subresource: str | None = None) -> dict[str, Any]:
        """Change an object with a merge-patch (as ``kubectl patch --type=merge``); as it is after.

        :param resource: as for ``get()``.
        :param name: its name.
        :param patch: the merge-patch (``None`` values remove the keys).
        :param namespace: as for ``get()``.
        :param subresource: ``status`` to patch the status subresource.
        """
        found = self._find(resource)
        path = found.path(self._namespace(found, namespace), name) + (f'/{subresource}' if subresource else '')
        return self._request('PATCH', path, patch, content_type='application/merge-patch+json')

    def delete(self, resource: str, name: str, *, namespace: str | None = None) -> dict[str, Any]:
        """Delete an object: gone at once, or marked for deletion while it has finalizers.

        :param resource: as for ``get()``.
        :param name: its name.
        :param namespace: as for ``get()``.
        """
        found = self._find(resource)
        return self._request('DELETE', found.path(self._namespace(found, namespace), name))

    def events(self, *, namespace: str | None = None, name: str | None = None) -> builtins.list[dict[str, Any]]:
        """The Kubernetes Events posted so far (``kopf.info()`` and the like), oldest first.

        :param namespace: only those in this namespace (all if not given).
        :param name: only those about the object of this name.
        """
        events = self.list('events', namespace=namespace)
        return [e for e in events if name is None or e.get('involvedObject', {}).get('name') == name]

    def _namespace(self, resource: _Resource, namespace: str | None) -> str | None:
        return (namespace or 'default') if resource.namespaced else None

    def _request(self, method: str, path: str, body: Any = None, *,
                 content_type: str = 'application/json') -> dict[str, Any]:
        text = None if body is None else json.dumps(body)
        status, answer = self._api.request(method, path, text, content_type)
        document: dict[str, Any] = json.loads(answer)
        if status >= 400:
            raise SimulatedApiError(status, document.get('reason', ''), document.get('message', ''))
        return document

    def _resources(self) -> builtins.list[_Resource]:
        found = []
        groups = [('', 'v1')] + [(group['name'], version['version'])
                                 for group in self._request('GET', '/apis')['groups']
                                 for version in group['versions']]
        for group, version in groups:
            prefix = f'/apis/{group}/{version}' if group else f'/api/{version}'
            for item in self._request('GET', prefix)['resources']:
                if '/' not in item['name']:
                    found.append(_Resource(group, version, item['name'], item['kind'], item['namespaced']))
        return found

    def _find(self, spec: str) -> _Resource:
        matching = [r for r in self._resources() if spec in r.names]
        if not matching:
            raise SimulatedApiError(404, 'NotFound', f"the simulated API serves no resource {spec!r}")
        # As kubectl: the core group's resource first (`events`, not `events.events.k8s.io`).
        return min(matching, key=lambda r: r.group != '')

    def _resource_of(self, body: Mapping[str, Any]) -> _Resource:
        api_version, kind = body.get('apiVersion', ''), body.get('kind', '')
        group, _, version = api_version.rpartition('/')
        for resource in self._resources():
            if (resource.group, resource.version, resource.kind) == (group, version, kind):
                return resource
        raise SimulatedApiError(404, 'NotFound', f"the simulated API serves no {kind!r} in {api_version!r}")


class Simulation(SimulatedObjects):
    """An operator's handlers, run by the real engine against a simulated API on a virtual clock.

    The API keeps its objects in memory and serves them as an API server does: versions,
    generations, the status subresource, finalizers and deletion timestamps, owner references
    and garbage collection, watches. The clock stands still while the test does its steps;
    ``await sim.settle()`` lets all that is pending happen, ``await sim.advance(3600)`` lets an
    hour pass (the timers, the retries' delays and backoffs due meanwhile fire in order), in
    milliseconds of real time::

        async with kopf.testing.Simulation(paths=['handlers.py']) as sim:
            sim.create({'apiVersion': 'v1', 'kind': 'ConfigMap', 'metadata': {'name': 'c1'}})
            await sim.settle()
            assert sim.get('configmaps', 'c1', namespace='default')['metadata']['annotations']

    The simulated API starts when the simulation is made; the operator starts when it is
    entered (``async with``), and stops when it is left. Create the CRDs before entering.

    While entered, ``KUBECONFIG`` names a kubeconfig of the simulated API, and a pod's API
    server is not in the environment (both restored after): the login handlers, and the
    handlers' own clients, find the simulated API as they find a cluster. An operator whose
    login handlers connect elsewhere fails to start.

    :param paths: the operator's files to load (as ``kopf run`` does), into ``registry``.
    :param modules: the operator's modules to import, into ``registry``.
    :param registry: the handlers; a fresh one for ``paths`` and ``modules``, or else the
        default registry (the handlers imported by the test module itself).
    :param settings: the operator's settings (a fresh ``OperatorSettings`` if not given).
    :param namespaces: the namespaces to serve (patterns, as ``kopf run -n``).
    :param clusterwide: serve all namespaces (the default if no namespaces are given).
    :param stuck_after: how many seconds of real time a daemon may run without waiting in
        ``stopped.wait()`` (which lets the clock move) before ``settle()`` and ``advance()``
        fail: a daemon that sleeps by ``time.sleep()`` or ``asyncio.sleep()`` holds the
        virtual clock, and the test would wait for ever.
    """

    def __init__(
            self,
            *,
            paths: Iterable[str | os.PathLike[str]] = (),
            modules: Iterable[str] = (),
            registry: OperatorRegistry | None = None,
            settings: OperatorSettings | None = None,
            namespaces: Collection[str] = (),
            clusterwide: bool = False,
            stuck_after: float = 10.0,
    ) -> None:
        if not stuck_after > 0:
            raise ValueError(f"A daemon may hold the clock for some seconds, not for {stuck_after!r}.")
        self._stuck_after = float(stuck_after)
        self._paths = [os.fspath(path) for path in paths]
        self._modules = list(modules)
        self._registry = registry
        self._settings = settings if settings is not None else OperatorSettings()
        self._namespaces = list(namespaces)
        self._clusterwide = clusterwide or not namespaces
        self._api = services.start_simulation(0)
        self._stop: asyncio.Event | None = None
        self._task: asyncio.Task[None] | None = None
        self._folder: tempfile.TemporaryDirectory[str] | None = None
        self._environ_before: dict[str, str | None] = {}
        self._defaults_before: dict[str, Any] = {}

    async def __aenter__(self) -> Simulation:
        self._folder = tempfile.TemporaryDirectory(prefix='kopf-simulation-')
        kubeconfig = Path(self._folder.name) / 'kubeconfig'
        kubeconfig.write_text(json.dumps({
            'apiVersion': 'v1', 'kind': 'Config', 'current-context': 'simulation',
            'clusters': [{'name': 'simulation', 'cluster': {'server': self.url}}],
            'users': [{'name': 'simulation', 'user': {}}],
            'contexts': [{'name': 'simulation', 'context': {'cluster': 'simulation', 'user': 'simulation'}}]}))
        # The handlers' clients find the simulated API, and no cluster of a pod the test runs in.
        self._environ_before = {name: os.environ.get(name) for name in ENVIRON}
        for name in ENVIRON:
            os.environ.pop(name, None)
        os.environ['KUBECONFIG'] = str(kubeconfig)
        self._defaults_before = {module: getattr(sys.modules[module], name) for module, name in DEFAULTS.items()
                                 if hasattr(sys.modules.get(module), name)}
        for module in self._defaults_before:
            setattr(sys.modules[module], DEFAULTS[module], str(kubeconfig))
        try:
            registry = self._load()
            await self._start(registry)
        except BaseException:
            await self._finish()
            raise
        return self

    async def __aexit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                        tb: types.TracebackType | None) -> None:
        await self._finish()

    def _load(self) -> OperatorRegistry:
        if not self._paths and not self._modules:
            return self._registry if self._registry is not None else get_default_registry()
        registry = self._registry if self._registry is not None else SmartOperatorRegistry()
        default = get_default_registry()
        set_default_registry(registry)
        try:
            loading.preload(self._paths, self._modules)
        finally:
            set_default_registry(default)
        return registry

    async def _start(self, registry: OperatorRegistry) -> None:
        from kopf._running.operator import operator  # (the engine's run, loaded when needed)
        self._stop = asyncio.Event()
        ready = asyncio.Event()
        self._task = asyncio.create_task(operator(
            registry=registry, settings=self._settings, standalone=True,
            clusterwide=self._clusterwide, namespaces=self._namespaces,
            stop_flag=self._stop, ready_flag=ready, _simulation=self._api), name='simulated operator')
        readiness = asyncio.create_task(ready.wait())
        done, _ = await asyncio.wait({self._task, readiness}, timeout=STARTUP_TIMEOUT,
                                     return_when=asyncio.FIRST_COMPLETED)
        if self._task in done:
            readiness.cancel()
            self._task.result()  # its error, if any
            raise RuntimeError("The simulated operator has exited during its startup.")
        if not done:
            readiness.cancel()
            raise TimeoutError(f"The simulated operator has not started in {STARTUP_TIMEOUT} seconds.")
        await self.settle()

    async def _finish(self) -> None:
        try:
            if self._task is not None and self._stop is not None:
                self._api.release()  # its stop's timeouts pass in virtual time, at once
                self._stop.set()
                with contextlib.suppress(asyncio.CancelledError):
                    # A daemon that never waits for its stop is let go of (its test fails
                    # in settle() or advance(), or has failed already): the stop goes on.
                    while not (await asyncio.wait({self._task}, timeout=self._stuck_check))[0]:
                        self._api.stuck(self._stuck_after)
                    await self._task
        finally:
            self._task = None
            self._api.stop()
            for name, value in self._environ_before.items():
                if value is None:
                    os.environ.pop(name, None)
                else:
                    os.environ[name] = value
            if self._environ_before:
                # Those imported meanwhile hold the simulation's: as if imported now, then.
                for module, name in DEFAULTS.items():
                    if hasattr(sys.modules.get(module), name):
                        now = os.environ.get('KUBECONFIG', '~/.kube/config')
                        setattr(sys.modules[module], name, self._defaults_before.get(module, now))
            self._environ_before, self._defaults_before = {}, {}
            if self._folder is not None:
                self._folder.cleanup()
                self._folder = None

    async def settle(self) -> None:
        """Let all that is pending happen: events, handlers, their patches and what those
        cause, until nothing is left but to wait for a later time. The clock moves by its
        resolution (a millisecond) at most."""
        await self._clocked(self._api.settle())

    async def advance(self, seconds: float) -> None:
        """Let ``seconds`` of virtual time pass: the timers, the handlers' delays and the
        retries due meanwhile run in order, each once what came before it is done; then
        what is pending at the end settles (see ``settle()``).

        :param seconds: how far to move the clock (not backwards).
        """
        await self._clocked(self._api.advance(seconds))

    @property
    def _stuck_check(self) -> float:
        return min(1.0, self._stuck_after / 4)

    async def _clocked(self, moving: Awaitable[None]) -> None:
        """Wait for the clock's move, unless a daemon holds the clock still too long."""
        task = asyncio.ensure_future(moving)
        while not (await asyncio.wait({task}, timeout=self._stuck_check))[0]:
            stuck = self._api.stuck(self._stuck_after)
            if stuck is not None:
                # (The daemon is let go of: the clock moves again, the operator can still stop.)
                raise RuntimeError(
                    f"{stuck} has held the virtual clock for {self._stuck_after:g} seconds of real time"
                    " without waiting in stopped.wait(). In a simulation, a daemon sleeps by"
                    " stopped.wait(seconds); time.sleep() and asyncio.sleep() are real time,"
                    " and the clock cannot move while they last.")
        task.result()


class SyncSimulation(SimulatedObjects):
    """A ``Simulation`` for tests that are not coroutines (the ``kopf_simulation`` fixture):
    ``settle()`` and ``advance()`` return when they are done. The operator runs on an event
    loop of its own while they last; between them, the clock and the operator stand still.

    Made started (``start()``) and stopped by the fixture; or, without it, ``with
    SyncSimulation(Simulation(...)) as sim:``. Not for coroutines: there, use ``Simulation``.

    :param simulation: the simulation to run (not entered yet): its operator, its settings.
    """

    def __init__(self, simulation: Simulation) -> None:
        self.simulation = simulation
        self._api = simulation._api
        self._loop: asyncio.AbstractEventLoop | None = None

    def __enter__(self) -> SyncSimulation:
        self.start()
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: types.TracebackType | None) -> None:
        self.stop()

    def start(self) -> None:
        """Start the operator (see ``Simulation``'s ``async with``): create the CRDs before."""
        if self._loop is not None:
            raise RuntimeError("The simulation has started already.")
        _not_in_a_coroutine()
        self._loop = asyncio.new_event_loop()
        try:
            self._loop.run_until_complete(self.simulation.__aenter__())
        except BaseException:
            self._loop.close()
            self._loop = None
            raise

    def stop(self) -> None:
        """Stop the operator, and the simulated API with it (idempotent)."""
        loop, self._loop = self._loop, None
        if loop is not None:
            try:
                loop.run_until_complete(self.simulation.__aexit__(None, None, None))
            finally:
                loop.close()

    def settle(self) -> None:
        """As ``Simulation.settle()``, returning when it is done."""
        self._run(self.simulation.settle())

    def advance(self, seconds: float) -> None:
        """As ``Simulation.advance()``, returning when it is done.

        :param seconds: how far to move the clock (not backwards).
        """
        self._run(self.simulation.advance(seconds))

    def _run(self, step: Coroutine[Any, Any, None]) -> None:
        if self._loop is None:
            step.close()
            raise RuntimeError("The simulation is not started (start(), or the kopf_simulation fixture).")
        try:
            _not_in_a_coroutine()
        except RuntimeError:
            step.close()
            raise
        self._loop.run_until_complete(step)


def _not_in_a_coroutine() -> None:
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return  # no loop runs in this thread: its own can
    raise RuntimeError("SyncSimulation (the kopf_simulation fixture) is for tests that are not coroutines: its"
                       " steps run an event loop of their own. In a coroutine, use kopf.testing.Simulation:"
                       " `async with Simulation(...) as sim:` and `await sim.settle()`.")


class _Resource:
    """A resource as the simulated API's discovery lists it."""

    def __init__(self, group: str, version: str, plural: str, kind: str, namespaced: bool) -> None:
        self.group, self.version, self.plural, self.kind, self.namespaced = group, version, plural, kind, namespaced
        self.names = {plural, kind, f'{plural}.{group}' if group else plural}

    def path(self, namespace: str | None, name: str | None = None) -> str:
        prefix = f'/apis/{self.group}/{self.version}' if self.group else f'/api/{self.version}'
        scope = f'/namespaces/{urllib.parse.quote(namespace)}' if namespace and self.namespaced else ''
        return f'{prefix}{scope}/{self.plural}' + (f'/{urllib.parse.quote(name)}' if name else '')
