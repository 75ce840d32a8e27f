"""Handlers whose ids collide (`collisions/`: by `id=`, or by one function name in two modules),
of every kind, run by PyPI's Kopf and by ours on the same objects: Kopf's rules are the
contract (which of them run, in which order, what lands in the object), so the two runs
must not differ in anything a user sees."""

from __future__ import annotations

import sys
from pathlib import Path

from corpus import differing, recording

HERE = Path(__file__).parent


def scenario(s: recording.Session) -> None:
    s.apply("apiVersion: demo.kopf.dev/v1\nkind: Greeting\nmetadata: {name: hello}\nspec: {greeting: hi}\n")
    s.wait("the creation is handled", lambda: s.logged("Creation is processed"))
    s.wait("the daemons have started", lambda: s.logged("daemon_"))
    s.snapshot("creation")
    s.kubectl("patch", "greeting", "hello", "--type=merge", "-p", '{"spec":{"greeting":"hello"}}')
    s.wait("the update is handled", lambda: s.logged("Updating is processed"))
    s.snapshot("update")
    s.kubectl("delete", "greeting", "hello", "--wait=false")
    s.wait("the object is gone", lambda: s.get("greetings", "hello") is None)
    s.snapshot("deletion")


def test_colliding_ids_behave_as_on_kopf(crd: None, reference_kopf: Path) -> None:
    served = recording.served("greetings.demo.kopf.dev")
    assert served, "the CRD's storage is not serving"
    venvs = {"kopf": reference_kopf.parent.parent, "ours": Path(sys.executable).parent.parent}
    runs = {engine: recording.record(
        engine=engine, venv=venv, source=HERE / "collisions", resources=("greetings",), scenario=scenario,
        command=["{bin}/kopf", "run", "{source}/handlers.py", "--namespace", "{namespace}", "--standalone"],
        namespace=f"collisions-{engine}", ready="Initial authentication has finished")
        for engine, venv in venvs.items()}
    kopf, ours = runs["kopf"], runs["ours"]
    assert not kopf.timeouts, kopf.output
    # What Kopf does, as read in its code and seen here: all activities of an id run, in order.
    assert "another startup_fn of first.py, after the first: True" in kopf.output
    # The suite's environment has pykube-ng, Kopf's has not: a login more is logged on ours.
    lines = [line for line in differing.unaccepted("collisions", differing.differences(kopf, ours),
                                                   differing.accepted())
             if "Activity 'login_via_pykube' succeeded" not in line]
    assert not lines, "\n".join([*lines, "--- ours:", ours.output[-6000:], "--- kopf:", kopf.output[-4000:]])
