"""Skafos' ``StreamWatch``: the events of one custom resource, to the listeners.

The watch-stream, its resumption, the leader election and the health port are kopf-rs'
Rust core; the listeners run in this process's threads, as in Skafos.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import queue
import signal
import socket
import threading
from typing import Any

import yaml
from kopf import _engine
from kopf._connecting.piggybacking import _from_client_config, _installed, sync_client_header
from kopf._handling.activities import authenticate
from kopf._handling.handlers import SmartOperatorRegistry
from kopf._structures.settings import OperatorSettings

# How often the waiting loop wakes up to let Python handle signals (Ctrl+C).
_POLL_SECONDS = 0.5


class StreamWatch:
    """Watches the resource of a CRD file and passes each event to the listeners.

    ``listeners`` are ``EventListener`` instances (reused for every event) or classes (a new
    instance per event, made as ``cls(api_client, event)``). ``config`` is an optional
    ``kubernetes.client.Configuration``; without it, the ``kubernetes`` client's loaded
    configuration is used if there is one, else the kubeconfig or the pod's service account.
    """

    def __init__(self, target: str | dict[str, Any], listeners: list[Any], config: Any = None) -> None:
        if not isinstance(target, str):
            raise TypeError("StreamWatch's target must be the path to a CRD file: targets given as a dict "
                            "(a method of the kubernetes client's Core API) are not supported by this skafos "
                            "(kopf-rs).")
        self.logger = logging.getLogger('skafos')
        self.target = target
        self.listeners = listeners
        self.config = config
        self.api_client = _api_client(config)
        self.lock = threading.Lock()
        self._stopped = threading.Event()
        self._stream: Any = None

    @staticmethod
    def create_config(ssl_path: str) -> Any:
        """A ``kubernetes.client.Configuration`` that verifies the server with this CA file."""
        try:
            from kubernetes import client
        except ImportError:
            raise ImportError("StreamWatch.create_config() makes a configuration of the kubernetes client: "
                              "pip install kubernetes") from None
        configuration = client.Configuration()
        configuration.verify_ssl = True
        configuration.ssl_ca_cert = ssl_path
        return configuration

    def run(self, timeout: int = 7200, n_threads: int = 48, healthcheck_port: int | None = 5000,
            leader_election_ns: str = '') -> None:
        """Watch and pass the events to the listeners until ``stop()``, SIGTERM or SIGINT (blocking).

        ``timeout``: seconds of each watch request, and how long the stream may be
        disconnected before the health check fails. ``n_threads``: threads for the
        listeners (events of one object go to one thread, in order). ``healthcheck_port``:
        ``GET /healthz`` answers 200 while the stream is healthy, 503 when not (``None``: no
        port). ``leader_election_ns``: the namespace of the leader election's ConfigMap; with
        several replicas, only the leader's listeners get events.
        """
        if n_threads < 1:
            raise ValueError(f"n_threads must be 1 or more, not {n_threads!r}")
        spec = _crd_spec(self.target)
        spec.update(timeout=float(timeout), health_port=healthcheck_port or None, election=None)
        if leader_election_ns:
            spec['election'] = _election(leader_election_ns, spec['plural'])
        connection = _connection(self.config)
        stream = _engine.EventStream(json.dumps(connection), json.dumps(spec))
        self._stream = stream
        if self._stopped.is_set():  # stopped while starting
            stream.stop()
        jobs: list[queue.SimpleQueue[Any]] = [queue.SimpleQueue() for _ in range(n_threads)]
        threads = [threading.Thread(target=self._work, args=(stream, jobs[i]), name=f"skafos-{i}", daemon=True)
                   for i in range(n_threads)]
        for thread in threads:
            thread.start()
        previous = self._stop_on_signals()
        try:
            while not self._stopped.is_set():
                delivery = stream.next(_POLL_SECONDS)
                if delivery is None:
                    continue
                number, kind, obj = delivery
                event = {'type': kind, 'object': obj, 'raw_object': obj}
                metadata = obj.get('metadata') or {}
                # One object's events go to one thread, so they are handled in order.
                key = (metadata.get('namespace'), metadata.get('name'))
                jobs[hash(key) % n_threads].put((number, event))
        finally:
            self._stopped.set()  # the threads drop what they have not started
            stream.stop()
            for job in jobs:
                job.put(None)
            for thread in threads:
                thread.join()
            stream.close()
            self._stream = None
            self._stopped.clear()
            for signum, handler in previous.items():
                signal.signal(signum, handler)

    def _stop_on_signals(self) -> dict[int, Any]:
        """SIGTERM (a pod's end) and SIGINT (Ctrl+C) stop the run gracefully: the lock is
        released for the next replica at once. Signals are the main thread's only."""
        if threading.current_thread() is not threading.main_thread():
            return {}
        previous: dict[int, Any] = {}
        for signum in (signal.SIGTERM, signal.SIGINT):
            previous[signum] = signal.signal(signum, lambda *_: self.stop())
        return previous

    def stop(self) -> None:
        """End ``run()`` (from another thread, or a listener): the events being handled
        finish, the others are left to the next run or the next leader."""
        self._stopped.set()
        stream = self._stream
        if stream is not None:
            stream.stop()

    def reconcile(self, event: dict[str, Any]) -> None:
        """Pass one event to the listeners, in their order; if one fails (returns ``False``
        or raises), roll back those before it, in reverse order, and skip the rest.

        Instances are called one event at a time (they are shared); classes' new instances
        run in parallel for different objects.
        """
        if event.get('type') != 'ERROR' and _name_of(event.get('object')) is None:
            return
        ev_state: dict[str, Any] = {}
        processed: list[Any] = []
        for listener in self.listeners:
            if callable(listener):
                with self.lock:
                    instance = listener(self.api_client, event)
                succeeded = self._process(instance, event, ev_state)
            else:
                instance = listener
                with self.lock:
                    succeeded = self._process(instance, event, ev_state)
            processed.append(instance)
            if not succeeded:
                self.logger.warning("Listener returned False on event, rolling back previous changes")
                with self.lock:
                    for done in reversed(processed):
                        try:
                            done.rollback()
                        except Exception:
                            self.logger.exception(f"Rolling back {type(done).__name__} failed")
                break

    def _process(self, listener: Any, event: dict[str, Any], ev_state: dict[str, Any]) -> bool:
        try:
            return bool(listener.process(event, ev_state))
        except Exception:
            self.logger.exception('listener failed to process event')
            return False

    def _work(self, stream: Any, jobs: queue.SimpleQueue[Any]) -> None:
        while (job := jobs.get()) is not None:
            number, event = job
            # Not after stop(), nor after the leadership of its term was lost.
            if self._stopped.is_set() or not stream.may_handle(number):
                continue
            try:
                self.reconcile(event)
            except Exception:
                self.logger.exception('listeners failed on an event')
            stream.done(number)


def _name_of(obj: Any) -> Any:
    metadata = obj.get('metadata') if isinstance(obj, dict) else getattr(obj, 'metadata', None)
    return metadata.get('name') if isinstance(metadata, dict) else getattr(metadata, 'name', None)


def _api_client(config: Any) -> Any:
    """The kubernetes client's ``ApiClient`` that class listeners get, if it is installed."""
    if not _installed('kubernetes'):
        return None
    from kubernetes import client
    return client.ApiClient(configuration=config)


def _crd_spec(path: str) -> dict[str, Any]:
    """Group, version, plural, kind and scope of the CRD in a YAML file (and the CRD itself,
    to create it if the cluster does not serve it yet)."""
    try:
        with open(path, encoding='utf-8') as f:
            documents = [doc for doc in yaml.safe_load_all(f) if doc]
    except (OSError, yaml.YAMLError) as e:
        raise ValueError(f"cannot read the CRD file {path!r}: {e}") from None
    crds = [doc for doc in documents if isinstance(doc, dict) and doc.get('kind') == 'CustomResourceDefinition']
    if not crds:
        raise ValueError(f"the file {path!r} has no CustomResourceDefinition")
    crd = crds[0]
    spec = crd.get('spec') or {}
    names = spec.get('names') or {}
    # `spec.version` in apiextensions.k8s.io/v1beta1; the storage version of `versions` in v1.
    versions = spec.get('versions') or []
    stored = [v['name'] for v in versions if v.get('storage')] or [v['name'] for v in versions if v.get('served')]
    version = spec.get('version') or (stored[0] if stored else None)
    missing = [field for field, value in [('spec.group', spec.get('group')), ('spec.version(s)', version),
                                          ('spec.names.plural', names.get('plural')),
                                          ('spec.names.kind', names.get('kind'))] if not value]
    if missing:
        raise ValueError(f"the CRD in {path!r} has no {', '.join(missing)}")
    return {'group': spec['group'], 'version': version, 'plural': names['plural'], 'kind': names['kind'],
            'namespaced': spec.get('scope', 'Namespaced') == 'Namespaced', 'crd': crd, 'source': path}


def _election(namespace: str, plural: str) -> dict[str, str]:
    """The ConfigMap and our identity in it, as Skafos names them: a pod `app-5d9f8-x2x4z`
    of a Deployment is `app-5d9f8-x2x4z` in `app-le`."""
    hostname = os.environ.get('HOSTNAME', '')
    parts = hostname.split('-')
    name = '-'.join(parts[:-2]) + '-le' if len(parts) >= 3 and all(parts[:-2]) else f'{plural}-le'
    # Outside of pods, several processes may share a host name: the pid tells them apart.
    identity = hostname or f'{socket.gethostname()}-{os.getpid()}'
    return {'namespace': namespace, 'name': name, 'identity': identity}


def _connection(config: Any) -> dict[str, Any]:
    """The core's connection: of this kubernetes configuration, or of the one the kubernetes
    client has loaded, or as the login fallbacks find it (kubeconfig, service account)."""
    settings = OperatorSettings()
    if config is None and _installed('kubernetes'):
        from kubernetes import client
        loaded = client.Configuration.get_default_copy()
        if loaded.host and loaded.host != 'http://localhost':
            config = loaded
    if config is not None:
        return _from_client_config(config, settings, priority=0, header=sync_client_header(config)).for_engine()
    return asyncio.run(authenticate(registry=SmartOperatorRegistry(), settings=settings, memo=None,
                                    title="Skafos' authentication"))
