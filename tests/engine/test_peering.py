"""Peering as Kopf does it: operators in one `KopfPeering` object, the lower priorities
paused while a higher one lives, equal ones all paused; `kopf freeze/resume`; and our
operators peering with PyPI's Kopf 1.45.2 in the same object."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from support.cluster import apply, kopf_cli, kubectl
from support.operators import OperatorProcess, eventually, get, write_script

HANDLERS = """
import kopf

@kopf.on.create('greetings')
def created(name, logger, **_):
    logger.info(f"CREATED {name}")

@kopf.daemon('greetings', cancellation_timeout=5)
async def watching(name, stopped, logger, **_):
    logger.info(f"DAEMON STARTED {name}")
    await stopped.wait()
    logger.info(f"DAEMON STOPPED {name}: {stopped.reason!r}")
"""


def greeting(name: str, namespace: str) -> dict[str, Any]:
    return {"apiVersion": "demo.kopf.dev/v1", "kind": "Greeting",
            "metadata": {"name": name, "namespace": namespace}, "spec": {}}


def peers(namespace: str) -> dict[str, Any]:
    return get("kopfpeering", "test", namespace).get("status") or {}


def ours(tmp_path: Path, namespace: str, *args: str, script: str = HANDLERS, name: str = "handlers.py",
         env: dict[str, str] | None = None) -> OperatorProcess:
    path = write_script(tmp_path, script, name=name)
    return OperatorProcess(["run", "-n", namespace, "--verbose", *args, str(path)], cwd=tmp_path, env=env)


def test_the_lower_priority_pauses_while_the_higher_one_lives(peering: str, namespace: str, tmp_path: Path) -> None:
    low = ours(tmp_path, namespace, "--peering", peering, "--priority", "1", env={"POD_ID": "low"})
    high = None
    try:
        apply(greeting("before", namespace))
        low.wait_for(r"CREATED before")
        low.wait_for(r"DAEMON STARTED before")
        assert peers(namespace)["low"]["priority"] == 1

        high = ours(tmp_path, namespace, "--peering", peering, "--priority", "10", name="high.py",
                    env={"POD_ID": "high"})
        # Kopf's logger (its name cut to 20 characters by the log format), level and text.
        low.wait_for(r"kopf\._core\.engines\.p \[INFO    \] "
                     r"Pausing operations in favour of \[<Peer high: priority=10, lifetime=60, lastseen='")
        low.wait_for(r"DAEMON STOPPED before: <DaemonStoppingReason.OPERATOR_PAUSING: 8>")
        high.wait_for(r"DAEMON STARTED before")
        apply(greeting("during", namespace))
        high.wait_for(r"CREATED during")
        assert high.stop() == 0
        high = None

        # The first resume is at the start: a mandatory peering starts paused (as Kopf's).
        low.wait_for(r"Resuming operations after the pause", count=2)
        low.wait_for(r"DAEMON STARTED during")
        low.wait_for(r"DAEMON STARTED before", count=2)
        assert "high" not in peers(namespace), "an exiting operator withdraws its record"
        apply(greeting("after", namespace))
        low.wait_for(r"CREATED after")
    finally:
        if high is not None:
            high.stop()
        assert low.stop() == 0
    assert "CREATED during" not in low.output, "the paused operator handles nothing"
    assert "low" not in peers(namespace)


def test_equal_priorities_pause_everyone(peering: str, namespace: str, tmp_path: Path) -> None:
    first = ours(tmp_path, namespace, "--peering", peering, env={"POD_ID": "first"})
    second = None
    try:
        first.wait_for(r"Keep-alive in 'test' in '.*': ok")
        second = ours(tmp_path, namespace, "--peering", peering, name="second.py", env={"POD_ID": "second"})
        for operator, other in [(first, "second"), (second, "first")]:
            operator.wait_for(rf"Possibly conflicting operators with the same priority: \[<Peer {other}: priority=0")
        # The newcomer starts paused (a mandatory peering does), so only the first one says so.
        first.wait_for(r"Pausing all operators, including self: \[<Peer ")
        apply(greeting("contested", namespace))
        assert second.stop() == 0
        second = None
        first.wait_for(r"Resuming operations after the pause", count=2)
        first.wait_for(r"CREATED contested")
    finally:
        if second is not None:
            second.stop()
        assert first.stop() == 0


def test_freeze_and_resume_from_the_cli(peering: str, namespace: str, tmp_path: Path) -> None:
    operator = ours(tmp_path, namespace, "--peering", peering)
    try:
        apply(greeting("first", namespace))
        operator.wait_for(r"CREATED first")
        frozen = kopf_cli("freeze", "-n", namespace, "--peering", peering, "--lifetime", "600", "--id", "ops-team",
                          "--message", "migrating the database")
        assert frozen.returncode == 0, frozen.stderr
        assert peers(namespace)["ops-team"]["priority"] == 100
        # Kopf takes --message and drops it; here it is kept in the record and said by the paused.
        assert peers(namespace)["ops-team"]["message"] == "migrating the database"
        operator.wait_for(r"Pausing operations in favour of \[<Peer ops-team: priority=100, lifetime=600")
        operator.wait_for(r"ops-team pauses us: migrating the database")
        apply(greeting("while-frozen", namespace))
        resumed = kopf_cli("resume", "-n", namespace, "--peering", peering, "--id", "ops-team")
        assert resumed.returncode == 0, resumed.stderr
        assert "ops-team" not in peers(namespace)
        operator.wait_for(r"Resuming operations after the pause", count=2)
        operator.wait_for(r"CREATED while-frozen")
    finally:
        assert operator.stop() == 0
    before_resume = operator.output.rsplit("Resuming operations", 1)[0]
    assert "CREATED while-frozen" not in before_resume, "changes made while paused wait for the resume"

    missing = kopf_cli("freeze", "-n", namespace, "--peering", "absent", "--lifetime", "60")
    assert missing.returncode != 0
    assert "The peering 'absent' is not found" in missing.stderr


def test_a_mandatory_peering_that_is_missing(peering_crds: None, crd: None, namespace: str, tmp_path: Path) -> None:
    operator = ours(tmp_path, namespace, "--peering", "absent")
    exit_code = operator.process.wait(timeout=60)
    operator.stop()
    assert exit_code != 0
    assert f"the KopfPeering 'absent' is not found in the namespace '{namespace}'" in operator.output


QUICK_KEEPALIVES = HANDLERS + """
@kopf.on.startup()
def quick_keepalives(settings, **_):
    settings.peering.lifetime = 5  # a keep-alive every second
