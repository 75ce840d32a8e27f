"""Kopf's settings read as Kopf reads them: pauses from any iterable, endless ones included,
never turned into a list; values that cannot be pauses refused at start with the setting's
name; a change after the start to a setting read only at start warned about, not ignored."""

from __future__ import annotations

import dataclasses
import itertools
import json
import logging
import time
from collections.abc import Iterator

import kopf
import pytest
from kopf import _engine
from kopf._structures.settings import READING, pauses, reading

PAUSES = ["networking.error_backoffs", "queueing.error_delays", "posting.logging_backoffs"]


class EndlessBackoff:
    """As real operators write it (an object whose ``__iter__`` yields for ever)."""

    def __init__(self) -> None:
        self.iterations = 0

    def __iter__(self) -> Iterator[float]:
        self.iterations += 1
        delay = 0.1
        while True:
            yield min(delay, 60)
            delay *= 2


def endless_generator() -> Iterator[float]:
    yield from itertools.cycle([0.5, 1.5])


@pytest.mark.parametrize("setting", PAUSES)
@pytest.mark.parametrize("endless", [EndlessBackoff, endless_generator, itertools.count])
def test_an_endless_iterable_reaches_the_core_unread(setting: str, endless: type) -> None:
    settings = kopf.OperatorSettings()
    group, field = setting.split(".")
    iterable = endless()
    setattr(getattr(settings, group), field, iterable)
    customs: list[object] = []
    started = time.monotonic()
    given = settings.for_engine(customs)
    assert time.monotonic() - started < 1.0, "read ahead"
    assert given[group][field] == {"drawn": 0, "count": None, "name": f"settings.{setting}"}
    assert customs == [iterable]
    if isinstance(iterable, EndlessBackoff):
        assert iterable.iterations == 0, "iterated at start"
    # The core takes the form and gives it back as it read it.
    read = json.loads(_engine.settings_as_read(json.dumps(given)))
    assert read[group][field] == given[group][field]


def test_posting_default_backoffs_are_checked_at_start_and_not_read() -> None:
    settings = kopf.OperatorSettings()
    settings.posting.default_backoffs = EndlessBackoff()
    settings.for_engine()
    assert settings.posting.default_backoffs.iterations == 0
    settings.posting.default_backoffs = ["1", 2]
    with pytest.raises(TypeError, match=r"settings.posting.default_backoffs: '1' in \['1', 2\] is not a number"):
        settings.for_engine()


@pytest.mark.parametrize(("value", "expected"), [
    (3, [3.0]), (0.5, [0.5]), ([1, 2.5], [1.0, 2.5]), ((), []), ((4,), [4.0]),
])
def test_numbers_and_lists_are_lists(value: object, expected: list[float]) -> None:
    customs: list[object] = []
    assert pauses(value, "settings.networking.error_backoffs", customs) == expected
    assert customs == []


def test_a_sized_iterable_is_drawn_with_its_count() -> None:
    customs: list[object] = []
    assert pauses(range(3), "x", customs) == {"drawn": 0, "count": 3, "name": "x"}
    huge = [1] * 20_000  # not copied at start: read as it is used
    assert pauses(huge, "x", customs) == {"drawn": 1, "count": 20_000, "name": "x"}


@pytest.mark.parametrize("value", ["1, 2", None, {1: 2}, [1, None], [True], object()])
def test_what_cannot_be_pauses_is_refused_with_the_settings_name(value: object) -> None:
    settings = kopf.OperatorSettings()
    settings.networking.error_backoffs = value  # type: ignore[assignment]
    with pytest.raises(TypeError, match=r"^settings.networking.error_backoffs"):
        settings.for_engine()


def test_a_change_after_the_start_is_warned_about_once(caplog: pytest.LogCaptureFixture) -> None:
    settings = kopf.OperatorSettings()
    settings.networking.request_timeout = 30  # before the start: in force, nothing said
    settings.mark_read()
    with caplog.at_level(logging.WARNING, logger="kopf"):
        settings.networking.request_timeout = 10
        settings.networking.request_timeout = 20
        settings.posting.level = logging.WARNING  # read at each use: in force at once
        settings.execution.max_workers = 3
    said = [r.getMessage() for r in caplog.records]
    assert said == ["settings.networking.request_timeout was changed after the operator had started: it is read "
                    "at the start, so the new value is not in force until the operator restarts."]
    settings.mark_read(False)  # stopped: the next run reads them anew
    caplog.clear()
    settings.networking.request_timeout = 5
    assert caplog.records == []


def test_how_each_setting_is_read_names_only_settings() -> None:
    settings = kopf.OperatorSettings()
    for name in READING:
        group, field = name.split(".")
        section = type(getattr(settings, group))
        assert field in {f.name for f in dataclasses.fields(section)} or \
            isinstance(getattr(section, field, None), property), name
    assert reading("networking.request_timeout") == ("at each use", "at start")
    assert reading("posting.level") == ("at each use", "at each use")
