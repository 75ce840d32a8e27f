"""``kopf.testing``: ``KopfRunner`` runs an operator in a thread while a test talks to the cluster;
``KopfCluster`` starts that cluster, a local control plane, and ``Simulation`` runs the handlers
against a simulated API on a virtual clock (both not in Kopf); the pytest fixtures
``kopf_cluster`` and ``kopf_namespace`` come with the wheel (``kopf._operating.cluster.fixtures``)."""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import threading
import types
from typing import TYPE_CHECKING, Any, Literal

import click.testing

from kopf import cli
from kopf._handling.handlers import OperatorRegistry
from kopf._structures.settings import OperatorSettings

if TYPE_CHECKING:
    from kopf._operating.cluster.session import KopfCluster, LeftoverWarning
    from kopf._operating.simulation import SimulatedApiError, Simulation, SyncSimulation

__all__ = ['KopfRunner', 'KopfCluster', 'LeftoverWarning', 'Simulation', 'SimulatedApiError', 'SyncSimulation']


def __getattr__(name: str) -> Any:
    # The control plane's code (pathlib, yaml, ssl) is loaded by the tests that use it, not by
    # those that only run KopfRunner.
    if name in ('KopfCluster', 'LeftoverWarning'):
        from kopf._operating.cluster import session
        return getattr(session, name)
    if name in ('Simulation', 'SimulatedApiError', 'SyncSimulation'):
        from kopf._operating import simulation
        return getattr(simulation, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


class KopfRunner(contextlib.AbstractContextManager["KopfRunner"]):
    """Run ``kopf`` CLI arguments (e.g. ``['run', '-A', 'handlers.py']``) in a thread.

    On exit from the ``with`` block, the operator is stopped and its result is available:
    ``output``, ``stdout``, ``stderr``, ``exit_code``, ``exception``, ``exc_info``.
    """

    def __init__(self, *args: Any, reraise: bool = True, timeout: float | None = None,
                 registry: OperatorRegistry | None = None, settings: OperatorSettings | None = None,
                 **kwargs: Any) -> None:
        super().__init__()
        self.args = args
        self.kwargs = kwargs
        self.reraise = reraise
        self.timeout = timeout
        self.registry = registry
        self.settings = settings
        self._stop = threading.Event()
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._target)
        self._future: concurrent.futures.Future[click.testing.Result] = concurrent.futures.Future()

    def __enter__(self) -> KopfRunner:
        self._thread.start()
        self._ready.wait()
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc_val: BaseException | None,
                 exc_tb: types.TracebackType | None) -> Literal[False]:
        self._stop.set()
        self._thread.join(timeout=self.timeout)
        if self._thread.is_alive():
            raise Exception("The operator didn't stop, still running.")
        error = self._future.exception()
        if error is not None:
            raise error from exc_val
        error = self._future.result().exception
        if error is not None and self.reraise:
            raise error from exc_val
        return False

    def _target(self) -> None:
        loop = asyncio.new_event_loop()
        asyncio.set_event_loop(loop)
        self._ready.set()
        try:
            controls = cli.CLIControls(registry=self.registry, settings=self.settings,
                                       stop_flag=self._stop, loop=loop)
            result = click.testing.CliRunner().invoke(cli.main, *self.args, **self.kwargs, obj=controls)
        except BaseException as e:
            self._future.set_exception(e)
        else:
            self._future.set_result(result)
        finally:
            loop.run_until_complete(loop.shutdown_asyncgens())
            loop.close()

    @property
    def future(self) -> concurrent.futures.Future[click.testing.Result]:
        """The operator's thread's future: its result or exception once it has exited."""
        return self._future

    @property
    def output(self) -> str:
        """What the operator printed and logged, as text (stdout and stderr together, as click's runner had it)."""
        return self.future.result().output

    @property
    def stdout(self) -> str:
        """What the operator printed to stdout, as text."""
        return self.future.result().stdout

    @property
    def stdout_bytes(self) -> bytes:
        """What the operator printed to stdout, as bytes."""
        return self.future.result().stdout_bytes

    @property
    def stderr(self) -> str:
        """What the operator printed to stderr, as text."""
        return self.future.result().stderr

    @property
    def stderr_bytes(self) -> bytes:
        """What the operator printed to stderr, as bytes."""
        return self.future.result().stderr_bytes or b''

    @property
    def exit_code(self) -> int:
        """The operator's exit code (0: it ended normally)."""
        return self.future.result().exit_code

    @property
    def exception(self) -> BaseException:
        """The exception that ended the operator, if any."""
        return self.future.result().exception  # type: ignore[return-value]

    @property
    def exc_info(self) -> Any:
        """The ``sys.exc_info()`` triple of that exception, if any."""
        return self.future.result().exc_info
