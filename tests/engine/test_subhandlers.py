"""Sub-handlers (`@kopf.subhandler`, `kopf.register`, `kopf.execute`) and lifecycles, on the
real control plane: nesting, retries of one child, a crash between children, each
lifecycle's order, and operators moving between PyPI's Kopf 1.45.2 and ours mid-sequence."""

from __future__ import annotations

import collections
import re
import signal
from pathlib import Path
from typing import Any

import pytest
from support.audit import AuditLog
from support.cluster import apply, kubectl
from support.operators import OperatorProcess, eventually, get, write_script


def greeting(name: str, namespace: str, **spec: Any) -> dict[str, Any]:
    return {"apiVersion": "demo.kopf.dev/v1", "kind": "Greeting",
            "metadata": {"name": name, "namespace": namespace}, "spec": spec}


def succeeded(output: str) -> collections.Counter[str]:
    """How often each handler succeeded (Kopf's own log line)."""
    return collections.Counter(re.findall(r"Handler '([^']+)' succeeded\.$", output, re.M))


def annotations(name: str, namespace: str) -> dict[str, str]:
    return get("greeting", name, namespace)["metadata"].get("annotations", {})


def kopf_keys(name: str, namespace: str) -> list[str]:
    """The progress records left on the object (the diff base aside)."""
    return sorted(key for key in annotations(name, namespace)
                  if key.startswith("kopf.zalando.org/") and not key.endswith("/last-handled-configuration"))


PROCESSED = r"Creation is processed: 1 succeeded; 0 failed\."


def handled(tmp_path: Path, namespace: str, source: str, obj: dict[str, Any], until: str = PROCESSED) -> str:
    """An operator of this source runs until it has said `until`; what it said."""
    script = write_script(tmp_path, source)
    operator = OperatorProcess(["run", "-n", namespace, "--standalone", "--verbose", str(script)], cwd=tmp_path)
    try:
        apply(obj)
        operator.wait_for(until)
    finally:
        assert operator.stop() == 0
    return operator.output


NESTED = """
import kopf

@kopf.on.create('greetings')
def create_fn(spec, logger, **_):
    for item in spec['items']:
        @kopf.subhandler(id=item)
        async def create_item(item=item, logger=logger, **_):
            logger.info(f"ITEM {item}")
            for part in ('x', 'y'):
                def create_part(part=part, item=item, **_):
                    @kopf.subhandler(id='deep')
                    def deepest(**_):
                        return {'depth': 3, 'part': part}
                    return {'part': part}
                kopf.register(create_part, id=part)
            return {'item': item}
    return {'items': len(spec['items'])}
"""


def test_three_levels_deep(crd: None, namespace: str, tmp_path: Path) -> None:
    script = write_script(tmp_path, NESTED)
    operator = OperatorProcess(["run", "-n", namespace, "--standalone", "--verbose", str(script)], cwd=tmp_path)
    try:
        apply(greeting("nested", namespace, items=["a", "b"]))
        operator.wait_for(r"Creation is processed: 1 succeeded; 0 failed\.")
        status = eventually(lambda: (s := get("greeting", "nested", namespace).get("status", {}))
                            .get("create_fn") and s, what="the results")
        eventually(lambda: not kopf_keys("nested", namespace), what="the purged progress")
    finally:
        assert operator.stop() == 0
    output = operator.output
    expected = {"create_fn", "create_fn/a", "create_fn/b"} | {
        f"create_fn/{item}/{part}{deep}" for item in "ab" for part in "xy" for deep in ("", "/deep")}
    assert succeeded(output) == dict.fromkeys(expected, 1), "each once, at every depth"
    assert status["create_fn"] == {"items": 2}
    assert status["create_fn/a"] == {"item": "a"}
    assert status["create_fn/b/y"] == {"part": "y"}
    assert status["create_fn/a/x/deep"] == {"depth": 3, "part": "x"}
    # A parent (an item here too) runs again until its children are finished, as in Kopf.
    assert output.count("ITEM a") >= 2 and output.count("ITEM b") >= 2
    assert "Handler 'create_fn' has unfinished sub-handlers. Will retry soon." in output
    assert "Traceback" not in output


