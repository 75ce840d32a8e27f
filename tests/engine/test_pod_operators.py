"""What operators do with pods that run (on kwok's simulated nodes): a field handler on their
phases, a daemon while they run, a deletion handler holding them with the finalizer; the
same on our engine and on PyPI's Kopf 1.45.2, side by side."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from support.cluster import apply, kubectl
from support.kwok import exit_with, pod
from support.operators import OperatorProcess, eventually, write_script

OPERATOR = """
import kopf

def running(status, **_):
    return status.get('phase') == 'Running'

@kopf.on.field('pods', field='status.phase', labels={'app': 'watched'})
def phase(name, old, new, patch, logger, **_):
    logger.info(f"phase of {name}: {old} -> {new}")
    patch.metadata.annotations['example.com/phase'] = new

@kopf.daemon('pods', labels={'app': 'watched'}, when=running)
async def tending(name, stopped, logger, **_):
    logger.info(f"tending {name}")
    await stopped.wait()
    logger.info(f"no longer tending {name}: {stopped.reason!r}")

@kopf.on.delete('pods', labels={'app': 'watched'})
def deleted(name, status, logger, **_):
    logger.info(f"deleted {name} in phase {status.get('phase')}")
"""

PHASES = ["None", "Pending", "Running", "Succeeded"]


def annotation(name: str, namespace: str) -> str | None:
    found = kubectl("get", "pod", name, "-n", namespace, "-o", "json", "--ignore-not-found")
    if not found.strip():
        return None
    return json.loads(found)["metadata"].get("annotations", {}).get("example.com/phase")


@pytest.mark.parametrize("engine", ["ours", "kopf"])
def test_pods_phases_a_daemon_while_running_and_deletion(
        engine: str, cluster: dict[str, str], namespace: str, tmp_path: Path, reference_kopf: Path) -> None:
    script = write_script(tmp_path, OPERATOR)
    kopf = reference_kopf if engine == "kopf" else None
    operator = OperatorProcess(["run", "-n", namespace, "--standalone", str(script)], cwd=tmp_path, kopf=kopf)
    try:
        operator.wait_for("Initial authentication has finished")
        apply(pod("p1", namespace, labels={"app": "watched"}))
        eventually(lambda: annotation("p1", namespace) == "Running", what="the phase Running handled")
        operator.wait_for(rf"\[{namespace}/p1\] tending p1")
        exit_with("p1", namespace, 0)
        eventually(lambda: annotation("p1", namespace) == "Succeeded", what="the phase Succeeded handled")
        operator.wait_for("no longer tending p1: <DaemonStoppingReason.FILTERS_MISMATCH: 2>")
        kubectl("delete", "pod", "p1", "-n", namespace, "--wait=false")
        eventually(lambda: annotation("p1", namespace) is None, what="the pod's removal")
        output = operator.wait_for("deleted p1 in phase Succeeded")
    finally:
        operator.stop()
    # The phases as the handler saw them: in their order, ending with Succeeded (a quick
    # change may be seen together with the next one, by either engine).
    seen = re.findall(r"phase of p1: (\w+) -> (\w+)", output)
    assert seen and seen[-1][1] == "Succeeded", output
    for old, new in seen:
        assert PHASES.index(old) < PHASES.index(new), seen
    assert [new for _, new in seen] == sorted({new for _, new in seen}, key=PHASES.index), seen
    assert "Traceback" not in output


CHILDREN = """
import kopf
import kubernetes

@kopf.on.create('greetings')
def spawn(namespace, name, logger, **_):
    pod = {'apiVersion': 'v1', 'kind': 'Pod',
           'metadata': {'name': f'{name}-child', 'labels': {'app': 'child'}},
           'spec': {'containers': [{'name': 'main', 'image': 'example.com/main:1'}],
                    'terminationGracePeriodSeconds': 0}}
    kopf.adopt(pod)
    kubernetes.client.CoreV1Api().create_namespaced_pod(namespace, pod)
    logger.info(f"spawned {name}-child")

@kopf.on.event('pods', labels={'app': 'child'})
def seen(type, name, status, meta, logger, **_):
    owners = [ref['kind'] + '/' + ref['name'] for ref in meta.get('ownerReferences', [])]
    logger.info(f"EVENT {name} {type} {status.get('phase')} {','.join(owners)}")
"""


@pytest.mark.parametrize("engine", ["ours", "kopf"])
def test_owned_pods_events_through_their_lives(
        engine: str, crd: None, namespace: str, tmp_path: Path, reference_kopf: Path) -> None:
    """A child pod made with kopf.adopt() runs, and goes with its owner (the garbage collector):
    its events, as an `on.event` handler sees them, are the same on both engines."""
    script = write_script(tmp_path, CHILDREN)
    kopf = reference_kopf if engine == "kopf" else None
    operator = OperatorProcess(["run", "-n", namespace, "--standalone", str(script)], cwd=tmp_path, kopf=kopf)
    try:
        operator.wait_for("Initial authentication has finished")
        apply({"apiVersion": "demo.kopf.dev/v1", "kind": "Greeting",
               "metadata": {"name": "g1", "namespace": namespace}, "spec": {}})
        operator.wait_for(r"EVENT g1-child MODIFIED Running Greeting/g1")
        kubectl("delete", "greeting", "g1", "-n", namespace, "--wait=false")
        output = operator.wait_for(r"EVENT g1-child DELETED", timeout=60)
    finally:
        operator.stop()
    events = re.findall(r"EVENT g1-child (\w+) (\w+) (\S*)", output)
    # Created (not scheduled yet), scheduled, running, then gone with its owner.
    assert events[0] == ("ADDED", "Pending", "Greeting/g1"), events
    assert ("MODIFIED", "Running", "Greeting/g1") in events, events
    assert events[-1][0] == "DELETED", events
    assert "Traceback" not in output
