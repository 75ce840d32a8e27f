"""Activities: the operator-level handlers (startup, login, probes, cleanup), each run
until it succeeds or fails for good; and the login that gives the core its connection."""

from __future__ import annotations

import asyncio
import datetime
import logging
import os
from collections.abc import Mapping
from typing import Any

from kopf._credentials import SERVICE_ACCOUNT, AiohttpSession, ConnectionInfo
from kopf._errors import LoginError
from kopf._execution import execute_once
from kopf._handlers import Activity, OperatorRegistry
from kopf._settings import OperatorSettings

activities_logger = logging.getLogger('kopf._core.engines.activities')


class ActivityError(Exception):
    """An activity (startup, cleanup, login) has failed for good."""

    def __init__(self, msg: str, *, outcomes: dict[str, Any]) -> None:
        super().__init__(msg)
        self.outcomes = outcomes


async def run_activity(*, registry: OperatorRegistry, settings: OperatorSettings, activity: Activity,
                       memo: Any, indices: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """Run all handlers of an activity until each succeeds or fails for good; their results by id.
    The operator's ``indices`` are kwargs too, over any other (as in Kopf)."""
    handlers = [h for h in registry._activities if h.activity == activity]
    if activity == Activity.AUTHENTICATION and any(not h._fallback for h in handlers):
        handlers = [h for h in handlers if not h._fallback]  # the operator's own logins win
    handler_logger = logging.getLogger(f'kopf.activities.{activity.value}')
    adapter = logging.LoggerAdapter(handler_logger, {})
    loop = asyncio.get_running_loop()
    pending = {h.id: h for h in handlers}
    retries = dict.fromkeys(pending, 0)
    started = dict.fromkeys(pending, loop.time())
    results: dict[str, Any] = {}
    failures: dict[str, BaseException] = {}
    while pending:
        delays = []
        for handler_id, handler in list(pending.items()):
            runtime = loop.time() - started[handler_id]
            kwargs = {'logger': handler_logger, 'memo': memo, 'settings': settings, 'activity': activity,
                      'param': handler.param, 'retry': retries[handler_id],
                      'started': datetime.datetime.now(datetime.UTC) - datetime.timedelta(seconds=runtime),
                      'runtime': datetime.timedelta(seconds=runtime), **(indices or {})}
            outcome = await execute_once(handler=handler, kwargs=kwargs, logger=adapter, retry=retries[handler_id],
                                         runtime=runtime, settings=settings)
            retries[handler_id] += 1
            if outcome.final:
                del pending[handler_id]
                if outcome.exception is not None:
                    failures[handler_id] = outcome.exception
                elif outcome.result is not None:
                    results[handler_id] = outcome.result
            else:
                delays.append(outcome.delay or 0)
        if pending and delays:
            await asyncio.sleep(min(delays))
    if failures:
        raise ActivityError("One or more handlers failed.", outcomes=failures) from next(iter(failures.values()))
    return results


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
