"""Calling one handler once: sync ones in the executor, async ones on the loop; and
turning what happened (a result, or which error) into an outcome with Kopf's log lines."""

from __future__ import annotations

import asyncio
import contextvars
import dataclasses
import datetime
import functools
import inspect
import logging
import weakref
from collections.abc import Awaitable, Callable
from typing import Any

from kopf._bridge.protocol import Invoked
from kopf._handling import models
from kopf._logs.loggers import log_here
from kopf._structures.errors import (
    ErrorsMode,
    HandlerChildrenRetry,
    HandlerRetriesError,
    HandlerTimeoutError,
    PermanentError,
    TemporaryError,
)

# Whether the core writes a handler's "succeeded" line of this logger (then: whether it posts
# it), or None: logged here (``kopf._logs.loggers.CoreSaying.posted``).
Saying = Callable[[Any], 'bool | None']


@dataclasses.dataclass
class Outcome:
    final: bool
    delay: float | None = None
    result: Any = None
    exception: BaseException | None = None
    # Succeeded, and its "succeeded" line was left to the core: whether the core posts it.
    said_by_core: bool | None = None
    # Failed, and the failure was ignored (``ErrorsMode.IGNORED``): no result, but no success.
    ignored: bool = False

    def for_engine(self, patch: dict[str, Any] | None = None) -> Invoked:
        return {
            'final': self.final,
            'delay': self.delay,
            'result': self.result if self.exception is None else None,
            # As Kopf keeps it in the progress record: the text only (empty for `Exception()`).
            'exception': None if self.exception is None else str(self.exception),
            'failure': None if self.exception is None else _failure(self.exception),
            'error_type': None if self.exception is None else type(self.exception).__qualname__,
            'subrefs': [],
            'patch': patch or None,
        }


def _failure(exception: BaseException) -> str:
    """How a call failed, for the engine's metrics."""
    if isinstance(exception, PermanentError):
        return 'permanent'
    return 'temporary' if isinstance(exception, TemporaryError) else 'exception'


def is_async_fn(fn: Callable[..., Any] | None) -> bool:
    # Asked on every call of a handler (unwrapping it each time was a tenth of a timer's
    # call): remembered while the function lives (sub-handlers are new functions per call).
    try:
        return _ASYNC_FNS[fn]
    except (KeyError, TypeError):  # not seen yet, or neither hashable nor weakly referable
        pass
    found = _is_async_fn(fn)
    try:
        _ASYNC_FNS[fn] = found
    except TypeError:
        pass
    return found


_ASYNC_FNS: weakref.WeakKeyDictionary[Any, bool] = weakref.WeakKeyDictionary()


def _is_async_fn(fn: Callable[..., Any] | None) -> bool:
    if fn is None:
        return False
    if isinstance(fn, functools.partial):
        return _is_async_fn(fn.func)
    if hasattr(fn, '__wrapped__'):
        return _is_async_fn(fn.__wrapped__)
    return inspect.iscoroutinefunction(fn)


# Kopf's order of a handler's keyword arguments: its attempt's, then its cause's, then the
# indices. A handler sees it when it lists its ``**kwargs``, and Python names the first one a
# handler without ``**_`` does not take ("got an unexpected keyword argument 'param'").
_ATTEMPT = ('param', 'retry', 'started', 'runtime', 'logger', 'memo', 'activity', 'settings',
            'resource', 'patch', 'body')
_BODY = ('spec', 'meta', 'status', 'uid', 'name', 'namespace', 'labels', 'annotations', 'stopped')
_CHANGES = {name: i for i, name in enumerate((*_ATTEMPT, 'reason', 'diff', 'old', 'new', 'type', 'event', *_BODY))}
_WEBHOOKS = {name: i for i, name in enumerate((*_ATTEMPT, 'dryrun', 'headers', 'sslpeer', 'userinfo', 'warnings',
                                                'operation', 'subresource', 'old', 'new', 'diff', *_BODY))}


