"""The ``stopped`` kwarg of daemons and timers, and its Python-side state.

The core decides when a daemon stops and tells this side by the daemon's token:
the flag's reasons, a cancellation of its call, and its end (see ``_running.calls``).

In a simulation (``kopf.testing.Simulation``), a daemon's call carries a hold on the virtual
clock: held while the daemon's code runs, let go while it waits in ``stopped.wait()``, so
that its waits pass in virtual time.
"""

from __future__ import annotations

import asyncio
import enum
import threading
from collections.abc import Generator
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from kopf._bridge.services import DaemonHold


class DaemonStoppingReason(enum.Flag):
    """Why a daemon or timer is asked to stop; several reasons can combine."""

    DONE = enum.auto()
    """The daemon's task has exited, for whatever reason."""
    FILTERS_MISMATCH = enum.auto()
    """The object does not match the handler's filters anymore."""
    RESOURCE_DELETED = enum.auto()
    """The object is being deleted."""
    OPERATOR_PAUSING = enum.auto()
    """The operator is pausing (peering)."""
    OPERATOR_EXITING = enum.auto()
    """The operator is exiting."""
    DAEMON_SIGNALLED = enum.auto()
    """The flag is raised and the daemon is waited for."""
    DAEMON_CANCELLED = enum.auto()
    """The daemon's asyncio task is cancelled (a thread may still run)."""
    DAEMON_ABANDONED = enum.auto()
    """The daemon did not exit in time and is left alone."""


class DaemonStopper:
    """The flag's state (internal): raised by the core, read by the daemon's ``stopped``."""

    # The events are made only for a daemon that waits on them (most timers never do: a
    # thousand timers would otherwise hold two thousand events); one lock for all stoppers,
    # since it is taken only when an event is made or the flag is raised.
    _events_lock = threading.Lock()

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self._raised = False
        self._sync_event: threading.Event | None = None
        self._async_event: asyncio.Event | None = None
        self.reason: DaemonStoppingReason | None = None
        self.task: asyncio.Task[Any] | None = None
        self.cancelled = False
        self.key: str | None = None  # the object whose live body the daemon uses
        self.kwargs: dict[str, Any] | None = None  # its calls' kwargs about that body (by the bridge)
        self.hold: DaemonHold | None = None  # in a simulation: the daemon's hold on the clock

    def __repr__(self) -> str:
        return f'<{self.__class__.__name__}: {self.is_set()}, reason={self.reason}>'

    def is_set(self) -> bool:
        return self._raised

    @property
    def sync_event(self) -> threading.Event:
        """Set once the flag is raised; for threads to wait on."""
        with self._events_lock:
            if self._sync_event is None:
                self._sync_event = threading.Event()
                if self._raised:
                    self._sync_event.set()
            return self._sync_event

    @property
    def async_event(self) -> asyncio.Event:
        """Set once the flag is raised; for coroutines in the operator's loop to wait on."""
        if self._async_event is None:  # made and set only in the loop: no lock needed
            self._async_event = asyncio.Event()
            if self._raised:
                self._async_event.set()
        return self._async_event

    def set(self, bits: int) -> None:
        """Raise the flag with these reasons; callable from any thread."""
        self.reason = DaemonStoppingReason(bits) if bits else None
        self._raised = True  # before the lock: an event made after it sees the flag raised
        if self.hold is not None:
            self.hold.wake()
        with self._events_lock:
            sync_event = self._sync_event
        if sync_event is not None:
            sync_event.set()
        if self._in_loop():
            self._set_async_event()
        else:
            self._call_in_loop(self._set_async_event)

    def _set_async_event(self) -> None:
        if self._async_event is not None:
            self._async_event.set()

    def cancel(self) -> None:
        """Cancel the daemon's running call (now, or as soon as it starts)."""
        self.cancelled = True
        if self.hold is not None:
            self.hold.wake()
        if self.task is not None:
            self._call_in_loop(self.task.cancel)

    def wait_in_thread(self, timeout: float | None) -> None:
        """Block the thread until the flag is raised, or for ``timeout`` seconds."""
        hold = self.hold
        if hold is None:
            self.sync_event.wait(timeout=timeout)
            return
        woken = threading.Event()
        if not self._raised and hold.sleep(timeout, woken.set):
            woken.wait()

    async def wait_in_loop(self, timeout: float | None) -> None:
        """Until the flag is raised, or for ``timeout`` seconds."""
        hold = self.hold
        if hold is None:
            try:
                await asyncio.wait_for(self.async_event.wait(), timeout=timeout)
            except TimeoutError:
                pass
            return
        woken = self._loop.create_future()

        def wake() -> None:
            if not woken.done():
                woken.set_result(None)

        if not self._raised and hold.sleep(timeout, lambda: self._call_in_loop(wake)):
            await woken

    def _call_in_loop(self, fn: Any) -> None:
        try:
            self._loop.call_soon_threadsafe(fn)
        except RuntimeError:
            pass  # the loop is closed: only abandoned threads are left, and they see `sync_event`

    def _in_loop(self) -> bool:
        try:
            return asyncio.get_running_loop() is self._loop
        except RuntimeError:
            return False


