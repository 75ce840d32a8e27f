"""Handlers whose ids collide, of every kind: two functions under one id each, by `id=`, or
by the same function name in two modules (`first.py`, imported first, and this one)."""

from typing import Any

import first  # noqa: F401  (its handlers, registered before these)
import kopf

GREETINGS = ('demo.kopf.dev', 'v1', 'greetings')


@kopf.on.create(*GREETINGS, id='creation')
def create_a(logger: Any, patch: kopf.Patch, **_: Any) -> str:
    logger.info("create_a")
    patch.status['a'] = 'called'
    return 'a'


@kopf.on.create(*GREETINGS, id='creation')
def create_b(logger: Any, patch: kopf.Patch, **_: Any) -> str:
    logger.info("create_b")
    patch.status['b'] = 'called'
    return 'b'


@kopf.on.create(*GREETINGS)
def create_fn(logger: Any, **_: Any) -> dict[str, str]:
    logger.info("create_fn of handlers.py")
    return {'from': 'handlers'}


@kopf.on.update(*GREETINGS, field='spec.greeting', id='greeting')
def update_a(logger: Any, new: Any, **_: Any) -> None:
    logger.info(f"update_a {new}")


@kopf.on.update(*GREETINGS, field='spec.greeting', id='greeting')
def update_b(logger: Any, new: Any, **_: Any) -> None:
    logger.info(f"update_b {new}")


@kopf.on.event(*GREETINGS, id='watch')
def event_a(logger: Any, type: Any, **_: Any) -> None:
    if type in (None, 'ADDED'):  # first seen: listed or added, as the watch's start falls
        logger.info("event_a sees it first")


@kopf.on.event(*GREETINGS, id='watch')
def event_b(logger: Any, type: Any, **_: Any) -> None:
    if type in (None, 'ADDED'):  # first seen: listed or added, as the watch's start falls
        logger.info("event_b sees it first")


@kopf.index(*GREETINGS, id='names')
def index_a(name: str, **_: Any) -> Any:
    return {name: 'a'}


@kopf.index(*GREETINGS, id='names')
def index_b(name: str, **_: Any) -> Any:
    return {name: 'b'}


@kopf.daemon(*GREETINGS, id='worker')
async def daemon_a(logger: Any, stopped: Any, names: Any, **_: Any) -> None:
    logger.info(f"daemon_a sees {sorted(names.get(next(iter(names), ''), []))}")
    await stopped.wait()


@kopf.daemon(*GREETINGS, id='worker')
async def daemon_b(logger: Any, stopped: Any, **_: Any) -> None:
    logger.info("daemon_b")
    await stopped.wait()


@kopf.on.delete(*GREETINGS, id='deletion')
def delete_a(logger: Any, **_: Any) -> None:
    logger.info("delete_a")


@kopf.on.delete(*GREETINGS, id='deletion')
def delete_b(logger: Any, **_: Any) -> None:
    logger.info("delete_b")


@kopf.on.startup()
def ready(logger: Any, **_: Any) -> None:
    logger.info("ready: the startup handlers of both modules ran before this one")


@kopf.on.cleanup()
def cleanup_fn(logger: Any, **_: Any) -> None:
    logger.info("cleanup_fn of handlers.py")
