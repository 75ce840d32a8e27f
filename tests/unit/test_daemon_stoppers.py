"""The `stopped` kwarg of daemons and timers, as handlers use it (no cluster needed)."""

from __future__ import annotations

import asyncio
import threading
import time

import kopf
import pytest
from kopf._handling.daemons import DaemonStopper


def test_reasons_are_kopfs_flags() -> None:
    assert [r.name for r in kopf.DaemonStoppingReason] == [
        "DONE", "FILTERS_MISMATCH", "RESOURCE_DELETED", "OPERATOR_PAUSING", "OPERATOR_EXITING",
        "DAEMON_SIGNALLED", "DAEMON_CANCELLED", "DAEMON_ABANDONED"]
    # The core sends the reasons as bits in this order.
    assert kopf.DaemonStoppingReason(4 | 32) == (kopf.DaemonStoppingReason.RESOURCE_DELETED |
                                                 kopf.DaemonStoppingReason.DAEMON_SIGNALLED)


def test_sync_checker_waits_in_a_thread_until_the_flag_is_raised_elsewhere() -> None:
    loop = asyncio.new_event_loop()
    try:
        stopper = DaemonStopper(loop)
        stopped = kopf.SyncDaemonStopperChecker(stopper)
        assert not stopped and stopped.reason is None
        assert stopped.wait(0.01) is stopped and not stopped  # times out, still running

        woke: list[float] = []
        def daemon() -> None:
            started = time.monotonic()
            stopped.wait(10)
            woke.append(time.monotonic() - started)
        thread = threading.Thread(target=daemon)
        thread.start()
        time.sleep(0.1)
        stopper.set(4)  # from another thread, as the core does
        thread.join(5)
        assert woke and woke[0] < 5
        assert stopped and stopped.is_set()
        assert stopped.reason == kopf.DaemonStoppingReason.RESOURCE_DELETED
    finally:
        loop.close()


def test_async_checker_is_awaited_through_wait() -> None:
    async def scenario() -> None:
        stopper = DaemonStopper(asyncio.get_running_loop())
        stopped = kopf.AsyncDaemonStopperChecker(stopper)
        assert (await stopped.wait(0.01)) is stopped and not stopped
        asyncio.get_running_loop().call_later(0.05, stopper.set, 16)
        result = await stopped.wait(10)
        assert result is stopped and bool(result)
        assert result.reason == kopf.DaemonStoppingReason.OPERATOR_EXITING
        with pytest.raises(NotImplementedError):
            await stopped  # type: ignore[misc]
    asyncio.run(scenario())


def test_a_flag_raised_from_a_thread_wakes_async_waiters() -> None:
    async def scenario() -> None:
        stopper = DaemonStopper(asyncio.get_running_loop())
        stopped = kopf.AsyncDaemonStopperChecker(stopper)
        threading.Timer(0.05, stopper.set, args=(2,)).start()
        await asyncio.wait_for(stopped.wait(), timeout=5)
        assert stopped.reason == kopf.DaemonStoppingReason.FILTERS_MISMATCH
    asyncio.run(scenario())


def test_a_flag_raised_before_anyone_waits_is_seen_by_later_waiters() -> None:
    # The events are made when first waited on: a flag raised earlier must not be missed.
    async def scenario() -> None:
        stopper = DaemonStopper(asyncio.get_running_loop())
        stopper.set(32)
        sync_stopped = kopf.SyncDaemonStopperChecker(stopper)
        async_stopped = kopf.AsyncDaemonStopperChecker(stopper)
        started = time.monotonic()
        assert sync_stopped.wait(10) is sync_stopped and sync_stopped
        assert (await asyncio.wait_for(async_stopped.wait(10), timeout=5)) is async_stopped
        assert time.monotonic() - started < 5
        assert async_stopped.reason == kopf.DaemonStoppingReason.DAEMON_SIGNALLED
    asyncio.run(scenario())

def test_the_base_type_cannot_wait() -> None:
    loop = asyncio.new_event_loop()
    try:
        stopped = kopf.DaemonStopped(DaemonStopper(loop))
        with pytest.raises(NotImplementedError):
            stopped.wait(1)
    finally:
        loop.close()
