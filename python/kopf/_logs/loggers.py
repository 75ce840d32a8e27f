"""Logging as Kopf does it: the ``kopf.objects`` logger with ``[namespace/name]`` prefixes,
the ``plain``/``full``/``json`` formats, and optional posting of log lines as Events."""

from __future__ import annotations

import codecs
import io
import logging
import sys
import time
from collections.abc import Mapping, MutableMapping
from typing import TYPE_CHECKING, Any, Self

from kopf._logs import posting as _posting
from kopf._logs.formatting import (
    LogFormat,
    ObjectFormatter,
    ObjectPrefixingTextFormatter,
    ObjectTextFormatter,
    _prefix,
)
from kopf._structures.settings import posting_level
from kopf._structures.structs import LazyRaw

if TYPE_CHECKING:
    from kopf._bridge.protocol import LoggerWriting, LogWriting

objects_logger = logging.getLogger('kopf.objects')
_new = object.__new__  # loggers made without their `__init__` (see `ObjectLogger._made`)


class ObjectLogger(logging.LoggerAdapter):  # type: ignore[type-arg]
    """The ``logger`` kwarg of handlers: messages carry the object's reference."""

    def __init__(self, *, body: Mapping[str, Any], settings: Any) -> None:
        if type(body) is LazyRaw:  # the engine's: not converted for this (no ABC check)
            api_version, kind, name, uid, namespace = body.identity()
        else:
            meta = body.get('metadata', {})
            api_version, kind = body.get('apiVersion'), body.get('kind')
            name, uid, namespace = meta.get('name'), meta.get('uid'), meta.get('namespace')
        super().__init__(objects_logger, {
            'settings': settings,
            'k8s_skip': False,
            'k8s_ref': {'apiVersion': api_version, 'kind': kind, 'name': name, 'uid': uid, 'namespace': namespace},
        })

    @classmethod
    def _made(cls, ref: dict[str, Any], settings: Any) -> Self:
        """The same logger as ``cls(body=..., settings=...)``, for an object's reference read
        already: made for every handler call, without ``__init__``'s reading of the body."""
        logger = _new(cls)
        extra = {'settings': settings, 'k8s_skip': False, 'k8s_ref': ref}
        logging.LoggerAdapter.__init__(logger, objects_logger, extra)
        return logger

    def process(self, msg: str, kwargs: MutableMapping[str, Any]) -> tuple[str, MutableMapping[str, Any]]:
        kwargs['extra'] = dict(self.extra or {}) | dict(kwargs.get('extra') or {})
        return msg, kwargs


def log_here(logger: logging.Logger | logging.LoggerAdapter,  # type: ignore[type-arg]
             level: int, msg: str, extra: Mapping[str, Any] | None = None) -> None:
    """``logger.log(level, msg, extra=extra)`` with the same record, as if called where this
    is called, but without logging's search of the stack for the caller on every line
    (a fifth of the cost of the engine's own lines, such as "Timer 'x' succeeded.")."""
    if not logger.isEnabledFor(level):
        return
    local = False
    if isinstance(logger, logging.LoggerAdapter):
        local = type(logger) in _LOCAL_LOGGERS
        if type(logger) is not ObjectLogger and not local:  # may log differently: as it does
            # The caller as logging finds it: ours, unless the adapter's own `log()` is.
            stacklevel = 2 if type(logger).log is logging.LoggerAdapter.log else 1
            if extra is None:  # (a LocalObjectLogger needs a mapping if there is one at all)
                logger.log(level, msg, stacklevel=stacklevel)
            else:
                logger.log(level, msg, stacklevel=stacklevel, extra=extra)
            return
        if local and type(logger).process is ObjectLogger.process:
            # What its `log()` adds, merged as `process()` would merge it: in one dict.
            target, extra = logger.logger, {**(logger.extra or {}), **(extra or {}), 'k8s_skip': True}
        elif local:  # what its `log()` adds, and where logging finds the caller: in that `log()`
            msg, kwargs = logger.process(msg, {'extra': dict(extra or {}, k8s_skip=True)})
            target, extra = logger.logger, kwargs.get('extra')
        elif extra or type(logger).process is not ObjectLogger.process:
            msg, kwargs = logger.process(msg, {'extra': extra} if extra else {})
            target, extra = logger.logger, kwargs.get('extra')
        else:  # what `process()` would make: a copy of the adapter's own fields, only read
            target, extra = logger.logger, logger.extra
    else:
        target = logger
    if type(target) is not logging.Logger:  # a custom class may find or make records its way
        target.log(level, msg, extra=extra, stacklevel=2)
        return
    if _write_directly(target, level, msg, extra):
        return
    if not logging._srcfile:  # no callers at all, as logging is told
        where = "(unknown file)", 0, "(unknown function)"
    elif local:
        where = _LOCAL_CALLER
    else:
        frame = sys._getframe(1)
        where = frame.f_code.co_filename, frame.f_lineno, frame.f_code.co_name
    record = target.makeRecord(target.name, level, where[0], where[1], msg, (), None, where[2], extra, None)
    target.handle(record)


