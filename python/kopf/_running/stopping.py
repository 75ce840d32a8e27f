"""Stopping an operator: by a signal (SIGINT, SIGTERM) or by an embedding program's flag
(any of the four kinds Kopf takes), and the handler calls still running after the core has
stopped. The flags are raised here too (``ready_flag``)."""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import signal
import threading
from collections.abc import Collection
from typing import Any

logger = logging.getLogger('kopf._core.reactor.running')

Flag = asyncio.Future | asyncio.Event | concurrent.futures.Future | threading.Event  # type: ignore[type-arg]


async def wait_flag(flag: Flag) -> Any:
    """Wait until the flag is raised; its value (a future's result, an event's ``True``)."""
    if isinstance(flag, asyncio.Future):
        return await asyncio.shield(flag)
    if isinstance(flag, asyncio.Event):
        return await flag.wait()
    if isinstance(flag, concurrent.futures.Future):
        return await asyncio.wrap_future(flag)
    while not flag.is_set():  # threading.Event: poll, as there is no awaitable for it
        await asyncio.sleep(0.1)
    return True  # what its wait() returns once it is set (Kopf logs the flag's value)


def raise_flag(flag: Flag | None) -> None:
    """Raise the flag (if any and not raised yet)."""
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


def stopping(done: Collection[asyncio.Future[Any]], stop: asyncio.Future[Any],
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


async def unless_stopped(task: asyncio.Task[Any], stop: asyncio.Future[Any],
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
    stopping(done, stop, watchers)
    task.cancel()
    await asyncio.wait({task})
    return False


async def stop_hung_tasks(tasks: set[asyncio.Task[None]]) -> None:
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


def install_signals(loop: asyncio.AbstractEventLoop, stop: asyncio.Future[Any]) -> None:
    """SIGINT and SIGTERM resolve ``stop`` with the signal (only in the main thread)."""
    if threading.current_thread() is not threading.main_thread():
        logger.warning("OS signals are ignored: running not in the main thread.")
        return
    def received(sig: signal.Signals) -> None:
        if not stop.done():
            stop.set_result(sig)

    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, received, sig)


def uninstall_signals(loop: asyncio.AbstractEventLoop) -> None:
    """The signals' default handling back."""
    if threading.current_thread() is threading.main_thread():
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.remove_signal_handler(sig)
