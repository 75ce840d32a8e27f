"""`@kopf.timer(cron=...)` (not in Kopf): nonsense is refused where the timer is declared."""

from __future__ import annotations

from pathlib import Path

import kopf
import pytest
from kopf._handling.handlers import TimerHandler
from support.operators import run_python


def declare(**options: object) -> TimerHandler:
    registry = kopf.OperatorRegistry()

    @kopf.timer('greetings', registry=registry, **options)  # type: ignore[arg-type]
    def tick(**_: object) -> None:
        pass

    handler = registry._spawning[-1]
    assert isinstance(handler, TimerHandler)
    return handler


def test_a_schedule_reaches_the_engine() -> None:
    handler = declare(cron='*/5 * * * *', timezone='Europe/Berlin')
    spec = handler.spawning_for_engine()
    assert spec['cron'] == {'pattern': '*/5 * * * *', 'timezone': 'Europe/Berlin'}
    assert spec['interval'] is None
    assert declare(interval=5).spawning_for_engine()['cron'] is None
    assert declare(cron='@hourly').spawning_for_engine()['cron'] == {'pattern': '@hourly', 'timezone': None}


@pytest.mark.parametrize("options, message", [
    ({'cron': '*/5 * * *'}, r"invalid cron pattern '\*/5 \* \* \*'|invalid cron pattern \"\*/5 \* \* \*\""),
    ({'cron': '0 */5 * * * *'}, r"invalid cron pattern"),
    ({'cron': '* * * * *', 'timezone': 'Mars/Olympus'}, r"unknown time zone \"Mars/Olympus\""),
])
def test_nonsense_patterns_and_zones_are_refused(options: dict[str, object], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        declare(**options)


@pytest.mark.parametrize("options", [
    {'interval': 5}, {'initial_delay': 3}, {'idle': 10}, {'sharp': True},
])
def test_options_that_do_not_combine_with_a_schedule(options: dict[str, object]) -> None:
    with pytest.raises(TypeError, match=r"A timer with cron= cannot have " + next(iter(options)) + "="):
        declare(cron='* * * * *', **options)


def test_a_time_zone_without_a_schedule() -> None:
    with pytest.raises(TypeError, match="timezone= applies to cron= schedules only"):
        declare(interval=5, timezone='UTC')


def test_zones_come_from_the_bundled_database_without_the_systems(tmp_path: Path) -> None:
    """An image without /usr/share/zoneinfo (TZDIR: an empty folder) knows the zones too."""
    output = run_python("""
        import kopf
        registry = kopf.OperatorRegistry()
        for zone in ['Asia/Kolkata', 'Mars/Olympus']:
            try:
                kopf.timer('greetings', registry=registry, cron='0 9 * * *', timezone=zone)(lambda **_: None)
                print(zone, 'accepted')
            except ValueError as e:
                print(zone, 'refused:', e)
    """, env={"TZDIR": str(tmp_path)})
    lines = output.splitlines()
    assert lines[0] == "Asia/Kolkata accepted"
    assert lines[1].startswith("Mars/Olympus refused:") and 'unknown time zone "Mars/Olympus"' in lines[1]