RETRIED = """
import kopf

@kopf.on.create('greetings')
def create_fn(**_):
    for name in ('one', 'two', 'three'):
        @kopf.subhandler(id=name, backoff=1)
        def child(retry, which=name, logger=None, **_):
            logger.info(f"CHILD {which} retry={retry}")
            if which == 'two' and retry < 2:
                raise kopf.TemporaryError("not yet", delay=1)
"""


def test_a_failing_child_is_retried_alone(crd: None, namespace: str, tmp_path: Path) -> None:
    output = handled(tmp_path, namespace, RETRIED, greeting("retried", namespace))
    children = re.findall(r"CHILD (\w+) retry=(\d)", output)
    assert [c for c in children if c[0] != "two"] == [("one", "0"), ("three", "0")], "the others run once"
    assert [c for c in children if c[0] == "two"] == [("two", "0"), ("two", "1"), ("two", "2")]
    assert output.count("Handler 'create_fn/two' failed temporarily: not yet") == 2
    assert succeeded(output) == {"create_fn/one": 1, "create_fn/two": 1, "create_fn/three": 1, "create_fn": 1}


CRASHING = """
import time
import kopf

@kopf.on.create('greetings')
async def create_fn(**_):
    def first(logger, **_):
        logger.info("FIRST")
    def second(logger, **_):
        logger.info("SECOND STARTED")
        time.sleep(3)
        logger.info("SECOND FINISHED")
    await kopf.execute(fns={'first': first, 'second': second}, lifecycle=kopf.lifecycles.one_by_one)
"""


def test_a_restart_between_children_runs_only_the_unfinished(crd: None, namespace: str, tmp_path: Path) -> None:
    script = write_script(tmp_path, CRASHING)
    args = ["run", "-n", namespace, "--standalone", "--verbose", str(script)]
    first = OperatorProcess(args, cwd=tmp_path)
    try:
        apply(greeting("crashing", namespace))
        first.wait_for(r"SECOND STARTED")
    finally:
        first.process.send_signal(signal.SIGKILL)
        first.kill()
    assert "FIRST" in first.output and "SECOND FINISHED" not in first.output
    record = annotations("crashing", namespace)["kopf.zalando.org/create_fn.first"]
    assert '"success":true' in record

    second = OperatorProcess(args, cwd=tmp_path)
    try:
        second.wait_for(r"Creation is processed: 1 succeeded; 0 failed\.")
    finally:
        assert second.stop() == 0
    output = second.output
    assert "FIRST" not in output, "a finished child does not run again"
    assert output.count("SECOND STARTED") == 1 and output.count("SECOND FINISHED") == 1
    assert succeeded(output) == {"create_fn/second": 1, "create_fn": 1}


LIFECYCLES = """
import kopf

def backwards(handlers, *, state, body, **_):
    # A custom lifecycle: the last not finished one first, one at a time.
    assert all(state[h.id].retries == 0 for h in handlers)
    assert body['metadata']['name']
    return list(reversed(handlers))[:1]

@kopf.on.create('greetings')
async def create_fn(spec, logger, **_):
    def child(name):
        def fn(logger, **_):
            logger.info(f"CHILD {name}")
        return fn
    lifecycle = backwards if spec['lifecycle'] == 'backwards' else getattr(kopf.lifecycles, spec['lifecycle'])
    await kopf.execute(fns={name: child(name) for name in 'abcd'}, lifecycle=lifecycle)
"""


@pytest.mark.parametrize("lifecycle, parent_calls, order", [
    ("all_at_once", 1, "abcd"),
    ("one_by_one", 4, "abcd"),
    ("asap", 4, "abcd"),
    ("shuffled", 1, None),
    ("randomized", 4, None),
    ("backwards", 4, "dcba"),
])
def test_lifecycles(crd: None, namespace: str, tmp_path: Path, lifecycle: str, parent_calls: int,
                    order: str | None) -> None:
    output = handled(tmp_path, namespace, LIFECYCLES, greeting("cycled", namespace, lifecycle=lifecycle))
    children = "".join(re.findall(r"CHILD (\w)", output))
    assert sorted(children) == list("abcd"), "each child once"
    if order is not None:
        assert children == order
    assert output.count("Handler 'create_fn' is invoked.") == parent_calls


