"""Awaiting the core's futures (``kopf._engine.Pending``) on the operator's loop.

The core finishes a future on its own threads without the GIL and writes a byte to the
future's socket; the loop wakes on it and takes the value here, on its own thread. No core
thread is then inside Python when the program returns and the interpreter finalizes."""
import asyncio
from typing import Any

from kopf._engine import Pending


async def settle(pending: Pending) -> Any:
    """The value of the core's future (its error raised); cancelling the awaiting task
    cancels the future."""
    loop = asyncio.get_running_loop()
    fd = pending.fileno()
    finished: asyncio.Future[None] = loop.create_future()
    loop.add_reader(fd, _wake, finished)
    try:
        await finished
    except asyncio.CancelledError:
        pending.cancel()
        raise
    finally:
        loop.remove_reader(fd)
    return pending.result()


def _wake(finished: asyncio.Future[None]) -> None:
    if not finished.done():
        finished.set_result(None)
