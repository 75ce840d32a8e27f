"""The settings' contract across the language boundary: every `kopf.OperatorSettings` field
either reaches the core (`OperatorSettings.for_engine()`, read by `src/settings.rs`) with its
value intact, or is read elsewhere (by the Python side, or into the operator's spec), listed
here with where; a key the core does not know is refused, never taken as its default."""

from __future__ import annotations

import concurrent.futures
import dataclasses
import json
import typing
from pathlib import Path
from typing import Any

import kopf
import pytest
from kopf import _engine
from kopf._settings import SelectorMapping

PACKAGE = Path(kopf.__file__).parent

# Fields not in `for_engine()`, and the module that reads each: the Python side acts on them
# itself (logging, posting's retries, the executor, the credentials), or puts them in the
# operator's spec (admission.managed).
ELSEWHERE = {
    "posting.level": ("_posting.py", "posting_level(settings.posting)"),
    "posting.loggers": ("_logging.py", ".posting.loggers"),
    "posting.default_backoffs": ("_posting.py", ".posting.default_backoffs"),
    "posting.logging_backoffs": ("_logging.py", ".posting.logging_backoffs"),
    "execution.default_backoff": ("_execution.py", ".execution.default_backoff"),
    "execution.executor": ("_execution.py", ".execution.executor"),
    "networking.trust_env": ("_credentials.py", ".networking.trust_env"),
    "process.ultimate_exiting_timeout": ("_running.py", ".process.ultimate_exiting_timeout"),
    "admission.server": ("_running.py", ".admission.server"),
    "admission.managed": ("_running.py", ".admission.managed"),
}


def fields() -> list[tuple[str, str, Any]]:
    """Every public field: its section, name, and type."""
    settings = kopf.OperatorSettings()
    found = []
    for section in dataclasses.fields(settings):
        hints = typing.get_type_hints(type(getattr(settings, section.name)))
        found += [(section.name, field.name, hints[field.name])
                  for field in dataclasses.fields(getattr(settings, section.name)) if not field.name.startswith("_")]
    return found


def changed(value: Any, hint: Any) -> Any:
    """Another value of the field's type than its default."""
    if isinstance(value, bool):
        return not value
    if isinstance(value, int | float):
        return value + 7
    if isinstance(value, str):
        return value + "-changed"
    if value is None:
        return "changed" if str in typing.get_args(hint) else 17
    if isinstance(value, tuple | list):
        return [*value, 99]
    if isinstance(value, SelectorMapping):
        return SelectorMapping({"app": "changed"})
    if isinstance(value, concurrent.futures.Executor):
        return concurrent.futures.ThreadPoolExecutor(max_workers=1)
    if isinstance(value, kopf.ProgressStorage):
        return kopf.AnnotationsProgressStorage(prefix="changed.example.com")
    if isinstance(value, kopf.DiffBaseStorage):
        return kopf.StatusDiffBaseStorage(field="status.changed")
    raise AssertionError(f"no other value for {value!r}")


def changing(section: str, name: str, hint: Any) -> kopf.OperatorSettings:
    settings = kopf.OperatorSettings()
    setattr(getattr(settings, section), name, changed(getattr(getattr(settings, section), name), hint))
    return settings


def test_every_field_reaches_the_core_or_is_read_elsewhere() -> None:
    baseline = kopf.OperatorSettings().for_engine([])
    unread = [f"{section}.{name}" for section, name, hint in fields()
              if changing(section, name, hint).for_engine([]) == baseline]
    assert sorted(unread) == sorted(ELSEWHERE), "fields that are not in for_engine() and not listed as read elsewhere"


@pytest.mark.parametrize("field", sorted(ELSEWHERE))
def test_the_fields_read_elsewhere_are_read_where_listed(field: str) -> None:
    module, text = ELSEWHERE[field]
    assert text in (PACKAGE / module).read_text()


@pytest.mark.parametrize("section, name, hint", fields())
def test_every_value_for_the_core_is_read_as_given(section: str, name: str, hint: Any) -> None:
    given = changing(section, name, hint).for_engine([])
    read = json.loads(_engine.settings_as_read(json.dumps(given)))
    # The operator adds its identity when it runs (kopf/_running.py): here, the core's default.
    assert {part: {key: value for key, value in fields.items() if (part, key) != ("peering", "identity")}
            for part, fields in read.items()} == given


def test_a_key_the_core_does_not_know_is_refused() -> None:
    given = kopf.OperatorSettings().for_engine([])
    given["watching"]["inactivity_timout"] = 1
    with pytest.raises(ValueError, match="unknown field `inactivity_timout`"):
        _engine.settings_as_read(json.dumps(given))