OPERATOR_LIFECYCLE = """
import kopf

seen = []

def everything_backwards(handlers, *, state, **_):
    seen.append([h.id for h in handlers])
    return list(reversed(handlers))

kopf.set_default_lifecycle(everything_backwards)

@kopf.on.create('greetings', id='first')
def first(logger, **_):
    logger.info("RUN first")

@kopf.on.create('greetings', id='second')
def second(logger, **_):
    logger.info(f"RUN second after {seen}")
"""


def test_the_operators_lifecycle(crd: None, namespace: str, tmp_path: Path) -> None:
    output = handled(tmp_path, namespace, OPERATOR_LIFECYCLE, greeting("ordered", namespace),
                     until=r"Creation is processed: 2 succeeded; 0 failed\.")
    assert re.findall(r"RUN (\w+)", output) == ["second", "first"], "both in one cycle, backwards"
    assert "RUN second after [['first', 'second']]" in output
    assert "The default lifecycle is already set to <function asap" in output


EXECUTING = """
import kopf

def alpha(logger, **_):
    logger.info("RUN alpha")
    return 'a'

def beta(logger, **_):
    logger.info("RUN beta")

helpers = kopf.OperatorRegistry()

@kopf.on.create('greetings', id='gamma', registry=helpers)
def gamma(logger, **_):
    logger.info("RUN gamma")

@kopf.on.create('greetings')
async def by_fns(spec, logger, **_):
    if spec['how'] == 'mapping':
        await kopf.execute(fns={'first': alpha, 'second': beta})
    elif spec['how'] == 'iterable':
        await kopf.execute(fns=[alpha, beta])
    elif spec['how'] == 'handlers':
        await kopf.execute(handlers=helpers._changing)
    logger.info("ALL DONE")
    try:
        await kopf.execute(fns={'x': alpha}, handlers=[])
    except TypeError as e:
        logger.info(f"REFUSED {e}")
"""


@pytest.mark.parametrize("how, ids", [
    ("mapping", ["by_fns/first", "by_fns/second"]),
    ("iterable", ["by_fns/alpha", "by_fns/beta"]),
    ("handlers", ["gamma"]),
])
def test_execute(crd: None, namespace: str, tmp_path: Path, how: str, ids: list[str]) -> None:
    output = handled(tmp_path, namespace, EXECUTING, greeting("executed", namespace, how=how))
    assert succeeded(output) == {**dict.fromkeys(ids, 1), "by_fns": 1}
    assert output.count("ALL DONE") == 1, "the code after kopf.execute() runs once, when all are done"
    assert "REFUSED Only one of the fns, handlers, registry can be passed. Got more." in output


MISUSED = """
import kopf

@kopf.on.event('greetings')
def watched(logger, **_):
    try:
        @kopf.subhandler()
        def child(**_):
            pass
    except TypeError as e:
        logger.info(f"EVENT REFUSED {e}")

@kopf.on.startup()
def outside(logger, **_):
    try:
        kopf.register(lambda **_: None)
    except LookupError as e:
        logger.info(f"OUTSIDE REFUSED {e}")
"""


def test_sub_handlers_outside_change_handlers_are_refused(crd: None, namespace: str, tmp_path: Path) -> None:
    output = handled(tmp_path, namespace, MISUSED, greeting("misused", namespace),
                     until=r"EVENT REFUSED Sub-handlers are only supported for resource-changing handlers\.")
    assert "OUTSIDE REFUSED @kopf.subhandler can only be used inside a handler, while it runs." in output


