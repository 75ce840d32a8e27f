"""The engine's own log lines (`log_here`) and the time in `kopf run`'s formats: the same
records and the same text as `logging` makes by itself, only cheaper."""

import contextlib
import io
import json
import logging
import re
import time
from collections.abc import Iterator
from typing import Any

import pytest
from kopf import OperatorSettings, _engine
from kopf._bridge import protocol as _protocol
from kopf._logs import posting as _posting
from kopf._logs.loggers import (
    CoreSaying,
    LocalObjectLogger,
    LogFormat,
    ObjectLogger,
    TerseObjectLogger,
    _full_middle,
    _KopfStreamHandler,
    configure,
    core_writing,
    log_here,
    make_formatter,
)

BODY = {'apiVersion': 'demo.kopf.dev/v1', 'kind': 'Greeting',
        'metadata': {'name': 'n1', 'namespace': 'ns1', 'uid': 'u1'}}
# What logging puts into every record by itself, or a formatter of the time adds (and
# differs between two calls).
VARYING = {'created', 'msecs', 'relativeCreated', 'lineno', 'taskName', 'asctime'}


class Records(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


@pytest.fixture
def records() -> Iterator[list[logging.LogRecord]]:
    handler = Records()
    logger = logging.getLogger('kopf.objects')
    logger.addHandler(handler)
    level = logger.level
    logger.setLevel(logging.DEBUG)  # (setLevel, not the attribute: it clears the loggers' caches)
    try:
        yield handler.records
    finally:
        logger.removeHandler(handler)
        logger.setLevel(level)


def fields(record: logging.LogRecord) -> dict[str, object]:
    return {key: value for key, value in vars(record).items() if key not in VARYING}


def both_ways(logger: logging.Logger | logging.LoggerAdapter, level: int,  # type: ignore[type-arg]
              extra: dict[str, object] | None = None) -> None:
    """Log a line both ways, from two lines one after the other."""
    logger.log(level, "Handler 'h' succeeded.", **({'extra': extra} if extra is not None else {}))
    log_here(logger, level, "Handler 'h' succeeded.", extra)


def test_an_object_loggers_line_is_the_record_logging_makes(records: list[logging.LogRecord]) -> None:
    both_ways(ObjectLogger(body=BODY, settings=None), logging.INFO)
    direct, fast = records
    assert fields(fast) == fields(direct)
    assert fast.lineno == direct.lineno + 1
    assert fast.funcName == 'both_ways' and fast.pathname == __file__
    assert fast.k8s_ref == {'apiVersion': 'demo.kopf.dev/v1', 'kind': 'Greeting',  # type: ignore[attr-defined]
                            'name': 'n1', 'uid': 'u1', 'namespace': 'ns1'}


def test_a_plain_loggers_line_with_extras_is_the_record_logging_makes(records: list[logging.LogRecord]) -> None:
    extra = {'k8s_ref': {'name': 'n1'}, 'k8s_skip': False}
    both_ways(logging.getLogger('kopf.objects'), logging.WARNING, extra)
    direct, fast = records
    assert fields(fast) == fields(direct)
    assert fast.lineno == direct.lineno + 1


@pytest.mark.parametrize('cls', [LocalObjectLogger, TerseObjectLogger])
@pytest.mark.parametrize('extra', [None, {'k8s_ref': {'name': 'other'}}])
def test_a_local_loggers_line_is_the_record_its_log_makes(records: list[logging.LogRecord],
                                                           cls: type[LocalObjectLogger],
                                                           extra: dict[str, object] | None) -> None:
    both_ways(cls(body=BODY, settings=None), logging.WARNING, extra)
    direct, fast = records
    assert fast.k8s_skip is True  # type: ignore[attr-defined]  # what LocalObjectLogger adds
    assert fields(fast) == fields(direct)
    assert fast.lineno == direct.lineno  # both in the adapter's own `log()`, as in Kopf
    assert fast.funcName == 'log' and fast.pathname.endswith('_logs/loggers.py')


def test_other_adapters_log_their_own_way(records: list[logging.LogRecord]) -> None:
    class Adapter(logging.LoggerAdapter):  # type: ignore[type-arg]
        def log(self, level: int, msg: object, *args: object, **kwargs: object) -> None:
            super().log(level, f"adapted: {msg}", *args, **kwargs)  # type: ignore[arg-type]

    both_ways(Adapter(logging.getLogger('kopf.objects')), logging.INFO)
    direct, fast = records
    assert fast.getMessage() == direct.getMessage() == "adapted: Handler 'h' succeeded."
    assert fields(fast) == fields(direct)
    assert fast.lineno == direct.lineno  # both in the adapter's own `log()`


def test_loggers_of_other_classes_log_their_own_way_from_the_callers_line() -> None:
    class CustomLogger(logging.Logger):
        pass

    logger, handler = CustomLogger('kopf.test.custom'), Records()
    logger.addHandler(handler)
    both_ways(logger, logging.INFO)
    direct, fast = handler.records
    assert fields(fast) == fields(direct)
    assert fast.lineno == direct.lineno + 1 and fast.funcName == 'both_ways'


def test_lines_below_the_level_are_not_made(records: list[logging.LogRecord]) -> None:
    logging.getLogger('kopf.objects').setLevel(logging.INFO)
    log_here(ObjectLogger(body=BODY, settings=None), logging.DEBUG, "Not seen.")
    assert records == []


def test_without_callers_as_logging_is_told(records: list[logging.LogRecord],
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(logging, '_srcfile', None)
    both_ways(ObjectLogger(body=BODY, settings=None), logging.INFO)
    direct, fast = records
    assert fields(fast) == fields(direct)
    assert (fast.pathname, fast.lineno, fast.funcName) == ("(unknown file)", 0, "(unknown function)")


@pytest.mark.parametrize('created', [0.0, 1.5, 1764000000.999, 1764003599.0005, 1764003600.25])
@pytest.mark.parametrize('log_format', [LogFormat.FULL, '%(asctime)s %(message)s'])
def test_the_time_is_as_logging_writes_it(created: float, log_format: LogFormat | str) -> None:
    ours = make_formatter(log_format)
    theirs = logging.Formatter(log_format.value if isinstance(log_format, LogFormat) else log_format)
    for _ in range(2):  # the second time from what was formatted the first time
        record = logging.LogRecord('kopf.objects', logging.INFO, __file__, 1, "Hello.", None, None)
        record.created, record.msecs = created, (created - int(created)) * 1000
        assert ours.format(record) == theirs.format(record)


def test_the_time_follows_the_formatters_settings(monkeypatch: pytest.MonkeyPatch) -> None:
    record = logging.LogRecord('kopf.objects', logging.INFO, __file__, 1, "Hello.", None, None)
    formatter = make_formatter('%(asctime)s')
    formatter.format(record)  # remembers this second's text
    formatter.converter = time.gmtime  # type: ignore[method-assign]
    assert formatter.formatTime(record) == logging.Formatter.formatTime(formatter, record)
    formatter.converter = time.localtime  # type: ignore[method-assign]
    monkeypatch.setattr(logging.Formatter, 'default_time_format', '%H:%M:%S')
    monkeypatch.setattr(logging.Formatter, 'default_msec_format', None)
    assert formatter.formatTime(record) == time.strftime('%H:%M:%S', time.localtime(record.created))
    assert formatter.formatTime(record, '%Y') == time.strftime('%Y', time.localtime(record.created))


# `kopf run`'s own handler alone, as `configure()` sets it up: the lines are written without
# records, and must be what logging would have written.

TIME = re.compile(r'^\[\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3}\] ')


@pytest.fixture
def kopf_run_logging(monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[io.StringIO, list[logging.LogRecord]]]:
    """`kopf run`'s logging into a buffer; the records that logging makes, as they are made."""
    stream, made = io.StringIO(), []
    root, objects = logging.getLogger(), logging.getLogger('kopf.objects')
    saved = root.handlers[:], root.level, objects.level
    make_record = logging.Logger.makeRecord

    def recording(self: logging.Logger, *args: Any, **kwargs: Any) -> logging.LogRecord:
        made.append(record := make_record(self, *args, **kwargs))
        return record

    monkeypatch.setattr(logging.Logger, 'makeRecord', recording)
    try:
        yield stream, made
    finally:
        root.handlers[:] = saved[0]
        root.setLevel(saved[1])
        objects.setLevel(saved[2])


def kopf_run(stream: io.TextIOBase, **options: Any) -> None:
    """Logging as `kopf run` sets it up, into the stream, without pytest's capturing handlers."""
    configure(**options)
    root = logging.getLogger()
    root.handlers[:] = [handler for handler in root.handlers if isinstance(handler, _KopfStreamHandler)]
    root.handlers[0].setStream(stream)  # type: ignore[attr-defined]


def both_lines(stream: io.StringIO, logger: logging.LoggerAdapter) -> tuple[str, str]:  # type: ignore[type-arg]
    """A line as logging writes it, and as `log_here` does, without their times."""
    logger.info("Handler 'h' succeeded.")
    log_here(logger, logging.INFO, "Handler 'h' succeeded.")
    theirs, ours = stream.getvalue().splitlines()[-2:]
    return TIME.sub('[T] ', theirs), TIME.sub('[T] ', ours)


@pytest.mark.parametrize('log_format', [LogFormat.FULL, LogFormat.PLAIN])
@pytest.mark.parametrize('log_prefix', [True, False])
@pytest.mark.parametrize('cls', [LocalObjectLogger, TerseObjectLogger])
def test_a_line_written_directly_is_the_line_logging_writes(
        kopf_run_logging: tuple[io.StringIO, list[logging.LogRecord]], cls: type[LocalObjectLogger],
        log_format: LogFormat, log_prefix: bool) -> None:
    stream, made = kopf_run_logging
    kopf_run(stream, verbose=True, log_format=log_format, log_prefix=log_prefix)
    theirs, ours = both_lines(stream, cls(body=BODY, settings=OperatorSettings()))
    assert ours == theirs
    assert len(made) == 1  # logging's own line; ours had no record
    if log_format is LogFormat.FULL:
        assert TIME.match(stream.getvalue().splitlines()[1])
        assert ours == f"[T] kopf.objects         [INFO    ] {'[ns1/n1] ' if log_prefix else ''}Handler 'h' succeeded."


def test_lines_posted_as_events_are_records(kopf_run_logging: tuple[io.StringIO, list[logging.LogRecord]],
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    stream, made = kopf_run_logging
    posted: list[dict[str, Any]] = []
    monkeypatch.setattr(_posting, 'enqueue', lambda **kwargs: posted.append(kwargs))
    kopf_run(stream, log_prefix=True)
    settings = OperatorSettings()
    theirs, ours = both_lines(stream, ObjectLogger(body=BODY, settings=settings))
    assert len(made) == 1 and posted == []  # not posted by default: written directly
    settings.posting.loggers = True
    theirs, ours = both_lines(stream, ObjectLogger(body=BODY, settings=settings))
    assert ours == theirs
    assert len(made) == 3 and len(posted) == 2
    assert posted[1]['message'] == "Handler 'h' succeeded."


@pytest.mark.parametrize('change', ['a filter', 'a handler', 'a formatter', 'a record factory', 'a level'])
def test_lines_are_records_when_anything_else_may_see_them(
        kopf_run_logging: tuple[io.StringIO, list[logging.LogRecord]], monkeypatch: pytest.MonkeyPatch,
        change: str) -> None:
    stream, made = kopf_run_logging
    kopf_run(stream, log_prefix=True)
    handler = logging.getLogger().handlers[-1]
    seen: list[logging.LogRecord] = []
    if change == 'a filter':
        handler.addFilter(lambda record: seen.append(record) or True)
    elif change == 'a handler':
        other = Records()
        seen = other.records
        monkeypatch.setattr(logging.getLogger('kopf'), 'handlers', [other])  # (put back after)
    elif change == 'a formatter':
        handler.setFormatter(logging.Formatter('%(levelname)s %(funcName)s %(message)s'))
    elif change == 'a record factory':
        monkeypatch.setattr(logging, '_logRecordFactory', lambda *args, **kwargs: seen.append(
            record := logging.LogRecord(*args, **kwargs)) or record)
    elif change == 'a level':  # a handler that takes fewer lines: nothing is written
        handler.setLevel(logging.WARNING)
    log_here(LocalObjectLogger(body=BODY, settings=OperatorSettings()), logging.INFO, "Hello.")
    if change == 'a level':
        assert stream.getvalue() == ""
        return
    assert len(made) == 1
    assert seen == made or change == 'a formatter'
    if change == 'a formatter':
        assert stream.getvalue() == "INFO log Hello.\n"


@pytest.mark.parametrize('name', ['kopf.objects', 'kopf', 'a.logger.with.a.name.longer.than.twenty', 'ünïcode'])
@pytest.mark.parametrize('level', [logging.DEBUG, logging.INFO, logging.WARNING, 25, 1])
def test_the_full_formats_text_around_the_message_is_what_percent_formatting_makes(name: str, level: int) -> None:
    logging.addLevelName(25, 'A LONG LEVEL NAME')  # cut to its first 8 characters, as `%-8.8s` does
    try:
        levelname = logging.getLevelName(level)
        fields = {'asctime': '2026-11-26 21:00:00,123', 'name': name, 'levelname': levelname, 'message': 'M'}
        assert f"[{fields['asctime']}] {_full_middle(name, levelname)}M" == LogFormat.FULL.value % fields
        assert _full_middle(name, levelname) is _full_middle(name, levelname)  # made once
    finally:
        del logging._levelToName[25]
        del logging._nameToLevel['A LONG LEVEL NAME']


# The core's own lines: which of them it writes to `kopf run`'s stream itself (`core_writing`).

CORE_LOGGERS = ['kopf.objects', 'kopf._core.engine']


@pytest.fixture
def kopf_run_file(kopf_run_logging: tuple[io.StringIO, list[logging.LogRecord]],
                  tmp_path: Any) -> Iterator[io.TextIOWrapper]:
    """A real file (as `kopf run`'s stderr is), in UTF-8, for `kopf_run()` in the test (where
    pytest's own handlers are added)."""
    with open(tmp_path / 'stderr', 'w', encoding='utf-8') as file:
        yield file


def test_the_core_writes_the_lines_only_kopf_runs_handler_takes(kopf_run_file: io.TextIOWrapper) -> None:
    kopf_run(kopf_run_file, log_prefix=True)
    settings = OperatorSettings()
    writing = core_writing(CORE_LOGGERS, settings)
    assert writing is not None
    assert writing['fd'] == kopf_run_file.fileno()
    assert (writing['timed'], writing['prefixed']) == (True, True)
    # INFO and above (DEBUG is below the level); none posted: `posting.loggers` is off by default.
    assert writing['loggers'] == {name: {'levels': [20, 30, 40], 'posted': []} for name in CORE_LOGGERS}
    assert writing['levelnames'] == {'10': 'DEBUG', '20': 'INFO', '30': 'WARNING', '40': 'ERROR'}
    # The contract with the core: it reads every key, and this answer as it is.
    assert json.loads(_engine.log_writing_as_read(json.dumps(writing))) == writing
    assert set(writing) == set(_protocol.LogWriting.__annotations__)


def test_the_core_posts_the_object_lines_that_kopfs_poster_would_post(kopf_run_file: io.TextIOWrapper) -> None:
    kopf_run(kopf_run_file, log_prefix=True)
    settings = OperatorSettings()
    settings.posting.loggers = True
    settings.posting.level = logging.WARNING
    writing = core_writing(CORE_LOGGERS, settings)
    assert writing is not None
    assert writing['loggers']['kopf.objects'] == {'levels': [20, 30, 40], 'posted': [30, 40]}
    assert writing['loggers']['kopf._core.engine'] == {'levels': [20, 30, 40], 'posted': []}  # no poster there


@contextlib.contextmanager
def logging_changed(change: str, settings: OperatorSettings | None = None) -> Iterator[None]:
    """Something that may see or change the lines, added to `kopf run`'s logging (undone after)."""
    objects = logging.getLogger('kopf.objects')
    if change == 'a filter':
        objects.addFilter(lambda record: True)
    elif change == 'a handler':
        objects.addHandler(logging.NullHandler())
    elif change == 'JSON':
        logging.getLogger().handlers[0].setFormatter(make_formatter(LogFormat.JSON))
    elif change == 'a captured stream':
        logging.getLogger().handlers[0].setStream(io.StringIO())  # type: ignore[attr-defined]
    elif change == 'a level':
        objects.setLevel(logging.WARNING)
    elif change == 'disabled':
        logging.disable(logging.INFO)
    elif change == 'posting':
        assert settings is not None
        settings.posting.loggers = True
    try:
        yield
    finally:
        objects.filters.clear()
        objects.handlers[:] = [h for h in objects.handlers if not isinstance(h, logging.NullHandler)]
        objects.setLevel(logging.NOTSET)
        logging.disable(logging.NOTSET)


@pytest.mark.parametrize('change', ['a filter', 'a handler', 'JSON', 'a captured stream', 'disabled'])
def test_lines_that_anything_else_may_see_go_to_logging(kopf_run_file: io.TextIOWrapper, change: str) -> None:
    kopf_run(kopf_run_file, log_prefix=True)
    with logging_changed(change):
        writing = core_writing(CORE_LOGGERS, OperatorSettings())
    if change in ('a filter', 'a handler'):  # that logger only
        assert writing is not None and 'kopf.objects' not in writing['loggers']
        assert writing['loggers']['kopf._core.engine']['levels'] == [20, 30, 40]
    elif change == 'disabled':
        assert writing is not None and writing['loggers']['kopf.objects']['levels'] == [30, 40]
    else:
        assert writing is None


# The handlers' "succeeded" lines: which the core writes (and posts) for the handlers' threads.

@pytest.mark.parametrize('posting', [False, True])
def test_the_core_says_the_object_loggers_successes_as_it_writes_its_own(
        kopf_run_file: io.TextIOWrapper, posting: bool) -> None:
    kopf_run(kopf_run_file, log_prefix=True)
    settings = OperatorSettings()
    settings.posting.loggers = posting
    saying = CoreSaying(core_writing(CORE_LOGGERS, settings))
    # Posted as the object logger's lines are; a local logger's never; a terse one's: Python's.
    assert saying.posted(ObjectLogger(body=BODY, settings=settings)) is posting
    assert saying.posted(LocalObjectLogger(body=BODY, settings=settings)) is False
    assert saying.posted(TerseObjectLogger(body=BODY, settings=settings)) is None
    assert saying.posted(logging.LoggerAdapter(logging.getLogger('kopf.objects'))) is None


@pytest.mark.parametrize('change', ['a filter', 'a handler', 'a captured stream', 'a level', 'posting', 'disabled'])
def test_the_successes_are_pythons_again_when_anything_may_see_them_since(
        kopf_run_file: io.TextIOWrapper, change: str) -> None:
    """Decided with the core's writing, and checked again for every line (unlike the core's own)."""
    kopf_run(kopf_run_file, log_prefix=True)
    settings = OperatorSettings()
    saying = CoreSaying(core_writing(CORE_LOGGERS, settings))
    logger = ObjectLogger(body=BODY, settings=settings)
    assert saying.posted(logger) is False
    with logging_changed(change, settings):
        assert saying.posted(logger) is None
        local = LocalObjectLogger(body=BODY, settings=settings)  # (never posted: posting is no change)
        assert saying.posted(local) is (False if change == 'posting' else None)


def test_nothing_is_said_by_the_core_when_it_writes_nothing() -> None:
    saying = CoreSaying(None)
    assert saying.posted(ObjectLogger(body=BODY, settings=OperatorSettings())) is None
