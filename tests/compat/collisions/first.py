"""A module whose activities have the same function names as those of `handlers.py`."""

from typing import Any

import kopf

STATE: dict[str, Any] = {}


@kopf.on.startup()
async def startup_fn(logger: Any, **_: Any) -> None:
    logger.info("startup_fn of first.py")
    STATE['started'] = True


@kopf.on.startup(id='startup_fn')
async def another(logger: Any, **_: Any) -> None:
    logger.info(f"another startup_fn of first.py, after the first: {STATE.get('started')}")


@kopf.on.cleanup()
def cleanup_fn(logger: Any, **_: Any) -> None:
    logger.info("cleanup_fn of first.py")


@kopf.on.create('demo.kopf.dev', 'v1', 'greetings')
def create_fn(logger: Any, **_: Any) -> dict[str, str]:
    logger.info("create_fn of first.py")
    return {'from': 'first'}