class DaemonStopped:
    """The ``stopped`` kwarg: truthy once the daemon should exit; ``.reason`` says why.

    Sync daemons get a :class:`SyncDaemonStopperChecker` (``stopped.wait(60)`` blocks),
    async ones an :class:`AsyncDaemonStopperChecker` (``await stopped.wait(60)``).
    """

    def __init__(self, stopper: DaemonStopper) -> None:
        self._stopper = stopper

    def __repr__(self) -> str:
        return f'<{self.__class__.__name__}: {self.is_set()}, reason={self.reason}>'

    def __bool__(self) -> bool:
        return self._stopper.is_set()

    def is_set(self) -> bool:
        """Whether the daemon is asked to stop."""
        return self._stopper.is_set()

    @property
    def reason(self) -> DaemonStoppingReason | None:
        """Why the daemon is asked to stop (``None`` while it is not)."""
        return self._stopper.reason

    # Kopf's contract, kept on purpose: only the sync/async checkers that handlers get can wait.
    def wait(self, timeout: float | None = None) -> Any:
        """Wait until the daemon is told to stop, or for ``timeout`` seconds: true if it is stopped."""
        raise NotImplementedError("Use the stopped kwarg of a daemon or a timer to wait.")

    def __await__(self) -> Generator[None, None, Any]:
        raise NotImplementedError("The stopped kwarg cannot be awaited itself; use `await stopped.wait()`.")


class SyncDaemonStopperChecker(DaemonStopped):
    """``stopped`` for sync daemons: ``wait()`` blocks the thread."""

    def wait(self, timeout: float | None = None) -> SyncDaemonStopperChecker:
        """Sleep until stopped or for ``timeout`` seconds; returns itself (truthy if stopped)."""
        self._stopper.wait_in_thread(timeout)
        return self


class AsyncDaemonStopperChecker(DaemonStopped):
    """``stopped`` for async daemons: ``await stopped.wait()``."""

    def wait(self, timeout: float | None = None) -> _StoppedPromise:
        """An awaitable: sleep until stopped or for ``timeout`` seconds; gives this checker back."""
        return _StoppedPromise(self, timeout=timeout)


class _StoppedPromise(DaemonStopped):
    """What ``AsyncDaemonStopperChecker.wait()`` returns: awaitable once, giving the checker."""

    def __init__(self, checker: AsyncDaemonStopperChecker, *, timeout: float | None) -> None:
        super().__init__(checker._stopper)
        self._checker = checker
        self._timeout = timeout

    def __await__(self) -> Generator[None, None, AsyncDaemonStopperChecker]:
        return self._wait().__await__()

    async def _wait(self) -> AsyncDaemonStopperChecker:
        await self._stopper.wait_in_loop(self._timeout)
        return self._checker