# The formats whose lines `_write_directly` makes itself (their fields are all it knows), and
# whether the format has the time.
_DIRECT_FORMATS = {LogFormat.FULL.value: True, LogFormat.PLAIN.value: False}
# The full format's text between the time and the message, by logger and level name: the
# padded names, made once (formatting the whole line with `%` was a third of the line's cost).
_FULL_MIDDLES: dict[tuple[str, str], str] = {}


def _full_middle(name: str, levelname: str) -> str:
    middle = _FULL_MIDDLES.get((name, levelname))
    if middle is None:
        middle = f"{name:<20.20} [{levelname:<8.8}] "  # as `%(name)-20.20s [%(levelname)-8.8s] `
        if len(_FULL_MIDDLES) < 256:  # (loggers' names are few, but a program may make many)
            _FULL_MIDDLES[name, levelname] = middle
    return middle


def _stream_writer(target: logging.Logger, level: int, *,
                   posted: bool, poster: bool = False) -> logging.StreamHandler | None:  # type: ignore[type-arg]
    """``kopf run``'s own stream handler, if it is all that logging would give a line of this
    logger and level to, with a format whose fields are all that ``_write_directly`` knows;
    else None. K8sPoster does not count for a line it would not post, nor if the writer posts
    the line itself (``poster``). Anything else that might see or change the record (a
    filter, a handler or formatter of the operator's own, a record factory) takes logging's way."""
    if target.disabled or target.filters or logging.getLogRecordFactory() is not logging.LogRecord:
        return None
    if type(target) is not logging.Logger or target.manager.disable >= level:
        return None
    writer: logging.StreamHandler | None = None  # type: ignore[type-arg]
    logger: logging.Logger | None = target
    while logger is not None:
        for handler in logger.handlers:
            if level < handler.level:
                continue
            if handler.filters:
                return None
            if type(handler) is K8sPoster and (not posted or poster):
                continue
            if type(handler) is not _KopfStreamHandler or writer is not None:
                return None
            writer = handler
        logger = logger.parent if logger.propagate else None
    if writer is None:
        return None
    formatter = writer.formatter
    if type(formatter) is not ObjectTextFormatter and type(formatter) is not ObjectPrefixingTextFormatter:
        return None
    style = formatter._style  # what formats a record's fields (its format is the formatter's)
    if (_DIRECT_FORMATS.get(style._fmt or '') is None or type(style) is not logging.PercentStyle
            or formatter.datefmt or formatter.converter is not time.localtime or 'format' in formatter.__dict__):
        return None
    return writer


def _write_directly(target: logging.Logger, level: int, msg: str, extra: Mapping[str, Any] | None) -> bool:
    """Write the line to ``kopf run``'s own stream handler without a record, if that handler
    is all that logging would give the record to (see ``_stream_writer``), formatting it as
    its formatter would: a record's making and its way through logging were half the Python
    time of an ``on.event`` handler's or a timer's call, for the "succeeded" line alone.
    Whether it was written (not a line to be posted: K8sPoster posts it from its record)."""
    writer = _stream_writer(target, level, posted=_posted(extra or {}, level))
    if writer is None:
        return False
    formatter = writer.formatter
    assert formatter is not None
    timed = _DIRECT_FORMATS[formatter._style._fmt or '']
    ref = extra.get('k8s_ref') if extra and type(formatter) is ObjectPrefixingTextFormatter else None
    if ref is not None:
        msg = f"{_prefix(ref)} {msg}"
    if timed:
        created = time.time()  # as a record's: its milliseconds, truncated
        asctime = formatter._asctime(created, int((created - int(created)) * 1000) + 0.0)  # type: ignore[attr-defined]
        line = f"[{asctime}] {_full_middle(target.name, logging.getLevelName(level))}{msg}"
    else:
        line = msg  # the plain format's only field
    writer.acquire()
    try:
        stream = writer.stream
        stream.write(line + writer.terminator)
        if type(writer).flush is not logging.StreamHandler.flush:
            writer.flush()
        elif stream and hasattr(stream, 'flush'):  # as that `flush()` does; its lock is held already
            stream.flush()
    except RecursionError:  # as logging's own handlers let it through
        raise
    except Exception:
        writer.handleError(target.makeRecord(target.name, level, "(unknown file)", 0, msg, (), None,
                                             extra=extra))
    finally:
        writer.release()
    return True