HANDOVER = """
import kopf

@kopf.on.create('greetings')
def create_fn(spec, **_):
    for name in ('one', 'two', 'three'):
        @kopf.subhandler(id=name, retries=5)
        def child(which=name, retry=0, logger=None, **_):
            logger.info(f"CHILD {which} retry={retry}")
            if which == 'two' and retry == 0:
                raise kopf.TemporaryError("later", delay=6)
            return {'done': which}
"""


@pytest.mark.parametrize("direction", ["kopf-to-ours", "ours-to-kopf"])
def test_hand_over_mid_sequence(crd: None, namespace: str, tmp_path: Path, reference_kopf: Path,
                                direction: str) -> None:
    """One engine runs the three children (the second fails and is to be retried in a few
    seconds), then stops; the other goes on from there: only the second's retry runs, and
    the parent finishes; nothing runs twice."""
    engines = {"kopf": reference_kopf, "ours": None}
    first_engine, second_engine = (engines[name] for name in direction.split("-to-"))
    script = write_script(tmp_path, HANDOVER)
    args = ["run", "-n", namespace, "--standalone", "--verbose", str(script)]
    first = OperatorProcess(args, cwd=tmp_path, kopf=first_engine)
    try:
        apply(greeting("handed", namespace))
        first.wait_for(r"Handler 'create_fn/three' succeeded")
        eventually(lambda: '"success":true' in annotations("handed", namespace).get(
            "kopf.zalando.org/create_fn.three", ""), what="the third child's record")
    finally:
        assert first.stop() == 0
    assert re.findall(r"CHILD \w+ retry=\d", first.output) == [
        "CHILD one retry=0", "CHILD two retry=0", "CHILD three retry=0"]
    assert "Handler 'create_fn/two' failed temporarily: later" in first.output

    second = OperatorProcess(args, cwd=tmp_path, kopf=second_engine)
    try:
        second.wait_for(r"Creation is processed: 1 succeeded; 0 failed\.")
        eventually(lambda: not kopf_keys("handed", namespace), what="the purged progress")
    finally:
        assert second.stop() == 0
    assert re.findall(r"CHILD \w+ retry=\d", second.output) == ["CHILD two retry=1"]
    results = get("greeting", "handed", namespace)["status"]
    assert [results[f"create_fn/{name}"] for name in ("one", "two", "three")] == [
        {"done": "one"}, {"done": "two"}, {"done": "three"}]


def lifecycle_with_children(engine: Path | None, namespace: str, tmp_path: Path, name: str) -> AuditLog:
    script = write_script(tmp_path, """
        import kopf

        @kopf.on.create('greetings')
        def created(**_):
            for item in ('a', 'b', 'c'):
                @kopf.subhandler(id=item)
                def child(item=item, **_):
                    return {'item': item}

        @kopf.on.delete('greetings')
        def deleted(**_):
            pass
    """, name=f"{name}.py")
    audit = AuditLog()
    operator = OperatorProcess(["run", "-n", namespace, "--standalone", str(script)], cwd=tmp_path, kopf=engine)
    try:
        apply(greeting(name, namespace))
        operator.wait_for(r"Creation is processed")
        eventually(lambda: not kopf_keys(name, namespace), what="the purged progress")
        kubectl("delete", "greeting", name, "-n", namespace, "--timeout=30s")
        operator.wait_for(r"Deletion is processed")
    finally:
        assert operator.stop() == 0
    return audit


def test_api_writes_with_sub_handlers_are_no_more_than_kopfs(crd: None, namespace: str, tmp_path: Path,
                                                             reference_kopf: Path) -> None:
    ours = lifecycle_with_children(None, namespace, tmp_path, "ours").writes(agent="kopf-rs/", namespace=namespace)
    kopfs = lifecycle_with_children(reference_kopf, namespace, tmp_path, "kopf").writes(
        agent="kopf/", namespace=namespace)
    print(f"\nAPI writes with 3 sub-handlers: ours {dict(ours)}; Kopf 1.45.2 {dict(kopfs)}")

    def on_objects(writes: Any) -> int:
        return sum(n for what, n in writes.items() if "greetings" in what)
    assert 0 < on_objects(ours) <= on_objects(kopfs)