"""


@pytest.mark.parametrize("engine", ["kopf", "ours"])
def test_the_default_peering_is_joined_whenever_it_appears(peering_crds: None, crd: None, namespace: str,
                                                           tmp_path: Path, reference_kopf: Path,
                                                           engine: str) -> None:
    """Without `--peering`, the `default` peering is used if it exists: while it does not,
    the operator serves its objects and its keep-alives say "not found" in debug lines; once
    created, it is joined. The same in Kopf 1.45.2 (our engine used to run standalone for
    good, with a warning, when the object was missing at the start)."""
    script = write_script(tmp_path, QUICK_KEEPALIVES, name=f"{engine}.py")
    operator = OperatorProcess(["run", "-n", namespace, "--verbose", str(script)], cwd=tmp_path,
                               kopf=reference_kopf if engine == "kopf" else None, env={"POD_ID": engine})
    try:
        operator.wait_for(rf"Keep-alive in 'default' in '{namespace}': not found\.")
        apply(greeting("unpaired", namespace))
        operator.wait_for(r"CREATED unpaired")
        apply({"apiVersion": "kopf.dev/v1", "kind": "KopfPeering",
               "metadata": {"name": "default", "namespace": namespace}})
        record = eventually(lambda: (get("kopfpeering", "default", namespace).get("status") or {}).get(engine),
                            what="our record in the default peering")
        assert record["lifetime"] == 5
        operator.wait_for(rf"Keep-alive in 'default' in '{namespace}': ok\.")
    finally:
        assert operator.stop() == 0
    assert "standalone" not in operator.output


@pytest.mark.parametrize("higher", ["kopf", "ours"])
def test_peering_with_kopf(peering: str, namespace: str, tmp_path: Path, reference_kopf: Path, higher: str) -> None:
    """Our operator and Kopf 1.45.2 in the same peering object: the lower one pauses for the
    higher one, whichever engine that is, and resumes when it exits."""
    script = write_script(tmp_path, HANDLERS, name="shared.py")
    engines: dict[str, Path | None] = {"kopf": reference_kopf, "ours": None}
    identities = {"kopf": "kopf-1.45.2", "ours": "kopf-rs"}
    lower_name = "ours" if higher == "kopf" else "kopf"

    def start(engine: str, priority: int) -> OperatorProcess:
        return OperatorProcess(["run", "-n", namespace, "--verbose", "--peering", peering, "--priority", str(priority),
                                str(script)], cwd=tmp_path, kopf=engines[engine], env={"POD_ID": identities[engine]})

    lower = start(lower_name, 5)
    upper = None
    try:
        eventually(lambda: identities[lower_name] in peers(namespace), what="the lower one's record")
        lower.wait_for(r"Resuming operations after the pause")  # the start of a mandatory peering
        upper = start(higher, 50)
        record = eventually(lambda: peers(namespace).get(identities[higher]), what="the higher one's record")
        assert set(record) == {"priority", "lifetime", "lastseen"} and record["priority"] == 50
        lower.wait_for(rf"Pausing operations in favour of \[<Peer {identities[higher]}: priority=50")
        apply(greeting("shared", namespace))
        upper.wait_for(r"CREATED shared")
        assert upper.stop() == 0
        lower.wait_for(r"Resuming operations after the pause", count=2)
        apply(greeting("later", namespace))
        lower.wait_for(r"CREATED later")
        assert "CREATED shared" not in lower.output, f"{lower_name} handled an object while paused"
        assert lower.stop() == 0
    finally:
        lower.stop()
        if upper is not None:
            upper.stop()
    assert "Traceback" not in lower.output + (upper.output if upper else "")
    assert json.dumps(peers(namespace)) == "{}", "both withdrew their records"


def test_cluster_wide_peering_and_dead_peers(peering_crds: None, crd: None, namespace: str, tmp_path: Path) -> None:
    """Cluster-wide operators peer in a `ClusterKopfPeering`; records whose lifetime has
    passed are removed and pause nobody."""
    name = f"cluster-{namespace}"
    apply({"apiVersion": "kopf.dev/v1", "kind": "ClusterKopfPeering", "metadata": {"name": name}})
    ghost = {"ghost": {"priority": 1000, "lifetime": 1, "lastseen": "2020-01-01T00:00:00+00:00"}}
    kubectl("patch", "clusterkopfpeering", name, "--type=merge", "-p", json.dumps({"status": ghost}))
    script = f"""
