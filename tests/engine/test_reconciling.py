"""`@kopf.on.reconcile` in a running operator: called with the object's state when it appears
and when it changes (not for its own status writes), requeued in memory with no writes to the
cluster, retried after an exponential backoff and at once after a fix, and kept by its
finalizer until it has seen the deletion; bad declarations fail loudly."""

from __future__ import annotations

import contextlib
import json
import re
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from support.audit import AuditLog
from support.cluster import kubectl
from support.operators import OperatorProcess, account_kubeconfig, eventually, get, refused, write_script

HANDLERS = """
import time
import kopf

@kopf.on.startup()
def configure(settings, **_):
    settings.reconciling.backoff_base = 0.4
    settings.reconciling.backoff_cap = 6.4
    settings.reconciling.backoff_jitter = 0.0

@kopf.on.reconcile('greetings')
def greet(spec, name, retry, logger, **_):
    logger.info(f"reconciling {name}: who={spec.get('who')} retry={retry} at={time.monotonic():.3f}")
    if spec.get('fail'):
        raise RuntimeError("not yet")
    if spec.get('every'):
        return kopf.Requeue(after=spec['every'])
    return {'greeted': spec.get('who')}
"""


def greeting(name: str, namespace: str, spec: dict[str, object]) -> None:
    kubectl("create", "-f", "-", input=json.dumps({
        "apiVersion": "demo.kopf.dev/v1", "kind": "Greeting",
        "metadata": {"name": name, "namespace": namespace}, "spec": spec}))


def calls(output: str, name: str) -> list[tuple[str, int, float]]:
    """The reconcile calls of one object: who, retry, and when (monotonic seconds)."""
    return [(who, int(retry), float(at)) for who, retry, at in
            re.findall(rf"reconciling {name}: who=(\S+) retry=(\d+) at=([\d.]+)", output)]


def test_changes_reconcile_once_each_and_status_writes_do_not(crd: None, namespace: str, tmp_path: Path) -> None:
    operator = OperatorProcess(["run", "-n", namespace, "--standalone", str(write_script(tmp_path, HANDLERS))],
                               cwd=tmp_path)
    try:
        greeting("g1", namespace, {"who": "world"})
        eventually(lambda: get("greeting", "g1", namespace).get("status", {}).get("greet") == {"greeted": "world"},
                   what="the first result in the status")
        kubectl("patch", "greeting", "g1", "-n", namespace, "--type=merge", "-p", '{"spec": {"who": "moon"}}')
        eventually(lambda: get("greeting", "g1", namespace)["status"]["greet"] == {"greeted": "moon"},
                   what="the second result in the status")
        kubectl("label", "greeting", "g1", "-n", namespace, "colour=blue")
        operator.wait_for(r"reconciling g1: who=moon", count=2)
        time.sleep(1.5)  # (a call too many would come by now: the status writes' events are in)
        seen = [who for who, _, _ in calls(operator.output, "g1")]
    finally:
        assert operator.stop() == 0
    # One call per change: the creation, the spec's change, the label; none for the status.
    assert seen == ["world", "moon", "moon"], operator.output


def test_a_requeue_is_a_timer_with_no_writes(crd: None, namespace: str, tmp_path: Path) -> None:
    operator = OperatorProcess(["run", "-n", namespace, "--standalone", str(write_script(tmp_path, HANDLERS))],
                               cwd=tmp_path)
    try:
        greeting("g2", namespace, {"who": "sun", "every": 0.5})
        operator.wait_for(r"reconciling g2:")
        audit = AuditLog()
        operator.wait_for(r"reconciling g2:", count=7, timeout=20)
        writes = audit.writes(agent="kopf-rs/", namespace=namespace)
    finally:
        assert operator.stop() == 0
    ticks = [at for _, _, at in calls(operator.output, "g2")]
    gaps = [b - a for a, b in zip(ticks, ticks[1:], strict=False)]
    assert all(0.45 <= gap < 3.0 for gap in gaps), gaps  # (never sooner; later only under load)
    assert not writes, writes  # Kopf's timers or touch-dummies would patch the object at every tick
    assert "dummy" not in json.dumps(get("greeting", "g2", namespace)["metadata"].get("annotations", {}))


