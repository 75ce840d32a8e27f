"""Activities: the operator-level handlers (startup, login, probes, cleanup), each run
until it succeeds or fails for good; and the login that gives the core its connection."""

from __future__ import annotations

import asyncio
import dataclasses
import datetime
import logging
import os
from collections.abc import Mapping
from typing import Any

from kopf._connecting.credentials import SERVICE_ACCOUNT, AiohttpSession, ConnectionInfo
from kopf._handling.execution import Outcome, execute_once
from kopf._handling.handlers import Activity, OperatorRegistry, deduplicated
from kopf._structures.errors import LoginError
from kopf._structures.settings import OperatorSettings

activities_logger = logging.getLogger('kopf._core.engines.activities')


class ActivityError(Exception):
    """An activity (startup, cleanup, login) has failed for good."""

    def __init__(self, msg: str, *, outcomes: dict[str, Any]) -> None:
        super().__init__(msg)
        self.outcomes = outcomes


async def run_activity(*, registry: OperatorRegistry, settings: OperatorSettings, activity: Activity,
                       memo: Any, indices: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """Run all handlers of an activity until each succeeds or fails for good; their results by id.
    The operator's ``indices`` are kwargs too, over any other (as in Kopf).

    As in Kopf, every pass calls the due handlers in the order they were registered, and the
    state (retries, delays, the outcome) is kept by handler id: handlers that share an id (e.g.
    functions of the same name in two modules) all run, count their retries together, and the
    last one's outcome in a pass is the id's. A function registered twice under one id runs once."""
    handlers = deduplicated(h for h in registry._activities if h.activity == activity)
    if activity == Activity.AUTHENTICATION and any(not h._fallback for h in handlers):
        handlers = [h for h in handlers if not h._fallback]  # the operator's own logins win
    handler_logger = logging.getLogger(f'kopf.activities.{activity.value}')
    adapter = logging.LoggerAdapter(handler_logger, {})
    loop = asyncio.get_running_loop()
    states = {h.id: _ActivityState(started=loop.time()) for h in handlers}
    outcomes: dict[str, Outcome] = {}
    while not all(state.final for state in states.values()):
        now = loop.time()
        current: dict[str, Outcome] = {}
        for handler in handlers:
            state = states[handler.id]
            if state.final or state.awake_at > now:
                continue
            runtime = loop.time() - state.started
            kwargs = {'logger': handler_logger, 'memo': memo, 'settings': settings, 'activity': activity,
                      'param': handler.param, 'retry': state.retries,
                      'started': datetime.datetime.now(datetime.UTC) - datetime.timedelta(seconds=runtime),
                      'runtime': datetime.timedelta(seconds=runtime), **(indices or {})}
            current[handler.id] = await execute_once(handler=handler, kwargs=kwargs, logger=adapter,
                                                     retry=state.retries, runtime=runtime, settings=settings)
        now = loop.time()
        for handler_id, outcome in current.items():
            state = states[handler_id]
            state.retries += 1
            state.final = outcome.final
            state.awake_at = now + (outcome.delay or 0)
        outcomes |= current
        waiting = [state.awake_at for state in states.values() if not state.final]
        if waiting:
            await asyncio.sleep(max(0.0, min(waiting) - loop.time()))
    failures = {id: outcome.exception for id, outcome in outcomes.items() if outcome.exception is not None}
    if failures:
        raise ActivityError("One or more handlers failed.", outcomes=failures) from next(iter(failures.values()))
    return {id: outcome.result for id, outcome in outcomes.items() if outcome.result is not None}


@dataclasses.dataclass
class _ActivityState:
    """What an activity's handler id has been through: shared by the handlers of that id."""
    started: float
    retries: int = 0
    final: bool = False
    awake_at: float = 0.0


async def authenticate(*, registry: OperatorRegistry, settings: OperatorSettings, memo: Any,
                       indices: Mapping[str, Any] | None = None,
                       title: str = "Initial authentication") -> dict[str, Any]:
    """The connection to use: the login handlers' result of the highest priority, for the core."""
    activities_logger.info(f"{title} has been initiated.")
    results = await run_activity(registry=registry, settings=settings, activity=Activity.AUTHENTICATION, memo=memo,
                                 indices=indices)
    sessions = {id: info for id, info in results.items() if isinstance(info, AiohttpSession)}
    for session in sessions.values():  # returned to be owned by the operator: close it
        if session.aiohttp_session is not None:
            await session.aiohttp_session.close()
    if sessions:
        raise LoginError(f"The login handler(s) {', '.join(map(repr, sessions))} returned a kopf.AiohttpSession: "
                         "this engine (kopf-rs) calls the API with its core's own HTTP client, not aiohttp. "
                         "Return a kopf.ConnectionInfo instead (certificates, token, proxy_url, trust_env).")
    infos = [info for info in results.values() if isinstance(info, ConnectionInfo)]
    if infos:
        activities_logger.info(f"{title} has finished.")
    else:
        activities_logger.warning(f"{title} has failed: no credentials were retrieved from the login handlers.")
        raise LoginError("Ran out of valid credentials. Consider installing an API client library or adding "
                         "a login handler. See more: https://docs.kopf.dev/en/stable/authentication/")
    best = max(infos, key=lambda info: info.priority)
    # In a pod, let the core re-read the service account's token as it rotates.
    token_file = os.path.join(SERVICE_ACCOUNT, 'token')
    token_path = None
    if best.token and os.path.exists(token_file):
        with open(token_file, encoding='utf-8') as f:
            token_path = token_file if f.read().strip() == best.token else None
    return best.for_engine(token_path=token_path)