# The levels at which the core writes lines (`python_level` of its `tracing` levels).
_CORE_LEVELS = (logging.DEBUG, logging.INFO, logging.WARNING, logging.ERROR)


def core_writing(names: list[str], settings: Any) -> LogWriting | None:
    """Which of the core's lines it may write to ``kopf run``'s stream itself: those that
    logging would give only to that handler (with a real file under it, in UTF-8, flushed
    line by line), formatted as it would; and which of them the core also posts as Events
    (lines about objects, as K8sPoster would post them). None if none: all go to logging."""
    posting = settings.posting
    posts = bool(posting.enabled and posting.loggers)
    fd: int | None = None
    timed = prefixed = False
    loggers: dict[str, LoggerWriting] = {}
    for name in names:
        target = logging.getLogger(name)
        levels: list[int] = []
        posted: list[int] = []
        for level in _CORE_LEVELS:
            if not target.isEnabledFor(level):
                continue
            # A line about an object is posted if K8sPoster is on its way (kopf.objects' own).
            poster = posts and level >= posting_level(posting) and _has_poster(target, level)
            writer = _stream_writer(target, level, posted=True, poster=True)
            if writer is None or type(writer).flush is not logging.StreamHandler.flush:
                continue
            stream = writer.stream
            try:
                stream_fd = stream.fileno()
            except (AttributeError, OSError, ValueError):  # not a file (captured, e.g. in tests)
                continue
            # (In UTF-8, any text of the core's encodes: the stream's error handler never acts.)
            if (writer.terminator != '\n' or not isinstance(stream, io.TextIOWrapper)
                    or codecs.lookup(stream.encoding).name != 'utf-8'):
                continue
            formatter = writer.formatter
            assert formatter is not None
            if fd is not None and stream_fd != fd:
                continue
            fd, timed = stream_fd, _DIRECT_FORMATS[formatter._style._fmt or '']
            prefixed = type(formatter) is ObjectPrefixingTextFormatter
            levels.append(level)
            if poster:
                posted.append(level)
        if levels:
            loggers[name] = {'levels': levels, 'posted': posted}
    if fd is None:
        return None
    return {'fd': fd, 'timed': timed, 'prefixed': prefixed, 'loggers': loggers,
            'levelnames': {str(level): logging.getLevelName(level) for level in _CORE_LEVELS},
            'event_types': {str(level): _event_type(level) for level in _CORE_LEVELS},
            'event_reason': _EVENT_REASON}


class CoreSaying:
    """Whether the core writes a handler's "succeeded" line (INFO, ``kopf.objects``) itself,
    as it writes its own lines (``core_writing``): the handler's thread then only says so in
    its answer. Logging that line in Python was a third of an ``on.event`` handler's call,
    and more for a posted one (a record, its formatting, the Event's queueing).

    Decided at start as the core's writing is, and checked again for every line: a handler
    or filter added to logging since then, or a level or posting changed, takes logging's way."""

    def __init__(self, writing: LogWriting | None) -> None:
        objects = None if writing is None else writing['loggers'].get(objects_logger.name)
        self._posts = objects is not None and logging.INFO in objects['posted']
        self._writer = None
        if objects is not None and logging.INFO in objects['levels']:
            self._writer = _stream_writer(objects_logger, logging.INFO, posted=True, poster=True)
        self._stream = None if self._writer is None else self._writer.stream

    def posted(self, logger: Any) -> bool | None:
        """For a handler's ``logger``: None if the line is Python's to log; else whether the
        core posts it as an Event too (the local loggers' lines are never posted)."""
        if self._writer is None:
            return None
        kind = type(logger)
        if kind is ObjectLogger:
            posted = True
        elif kind is LocalObjectLogger:
            posted = False
        else:  # the terse ones are quieter than the level says; the operator's own may be anything
            return None
        if logger.logger is not objects_logger or not objects_logger.isEnabledFor(logging.INFO):
            return None
        if posted and _posted(logger.extra, logging.INFO) != self._posts:
            return None
        writer = _stream_writer(objects_logger, logging.INFO, posted=posted, poster=True)
        if writer is not self._writer or writer.stream is not self._stream:
            return None
        return posted and self._posts


def _has_poster(target: logging.Logger, level: int) -> bool:
    logger: logging.Logger | None = target
    while logger is not None:
        if any(type(h) is K8sPoster and level >= h.level for h in logger.handlers):
            return True
        logger = logger.parent if logger.propagate else None
    return False


class LocalObjectLogger(ObjectLogger):
    """An object logger whose messages are never posted as Events (for ``on.event``)."""

    def log(self, *args: Any, **kwargs: Any) -> None:
        kwargs['extra'] = dict(kwargs.pop('extra', {}), k8s_skip=True)
        super().log(*args, **kwargs)