def test_a_failure_backs_off_exponentially_and_a_fix_is_taken_at_once(
        crd: None, namespace: str, tmp_path: Path) -> None:
    operator = OperatorProcess(["run", "-n", namespace, "--standalone", str(write_script(tmp_path, HANDLERS))],
                               cwd=tmp_path)
    try:
        greeting("g3", namespace, {"who": "stars", "fail": True})
        operator.wait_for(r"reconciling g3: who=stars retry=4", timeout=30)
        fixed_at = time.monotonic()  # the next retry is 6.4 s away: a call before is the fix's
        kubectl("patch", "greeting", "g3", "-n", namespace, "--type=merge", "-p", '{"spec": {"fail": false}}')
        eventually(lambda: get("greeting", "g3", namespace).get("status", {}).get("greet") == {"greeted": "stars"},
                   what="the result after the fix")
        output = operator.output
    finally:
        assert operator.stop() == 0
    attempts = calls(output, "g3")
    assert [retry for _, retry, _ in attempts[:5]] == [0, 1, 2, 3, 4], output
    gaps = [b - a for (_, _, a), (_, _, b) in zip(attempts[:4], attempts[1:5], strict=True)]
    # 0.4, 0.8, 1.6, 3.2: never sooner; later by a Python call and a cycle (more
    # under load, yet far from a fixed delay).
    for gap, expected in zip(gaps, [0.4, 0.8, 1.6, 3.2], strict=True):
        assert expected * 0.95 <= gap < expected * 1.5 + 1.0, gaps
    assert "failed with an exception and will try again after the object's backoff: not yet" in output
    after_fix = [at for _, _, at in attempts if at > fixed_at]
    assert after_fix and after_fix[0] - fixed_at < 2.8, (fixed_at, attempts)


FINALIZING = """
import kopf

@kopf.on.reconcile('greetings', finalizer=True)
def keep(name, deleting, logger, **_):
    logger.info(f"reconciling {name}, deleting={deleting}")
"""


def test_the_finalizer_keeps_the_object_until_the_handler_has_seen_its_deletion(
        crd: None, namespace: str, tmp_path: Path) -> None:
    operator = OperatorProcess(["run", "-n", namespace, "--standalone", str(write_script(tmp_path, FINALIZING))],
                               cwd=tmp_path)
    try:
        greeting("g4", namespace, {"who": "all"})
        operator.wait_for(r"reconciling g4, deleting=False")
        assert "kopf.zalando.org/KopfFinalizerMarker" in get("greeting", "g4", namespace)["metadata"]["finalizers"]
        kubectl("delete", "greeting", "g4", "-n", namespace, "--timeout=30s")
        output = operator.wait_for(r"reconciling g4, deleting=True")
    finally:
        assert operator.stop() == 0
    assert output.count("reconciling g4, deleting=False") == 1, output
    assert kubectl("get", "greetings", "-n", namespace, "-o", "name").strip() == ""


@contextlib.contextmanager
def under_generated_rules(script: Path, namespace: str, tmp_path: Path, expected: str) -> Iterator[OperatorProcess]:
    """The operator run under the rules that `kopf rbac generate` writes for it (which say
    `expected`); nothing it asks for may be refused."""
    account = f"op-{namespace}"
    kopf = str(Path(sys.executable).with_name("kopf"))
    generated = subprocess.run([kopf, "rbac", "generate", "-n", namespace, "--name", account, "--standalone",
                                str(script)], capture_output=True, text=True, check=False, timeout=60)
    assert generated.returncode == 0, generated.stderr
    assert expected in generated.stdout
    kubectl("apply", "-f", "-", input=generated.stdout)
    try:
        kubeconfig = account_kubeconfig(account, tmp_path, namespace)
        operator = OperatorProcess(["run", "-n", namespace, "--standalone", str(script)], cwd=tmp_path,
                                   env={"KUBECONFIG": str(kubeconfig)})
        try:
            yield operator
        finally:
            assert operator.stop() == 0
        assert not refused(operator.output), operator.output
    finally:
        kubectl("delete", "clusterrole,clusterrolebinding", account, "--ignore-not-found")


def test_a_reconcile_operator_runs_under_its_generated_rules(crd: None, namespace: str, tmp_path: Path) -> None:
    script = write_script(tmp_path, FINALIZING)
    with under_generated_rules(script, namespace, tmp_path, "reconcile handler 'keep' (the watch-stream)") as operator:
        greeting("g5", namespace, {"who": "ops"})
        operator.wait_for(r"reconciling g5, deleting=False")
        kubectl("delete", "greeting", "g5", "-n", namespace, "--timeout=30s")
        operator.wait_for(r"reconciling g5, deleting=True")

