"""``kopf.event/info/warn/exception``: Kubernetes Events about objects, posted in the background."""

from __future__ import annotations

import contextvars
import json
import logging
import sys
from collections.abc import Iterable, Iterator, Mapping
from typing import Any

from kopf._structures.settings import pauses, posting_level
from kopf._structures.structs import build_object_reference

# The running operator's engine and settings; set for the operator's tasks and threads.
engine_var: contextvars.ContextVar[Any] = contextvars.ContextVar('kopf_engine')
settings_var: contextvars.ContextVar[Any] = contextvars.ContextVar('kopf_settings')


def _walk(objs: Any) -> Iterator[Mapping[str, Any]]:
    if isinstance(objs, Mapping):
        yield objs
    elif isinstance(objs, Iterable) and not isinstance(objs, str | bytes):
        for obj in objs:
            yield from _walk(obj)


def enqueue(*, ref: Mapping[str, Any], type: str, reason: str, message: str,
            backoffs: float | Iterable[float] = (), name: str = 'backoffs') -> None:
    """Queue the Event for the core to post; its ``backoffs`` (named ``name`` in errors) as
    the settings' pauses are taken: a list as it is, any other iterable lazily."""
    drawn: list[Any] = []
    event = {'reference': dict(ref), 'type': type, 'reason': reason, 'message': message,
             'backoffs': pauses(backoffs, name, drawn)}
    engine_var.get().post_event(json.dumps(event), *drawn)


def _post(objs: Any, *, type: str, reason: str, message: str, level: int | None,
          backoffs: float | Iterable[float] | None) -> None:
    settings = settings_var.get()  # a LookupError outside of an operator, as in Kopf
    if settings.posting.enabled and (level is None or posting_level(settings.posting) <= level):
        effective = backoffs if backoffs is not None else settings.posting.default_backoffs
        name = 'backoffs' if backoffs is not None else 'settings.posting.default_backoffs'
        for obj in _walk(objs):
            enqueue(ref=build_object_reference(obj), type=type, reason=reason, message=message,
                    backoffs=effective, name=name)


def event(objs: Any, *, type: str, reason: str, message: str = '',
          backoffs: float | Iterable[float] | None = None) -> None:
    """Post an Event of any type about the object(s); a failed post is retried after
    ``backoffs`` (default: ``settings.posting.default_backoffs``)."""
    _post(objs, type=type, reason=reason, message=message, level=None, backoffs=backoffs)


def info(objs: Any, *, reason: str, message: str = '', backoffs: float | Iterable[float] | None = None) -> None:
    """Post a ``Normal`` Event about the object(s)."""
    _post(objs, type='Normal', reason=reason, message=message, level=logging.INFO, backoffs=backoffs)


def warn(objs: Any, *, reason: str, message: str = '', backoffs: float | Iterable[float] | None = None) -> None:
    """Post a ``Warning`` Event about the object(s)."""
    _post(objs, type='Warning', reason=reason, message=message, level=logging.WARNING, backoffs=backoffs)


def exception(objs: Any, *, reason: str = '', message: str = '', exc: BaseException | None = None,
              backoffs: float | Iterable[float] | None = None) -> None:
    """Post an ``Error`` Event about the object(s), for the given or the current exception."""
    if exc is None:
        exc = sys.exc_info()[1]
    reason = reason or type(exc).__name__
    message = f'{message} {exc}' if message and exc else f'{exc}' if exc else message
    _post(objs, type='Error', reason=reason, message=message, level=logging.ERROR, backoffs=backoffs)