class TerseObjectLogger(LocalObjectLogger):
    """A local object logger one level quieter below warnings (for ``@kopf.index``: called
    for every event of many objects): infos only in the verbose mode, debugs never."""

    def isEnabledFor(self, level: int) -> bool:
        return super().isEnabledFor(level if level >= logging.WARNING else level - 10)


# The local loggers' lines as `log_here` makes them (as their `log()` would, without
# logging's search of the stack): the caller is that `log()`'s last line, calling logging.
_LOCAL_LOGGERS = frozenset({LocalObjectLogger, TerseObjectLogger})
_LOCAL_CALLER = (LocalObjectLogger.log.__code__.co_filename,
                 max(line for *_, line in LocalObjectLogger.log.__code__.co_lines() if line is not None),
                 LocalObjectLogger.log.__code__.co_name)


class _KopfStreamHandler(logging.StreamHandler):  # type: ignore[type-arg]
    pass


def make_formatter(log_format: LogFormat | str = LogFormat.FULL, log_prefix: bool | None = False,
                   log_refkey: str | None = None) -> ObjectFormatter:
    log_prefix = log_prefix if log_prefix is not None else log_format is not LogFormat.JSON
    if log_format is LogFormat.JSON:
        from kopf._logs.jsonlogging import ObjectJsonFormatter, ObjectPrefixingJsonFormatter
        return ObjectPrefixingJsonFormatter(refkey=log_refkey) if log_prefix else ObjectJsonFormatter(refkey=log_refkey)
    text = log_format.value if isinstance(log_format, LogFormat) else log_format
    if not isinstance(text, str):
        raise ValueError(f"Unsupported log format: {log_format!r}")
    return ObjectPrefixingTextFormatter(text) if log_prefix else ObjectTextFormatter(text)


def configure(debug: bool | None = None, verbose: bool | None = None, quiet: bool | None = None,
              log_format: LogFormat = LogFormat.FULL, log_prefix: bool | None = False,
              log_refkey: str | None = None) -> None:
    """Set up the root logger as ``kopf run`` does (also for embedded operators)."""
    level = 'DEBUG' if debug or verbose else 'WARNING' if quiet else 'INFO'
    handler = _KopfStreamHandler()
    handler.setFormatter(make_formatter(log_format=log_format, log_prefix=log_prefix, log_refkey=log_refkey))
    root = logging.getLogger()
    root.handlers[:] = [h for h in root.handlers if not isinstance(h, _KopfStreamHandler)]
    root.addHandler(handler)
    root.setLevel(level)
    asyncio_logger = logging.getLogger('asyncio')
    asyncio_logger.propagate = bool(debug)
    if not debug:
        asyncio_logger.handlers[:] = [logging.NullHandler()]


class K8sPoster(logging.Handler):
    """Post object-related log lines as Events, if ``settings.posting.loggers`` says so."""

    def filter(self, record: logging.LogRecord) -> bool:
        return _posted(record.__dict__, record.levelno) and bool(super().filter(record))

    def emit(self, record: logging.LogRecord) -> None:
        try:
            ref = record.__dict__['k8s_ref']  # set by the object loggers (checked in `filter`)
            backoffs = record.__dict__['settings'].posting.logging_backoffs
            _posting.enqueue(ref=ref, type=_event_type(record.levelno), reason=_EVENT_REASON,
                             message=self.format(record), backoffs=backoffs,
                             name='settings.posting.logging_backoffs')
        except Exception:
            self.handleError(record)


# The Events of posted log lines: their reason, and their type by the line's level (the core
# posts the lines it writes itself with these too: `core_writing`).
_EVENT_REASON = 'Logging'


def _event_type(level: int) -> str:
    return ('Debug' if level <= logging.DEBUG else 'Normal' if level <= logging.INFO
            else 'Warning' if level <= logging.WARNING else 'Error' if level <= logging.ERROR
            else 'Fatal' if level <= logging.FATAL else logging.getLevelName(level).capitalize())


def _posted(fields: Mapping[str, Any], level: int) -> bool:
    """Whether a line with these fields (a record's, or the ones it would have) is posted."""
    settings = fields.get('settings')
    if settings is None or 'k8s_ref' not in fields or fields.get('k8s_skip', False):
        return False
    posting = settings.posting
    return bool(posting.enabled and posting.loggers and level >= posting_level(posting))


objects_logger.addHandler(K8sPoster())


def __getattr__(name: str) -> Any:
    # The JSON formatters import python-json-logger: only when the JSON format is asked for,
    # or they are named (they bring pathlib into every operator otherwise).
    if name in ('ObjectJsonFormatter', 'ObjectPrefixingJsonFormatter'):
        from kopf._logs import jsonlogging as _jsonlogging
        return getattr(_jsonlogging, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