OWNING = """
import json
import subprocess
import kopf

@kopf.on.reconcile('greetings', owns=['configmaps'])
def ensure(name, namespace, uid, spec, logger, **_):
    logger.info(f"reconciling {name}")
    child = {"apiVersion": "v1", "kind": "ConfigMap",
             "metadata": {"name": f"{name}-child", "namespace": namespace},
             "data": {"who": spec.get("who", "")}}
    kopf.adopt(child)
    subprocess.run(["kubectl", "apply", "-f", "-"], input=json.dumps(child), text=True, check=True,
                   capture_output=True)
"""


def child(namespace: str) -> dict[str, Any]:
    """The owner g6's child as it is now (empty if there is none)."""
    found = subprocess.run(["kubectl", "get", "configmap", "g6-child", "-n", namespace, "-o", "json"],
                           capture_output=True, text=True, check=False)
    return json.loads(found.stdout) if found.returncode == 0 else {}


def test_a_child_changed_or_deleted_by_hand_wakes_its_owner(crd: None, namespace: str, tmp_path: Path) -> None:
    operator = OperatorProcess(["run", "-n", namespace, "--standalone", str(write_script(tmp_path, OWNING))],
                               cwd=tmp_path)
    try:
        greeting("g6", namespace, {"who": "kids"})
        greeting("g7", namespace, {"who": "others"})
        eventually(lambda: child(namespace).get("data") == {"who": "kids"}, what="the child made by the owner")
        assert child(namespace)["metadata"]["ownerReferences"][0]["name"] == "g6"
        operator.wait_for(r"reconciling g7")
        calls_before = operator.output.count("reconciling g7")

        kubectl("delete", "configmap", "g6-child", "-n", namespace)
        eventually(lambda: child(namespace).get("data") == {"who": "kids"}, what="the child made again")
        kubectl("patch", "configmap", "g6-child", "-n", namespace, "--type=merge", "-p",
                '{"data": {"who": "intruder"}}')
        eventually(lambda: child(namespace).get("data") == {"who": "kids"}, what="the child's change reverted")
    finally:
        assert operator.stop() == 0
    # Only the owner named by the child is woken: the other one is not called again.
    assert operator.output.count("reconciling g7") == calls_before, operator.output


RELATED = """
import json
import subprocess
import kopf

@kopf.index('greetings')
def by_source(namespace, name, spec, **_):
    return {(namespace, spec.get('source')): name}

@kopf.on.reconcile('greetings')
def greet(name, namespace, spec, logger, **_):
    found = subprocess.run(["kubectl", "get", "configmap", spec["source"], "-n", namespace, "-o", "json"],
                           capture_output=True, text=True, check=False)
    who = json.loads(found.stdout).get("data", {}).get("who") if found.returncode == 0 else None
    logger.info(f"reconciling {name}: who={who}")
    return {'who': who}

@kopf.related('configmaps', owners='greetings')
def readers(namespace, name, by_source, **_):
    return list(by_source.get((namespace, name), []))

@kopf.related('configmaps', owners='greetings', labels={'broken': kopf.PRESENT})
def broken(labels, **_):
    if labels['broken'] == 'raise':
        raise RuntimeError("cannot map this one")
    if labels['broken'] == 'type':
        return 42
    return {'namespace': None, 'name': 'g1'}

@kopf.related('configmaps', owners='secrets')
def lonely(**_):
    return []
"""