def in_kopfs_order(kwargs: dict[str, Any]) -> dict[str, Any]:
    """The keyword arguments as Kopf orders them; others (the indices) last, as they were."""
    keys = tuple(kwargs)
    ordered = _ORDERED.get(keys)
    if ordered is None:  # once per set of names (a kind of handler, its indices): not sorted per call
        order = _WEBHOOKS if 'dryrun' in kwargs else _CHANGES
        ordered = _ORDERED[keys] = tuple(sorted(keys, key=lambda key: order.get(key, len(order))))
    return {key: kwargs[key] for key in ordered}


_ORDERED: dict[tuple[str, ...], tuple[str, ...]] = {}


async def invoke(fn: Callable[..., Any], kwargs: dict[str, Any], executor: Any = None,
                 is_async: bool | None = None) -> Any:
    """Call the function: awaited if async; in the executor (with the current context) if sync.
    ``is_async``: whether it is, if the caller knows it already."""
    kwargs = in_kopfs_order(kwargs)
    if is_async is None:
        is_async = is_async_fn(fn)
    if is_async:
        return await fn(**kwargs)
    context = contextvars.copy_context()
    future = asyncio.get_running_loop().run_in_executor(executor, functools.partial(context.run, fn, **kwargs))
    # A thread cannot be cancelled: shield it, and pass the cancellation on once it is done.
    cancellation: asyncio.CancelledError | None = None
    while not future.done():
        try:
            await asyncio.shield(future)
        except asyncio.CancelledError as e:
            cancellation = e
    if cancellation is not None:
        raise cancellation
    return future.result()


async def execute_once(*, handler: Any, kwargs: dict[str, Any], logger: logging.LoggerAdapter,  # type: ignore[type-arg]
                       retry: int, runtime: float, settings: Any,
                       default_errors: ErrorsMode = ErrorsMode.TEMPORARY,
                       after: Callable[[], Awaitable[None]] | None = None,
                       is_async: bool | None = None, saying: Saying | None = None) -> Outcome:
    """Run a handler once; interpret its errors by its errors/timeout/retries/backoff options.
    ``after`` runs when the handler has returned, as part of it (its sub-handlers). Its success
    is logged here unless ``saying`` (asked then) leaves the line to the core (``said_by_core``)."""
    try:
        _check_limits(handler, logger, retry, runtime)
        result = await invoke(handler.fn, kwargs, executor=settings.execution.executor, is_async=is_async)
        if after is not None:
            await after()
    except asyncio.CancelledError:
        logger.warning(f"{handler} is cancelled. Will escalate.")
        raise
    except Exception as e:
        return _failed(handler, e, logger, retry, runtime, settings, default_errors)
    return _succeeded(handler, result, logger, saying)


def execute_in_thread(*, handler: Any, kwargs: dict[str, Any], logger: logging.LoggerAdapter,  # type: ignore[type-arg]
                      retry: int, runtime: float, settings: Any,
                      default_errors: ErrorsMode = ErrorsMode.TEMPORARY,
                      after: Callable[[], None] | None = None, saying: Saying | None = None) -> Outcome:
    """The same for a synchronous handler, called directly in the current (worker) thread."""
    try:
        _check_limits(handler, logger, retry, runtime)
        result = handler.fn(**in_kopfs_order(kwargs))
        if after is not None:
            after()
    except Exception as e:
        return _failed(handler, e, logger, retry, runtime, settings, default_errors)
    return _succeeded(handler, result, logger, saying)


def _succeeded(handler: Any, result: Any, logger: logging.LoggerAdapter,  # type: ignore[type-arg]
               saying: Saying | None) -> Outcome:
    result = models.plain(result)
    if getattr(handler, 'quiet', False):
        if logger.isEnabledFor(logging.DEBUG):
            logger.debug(f"{handler} succeeded.")
        return Outcome(final=True, result=result)
    said_by_core = None if saying is None else saying(logger)
    if said_by_core is None:
        log_here(logger, logging.INFO, f"{handler} succeeded.")
    return Outcome(final=True, result=result, said_by_core=said_by_core)


