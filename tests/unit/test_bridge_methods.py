"""The core calls the bridge (`kopf._running.calls.Bridge`) by its methods' names, as strings in
`src/binding/`: every name it calls is a method of the bridge, a coroutine where the core awaits
an answer through the loop's queue, a plain method where it leaves a note or calls it directly;
and every public method of the bridge is called by the core or by the Python side. A renamed
method fails here, not in an operator."""

from __future__ import annotations

import inspect
import re
from pathlib import Path

import pytest
from kopf._running.calls import Bridge

ROOT = Path(__file__).parents[2]
BINDING = ROOT / "src" / "binding"
SOURCES = "\n".join(path.read_text() for path in sorted(BINDING.glob("*.rs")))

# Queued calls, awaited (`PyHooks::call`/`call_settling`/`verdicts`): run as coroutines on the operator's loop.
AWAITED = set(re.findall(r"self\.(?:call|call_settling|verdicts)\(\s*\"(\w+)\"", SOURCES))
# Queued notes (`Calls::notify`): plain methods, run in order, nothing answered.
NOTES = set(re.findall(r"\.notify\(\s*\"(\w+)\"", SOURCES))
# Called directly, with the GIL (at the start, on the handlers' own threads).
DIRECT = set(re.findall(r"bridge\.call_method[01]\(\s*py,\s*\"(\w+)\"", SOURCES))


def test_the_names_are_found() -> None:
    # (the patterns above must still match the binding's code: else every check below is empty)
    assert {'invoke', 'plan', 'convert'} <= AWAITED and {'forget', 'log'} <= NOTES
    assert {'threading', 'attach', 'invoke_in_thread'} <= DIRECT


@pytest.mark.parametrize("name", sorted(AWAITED))
def test_an_awaited_call_is_a_coroutine_of_the_bridge(name: str) -> None:
    assert inspect.iscoroutinefunction(getattr(Bridge, name, None)), f"Bridge.{name} is not an async method"


@pytest.mark.parametrize("name", sorted(NOTES | DIRECT))
def test_a_note_or_a_direct_call_is_a_plain_method_of_the_bridge(name: str) -> None:
    method = getattr(Bridge, name, None)
    assert callable(method) and not inspect.iscoroutinefunction(method), f"Bridge.{name} is not a plain method"


def test_every_public_method_of_the_bridge_is_called() -> None:
    python = "\n".join(path.read_text() for path in (ROOT / "python" / "kopf").rglob("*.py"))
    public = {name for name, value in vars(Bridge).items() if not name.startswith('_') and callable(value)}
    uncalled = {name for name in public - AWAITED - NOTES - DIRECT
                if not re.search(rf"\bbridge\.{name}\(", python)}
    assert not uncalled, f"public methods of the bridge that nothing calls: {sorted(uncalled)}"
