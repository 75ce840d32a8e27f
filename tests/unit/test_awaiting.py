"""The core's awaitables (``kopf._engine.Pending``): their values, errors and cancellation as
``pyo3_async_runtimes`` gave them, but completed without the core taking the GIL."""
import asyncio
import json
import socket

import pytest
from kopf import _engine


def connection(port: int) -> str:
    return json.dumps({'server': f'http://127.0.0.1:{port}'})


def closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(('127.0.0.1', 0))
        return int(sock.getsockname()[1])


def test_a_value_comes_back_through_await() -> None:
    asyncio.run(_test_a_value_comes_back_through_await())


async def _test_a_value_comes_back_through_await() -> None:
    assert json.loads(await _engine.read_objects(connection(closed_port()), [])) == []


def test_an_error_of_the_core_is_raised_by_await() -> None:
    asyncio.run(_test_an_error_of_the_core_is_raised_by_await())


async def _test_an_error_of_the_core_is_raised_by_await() -> None:
    with pytest.raises(RuntimeError, match='127.0.0.1'):
        await _engine.discover(connection(closed_port()))


def test_a_result_is_refused_before_the_end_and_after_it_was_taken() -> None:
    asyncio.run(_test_a_result_is_refused_before_the_end_and_after_it_was_taken())


async def _test_a_result_is_refused_before_the_end_and_after_it_was_taken() -> None:
    pending = _engine.read_objects(connection(closed_port()), [])
    assert isinstance(pending, _engine.Pending)
    await asyncio.sleep(0.1)  # the core has finished by now; the loop was not asked to take it
    assert json.loads(pending.result()) == []
    with pytest.raises(RuntimeError, match='taken already'):
        pending.result()


def test_cancelling_the_awaiting_task_cancels_the_cores_future() -> None:
    asyncio.run(_test_cancelling_the_awaiting_task_cancels_the_cores_future())


async def _test_cancelling_the_awaiting_task_cancels_the_cores_future() -> None:
    accepted: asyncio.Queue[asyncio.StreamReader] = asyncio.Queue()

    async def silent(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await accepted.put(reader)  # the request is read by nobody; no answer ever comes

    server = await asyncio.start_server(silent, '127.0.0.1', 0)
    port = server.sockets[0].getsockname()[1]
    async with server:
        task = asyncio.create_task(_as_coroutine(_engine.discover(connection(port))))
        reader = await asyncio.wait_for(accepted.get(), timeout=10)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        # The core dropped its request: the client's side of the connection closes.
        await asyncio.wait_for(reader.read(), timeout=10)
        assert reader.at_eof()


async def _as_coroutine(awaitable: object) -> object:
    return await awaitable  # type: ignore[misc]