def _check_limits(handler: Any, logger: logging.LoggerAdapter, retry: int, runtime: float) -> None:  # type: ignore[type-arg]
    if logger.isEnabledFor(logging.DEBUG):  # spare the formatting: timers call this often
        logger.debug(f"{handler} is invoked.")
    if handler.timeout is not None and runtime >= handler.timeout:
        raise HandlerTimeoutError(f"{handler} has timed out after {_timedelta_text(runtime)}.")
    if handler.retries is not None and retry >= handler.retries:
        raise HandlerRetriesError(f"{handler} has exceeded {retry} retries.")


def _failed(handler: Any, e: Exception, logger: logging.LoggerAdapter,  # type: ignore[type-arg]
            retry: int, runtime: float, settings: Any, default_errors: ErrorsMode) -> Outcome:
    """What a handler's error means; called while handling it (the traceback is logged)."""
    errors_mode = handler.errors if handler.errors is not None else default_errors
    backoff = handler.backoff if handler.backoff is not None else settings.execution.default_backoff
    if getattr(handler, 'backoff_by_core', False):
        backoff = 0.0  # not known here: the core's backoff of the object decides the next attempt
    timeout, retries = handler.timeout, handler.retries
    if isinstance(e, HandlerChildrenRetry):  # less noise than other retries: nothing failed
        logger.debug(f"{handler} has unfinished sub-handlers. Will retry soon.")
        return Outcome(final=False, exception=e, delay=e.delay)
    if isinstance(e, TemporaryError):
        will_time_out = timeout is not None and runtime + (e.delay or 0) >= timeout
        will_exceed = retries is not None and retry + 1 >= retries
        if will_time_out:
            msg = f"{handler} failed temporarily but will time out after {timeout} seconds: {str(e) or repr(e)}"
            logger.error(msg)
            return Outcome(final=True, exception=HandlerTimeoutError(msg))
        if will_exceed:
            msg = f"{handler} failed temporarily but will exceed {retries} retries: {str(e) or repr(e)}"
            logger.error(msg)
            return Outcome(final=True, exception=HandlerRetriesError(msg))
        logger.error(f"{handler} failed temporarily: {str(e) or repr(e)}")
        return Outcome(final=False, exception=e, delay=e.delay)
    if isinstance(e, HandlerTimeoutError | HandlerRetriesError):
        logger.error(f"{str(e) or repr(e)}")
        return Outcome(final=True, exception=e)
    if isinstance(e, PermanentError):
        logger.error(f"{handler} failed permanently: {str(e) or repr(e)}")
        return Outcome(final=True, exception=e)
    will_time_out = timeout is not None and runtime + backoff >= timeout
    will_exceed = retries is not None and retry + 1 >= retries
    text = str(e) or repr(e)
    if errors_mode == ErrorsMode.IGNORED:
        logger.exception(f"{handler} failed with an exception and will ignore it: {text}")
        return Outcome(final=True, ignored=True)
    if errors_mode == ErrorsMode.TEMPORARY and will_time_out:
        msg = (f"{handler} failed with an exception and will stop now "
               f"(it would time out in {timeout} seconds on the next attempt): {text}")
        logger.exception(msg)
        return Outcome(final=True, exception=HandlerTimeoutError(msg))
    if errors_mode == ErrorsMode.TEMPORARY and will_exceed:
        msg = (f"{handler} failed with an exception and will stop now "
               f"(it would exceed {retries} retries on the next attempt): {text}")
        logger.exception(msg)
        return Outcome(final=True, exception=HandlerRetriesError(msg))
    if errors_mode == ErrorsMode.TEMPORARY and getattr(handler, 'backoff_by_core', False):
        logger.exception(f"{handler} failed with an exception and will try again after the object's backoff: {text}")
        return Outcome(final=False, exception=e)
    if errors_mode == ErrorsMode.TEMPORARY:
        logger.exception(f"{handler} failed with an exception and will try again in {backoff} seconds: {text}")
        return Outcome(final=False, exception=e, delay=backoff)
    logger.exception(f"{handler} failed with an exception and will stop now: {text}")
    return Outcome(final=True, exception=e)


def _timedelta_text(seconds: float) -> str:
    return str(datetime.timedelta(seconds=seconds))