import kopf

@kopf.on.create('greetings', labels={{'peering-test': '{namespace}'}})
def created(name, logger, **_):
    logger.info(f"CREATED {{name}}")
"""
    path = write_script(tmp_path, script, name="cluster.py")
    operator = OperatorProcess(["run", "-A", "--verbose", "--peering", name, "--dev", str(path)], cwd=tmp_path,
                               env={"POD_ID": "cluster-op"})
    try:
        status = eventually(lambda: "cluster-op" in (s := get_cluster_peering(name)) and s,
                            what="our record, cluster-wide")
        assert status["cluster-op"]["priority"] == 666, "--dev"
        eventually(lambda: "ghost" not in get_cluster_peering(name), what="the dead peer cleaned up")
        operator.wait_for(r"Keep-alive in '.*' cluster-wide: ok")
        labelled = greeting("clusterwide", namespace)
        labelled["metadata"]["labels"] = {"peering-test": namespace}
        apply(labelled)
        operator.wait_for(r"CREATED clusterwide")
    finally:
        assert operator.stop() == 0
        kubectl("delete", "clusterkopfpeering", name, "--wait=false")
    assert "Pausing operations" not in operator.output, "a dead peer pauses nobody"


def get_cluster_peering(name: str) -> dict[str, Any]:
    return json.loads(kubectl("get", "clusterkopfpeering", name, "-o", "json")).get("status") or {}