def test_related_objects_wake_the_owners_a_function_maps_them_to(
        crd: None, namespace: str, tmp_path: Path) -> None:
    operator = OperatorProcess(["run", "-n", namespace, "--standalone", str(write_script(tmp_path, RELATED))],
                               cwd=tmp_path)

    def who(name: str) -> object:
        return get("greeting", name, namespace).get("status", {}).get("greet", {}).get("who")

    def source(name: str, who: str, **labels: str) -> None:
        kubectl("apply", "-f", "-", input=json.dumps({
            "apiVersion": "v1", "kind": "ConfigMap", "data": {"who": who},
            "metadata": {"name": name, "namespace": namespace, "labels": labels}}))

    try:
        # A function that wakes owners nobody reconciles is an error; the others are served.
        operator.wait_for(r"Related function 'lonely' names owners of secrets.v1, which no @kopf.on.reconcile "
                          r"handler serves: it wakes none of them")
        greeting("g1", namespace, {"source": "cm-a"})
        greeting("g2", namespace, {"source": "cm-b"})
        operator.wait_for(r"reconciling g1: who=None")
        operator.wait_for(r"reconciling g2: who=None")
        source("cm-a", "alice")
        eventually(lambda: who("g1") == "alice", what="the owner called for its new source")
        source("cm-a", "bob")
        eventually(lambda: who("g1") == "bob", what="the owner called for its source's change")

        # Bad mappings: each is said with its function and object; nothing else stops.
        source("bad-raise", "x", broken="raise")
        operator.wait_for(r"Related function 'broken' failed with an exception.*cannot map this one")
        source("bad-type", "x", broken="type")
        operator.wait_for(r"Related function 'broken' returned 42, but a related function returns its owners")
        source("bad-ns", "x", broken="ns")
        operator.wait_for(r"Related function 'broken' named the owner 'g1' without a namespace, but "
                          r"Greeting objects are namespaced")
        source("cm-a", "carol")
        eventually(lambda: who("g1") == "carol", what="the owner called after the bad mappings")
    finally:
        assert operator.stop() == 0
    # Only the owner mapped is called: the other one saw nothing of cm-a's changes.
    assert operator.output.count("reconciling g2:") == 1, operator.output


RELATED_BY_INDICES = """
import kopf

@kopf.index('configmaps')
def words(namespace, name, body, **_):
    return {(namespace, name): dict(body.get('data') or {})}

@kopf.index('greetings')
def by_source(namespace, name, spec, **_):
    return {(namespace, spec.get('source')): name}

@kopf.related('configmaps', owners='greetings')
def readers(namespace, name, by_source, **_):
    return list(by_source.get((namespace, name), []))

@kopf.on.reconcile('greetings')
def greet(namespace, spec, words, **_):
    [found] = words.get((namespace, spec['source']), [{}])
    return {'who': found.get('who')}
"""


def test_a_related_operator_runs_under_its_generated_rules(crd: None, namespace: str, tmp_path: Path) -> None:
    script = write_script(tmp_path, RELATED_BY_INDICES)
    with under_generated_rules(script, namespace, tmp_path, "related function 'readers' (the watch-stream)"):
        greeting("g8", namespace, {"source": "cm-w"})
        eventually(lambda: "greet" in get("greeting", "g8", namespace).get("status", {}),
                   what="the first reconcile")
        kubectl("create", "configmap", "cm-w", "-n", namespace, "--from-literal=who=indexed")
        eventually(lambda: get("greeting", "g8", namespace)["status"]["greet"] == {"who": "indexed"},
                   what="the owner reconciled for its related object")

MIXED = """
import kopf

@kopf.on.create('greetings')
def create_fn(**_):
    pass

@kopf.on.reconcile('greetings')
def reconcile_fn(**_):
    pass
"""

SPELLED_APART = """
import kopf

@kopf.on.create('demo.kopf.dev', 'greetings')
def create_fn(**_):
    pass

@kopf.on.reconcile('Greeting')
def reconcile_fn(**_):
    pass

@kopf.on.event('configmaps')
def other(name, logger, **_):
    logger.info(f"a configmap is seen: {name}")
"""


def test_reconcile_and_change_handlers_of_one_resource_are_refused(
        crd: None, namespace: str, tmp_path: Path) -> None:
    # The same selector: refused when the script is loaded.
    operator = OperatorProcess(["run", "-n", namespace, "--standalone", str(write_script(tmp_path, MIXED))],
                               cwd=tmp_path)
    assert operator.process.wait(timeout=30) != 0
    assert "cannot serve the same resource" in operator.output, operator.output
    # Other spellings of one resource: that resource is not served; the others are.
    script = write_script(tmp_path, SPELLED_APART, name="apart.py")
    operator = OperatorProcess(["run", "-n", namespace, "--standalone", str(script)], cwd=tmp_path)
    try:
        operator.wait_for(r"Reconcile handlers and change handlers cannot serve the same resource, so it is "
                          r"not served: greetings")
        kubectl("create", "configmap", "cm1", "-n", namespace)
        operator.wait_for(r"a configmap is seen: cm1")
    finally:
        assert operator.stop() == 0
