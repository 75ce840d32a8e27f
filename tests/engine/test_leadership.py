"""Lease-based leader election: three replicas of one operator as processes; only the
Lease holder handles objects; when it is killed, or frozen past its lease, another one
takes over; no object is ever handled by two replicas."""

from __future__ import annotations

import re
import signal
import time
from pathlib import Path
from typing import Any

from support.cluster import EXAMPLES, apply, kubectl_json
from support.operators import (
    OperatorProcess,
    account_kubeconfig,
    eventually,
    get,
    refused,
    write_script,
    yaml_documents,
)

DURATION, DEADLINE, RETRY = 4.0, 3.0, 0.5

SCRIPT = f"""
import os
import kopf

@kopf.on.startup()
def configure(settings, **_):
    settings.leadership.lease_duration = {DURATION}
    settings.leadership.renew_deadline = {DEADLINE}
    settings.leadership.retry_period = {RETRY}

@kopf.on.create('greetings')
def created(name, logger, **_):
    logger.info(f"HANDLED {{name}} BY {{os.environ['POD_ID']}}")
"""


def greeting(name: str, namespace: str) -> dict[str, Any]:
    return {"apiVersion": "demo.kopf.dev/v1", "kind": "Greeting",
            "metadata": {"name": name, "namespace": namespace}, "spec": {}}


def leading(replicas: dict[str, OperatorProcess], namespace: str) -> list[str]:
    """The replicas whose latest word on the lease is that they lead."""
    found = []
    for name, replica in replicas.items():
        words = re.findall(rf"(Leading|Lost the lease|Not leading): the lease '{namespace}/test-lease'|"
                           rf"(Lost the lease) '{namespace}/test-lease'", replica.output)
        if words and (words[-1][0] or words[-1][1]) == "Leading":
            found.append(name)
    return found


def handled(namespace: str, names: list[str]) -> bool:
    """All these objects are handled and their diff base is stored (nothing left to redo)."""
    items = kubectl_json("get", "greetings", "-n", namespace)["items"]
    done = {i["metadata"]["name"] for i in items
            if "kopf.zalando.org/last-handled-configuration" in i["metadata"].get("annotations", {})}
    return set(names) <= done


def test_one_replica_handles_and_another_takes_over(crd: None, namespace: str, tmp_path: Path) -> None:
    script = write_script(tmp_path, SCRIPT)
    replicas = {
        f"replica-{i}": OperatorProcess(["run", "-n", namespace, "--standalone", "--lease", "test-lease",
                                         "--verbose", str(script)], cwd=tmp_path, env={"POD_ID": f"replica-{i}"})
        for i in range(1, 4)
    }
    try:
        first = eventually(lambda: (found := leading(replicas, namespace)) and found, what="a leader")
        assert len(first) == 1, first
        leader = first[0]
        lease = kubectl_json("get", "lease", "test-lease", "-n", namespace)
        assert lease["spec"]["holderIdentity"] == leader
        for name, replica in replicas.items():
            if name != leader:
                replica.wait_for(rf"Not leading: the lease '{namespace}/test-lease' is held by {leader}; waiting")

        batch1 = [f"a{i}" for i in range(5)]
        apply([greeting(name, namespace) for name in batch1])
        eventually(lambda: handled(namespace, batch1), what="the first batch handled")

        replicas[leader].kill()  # SIGKILL: no release; the lease must expire
        killed_at = time.monotonic()
        survivors = {n: r for n, r in replicas.items() if n != leader}
        second = eventually(lambda: (found := leading(survivors, namespace)) and found, timeout=30,
                            what="a new leader")
        took_over_in = time.monotonic() - killed_at
        print(f"\nTake-over after SIGKILL of the leader: {took_over_in:.1f} s (lease duration {DURATION:g} s)")
        assert len(second) == 1, second
        # The holder renews every RETRY; the others (looking every RETRY) take over once the
        # record has not changed for DURATION by their clocks.
        assert took_over_in <= DURATION + RETRY + 0.5, took_over_in

        batch2 = [f"b{i}" for i in range(5)]
        apply([greeting(name, namespace) for name in batch2])
        eventually(lambda: handled(namespace, batch2), what="the second batch handled")

        # Frozen past its lease: on waking, it must stop at once, not handle on a stale lease.
        frozen = replicas[second[0]]
        frozen.process.send_signal(signal.SIGSTOP)
        others = {n: r for n, r in survivors.items() if n != second[0]}
        third = eventually(lambda: (found := leading(others, namespace)) and found, timeout=30,
                           what="a leader after the freeze")
        batch3 = [f"c{i}" for i in range(3)]
        apply([greeting(name, namespace) for name in batch3])
        eventually(lambda: handled(namespace, batch3), what="the third batch handled")
        frozen.process.send_signal(signal.SIGCONT)
        frozen.wait_for(rf"Lost the lease '{namespace}/test-lease': "
                        rf"(it was not renewed within {DEADLINE:g} seconds|it is taken by {third[0]}); handling stops")
        batch4 = [f"d{i}" for i in range(3)]
        apply([greeting(name, namespace) for name in batch4])
        eventually(lambda: handled(namespace, batch4), what="the fourth batch handled")
        assert leading(survivors, namespace) == third, "the one that was frozen follows now"
    finally:
        codes = {name: replica.stop() for name, replica in replicas.items() if replica.process.poll() is None}
    assert all(code == 0 for code in codes.values()), codes
    assert f"Released the lease '{namespace}/test-lease'." in replicas[third[0]].output

    everything = "".join(replica.output for replica in replicas.values())
    for name in batch1 + batch2 + batch3 + batch4:
        assert len(re.findall(rf"HANDLED {name} BY", everything)) == 1, name
    assert f"BY {leader}" in everything and f"BY {second[0]}" in everything and f"BY {third[0]}" in everything
    assert re.findall(r"HANDLED d\d BY (\S+)", everything) == [third[0]] * 3


def test_a_leader_that_exits_holds_the_lease_until_its_handlers_finish(
        crd: None, namespace: str, tmp_path: Path) -> None:
    """On exit, the leader keeps its Lease renewed (past the lease's duration) while the
    handlers it had started finish (within the exit timeout), and releases it only then:
    the next leader does not start those objects meanwhile."""
    script = write_script(tmp_path, SCRIPT + """
import time

@kopf.on.startup()
def wait_longer(settings, **_):
    settings.queueing.exit_timeout = 15

@kopf.on.create('greetings', field='spec.slow', value=True)
def slow(name, logger, **_):
    logger.info(f"STARTED {name} BY {os.environ['POD_ID']} AT {time.time():.6f}")
    if os.environ['POD_ID'] == 'first':
        time.sleep(8)  # twice the lease's duration
    logger.info(f"FINISHED {name} BY {os.environ['POD_ID']} AT {time.time():.6f}")
""")
    def start(name: str) -> OperatorProcess:
        return OperatorProcess(["run", "-n", namespace, "--standalone", "--lease", "test-lease", str(script)],
                               cwd=tmp_path, env={"POD_ID": name})

    replicas = {"first": start("first")}
    first = replicas["first"]
    try:
        first.wait_for(rf"Leading: the lease '{namespace}/test-lease' is held by first")
        second = replicas["second"] = start("second")  # the first leads: it started alone
        second.wait_for(rf"Not leading: the lease '{namespace}/test-lease' is held by first")
        apply([{**greeting(f"slow{i}", namespace), "spec": {"slow": True}} for i in range(3)])
        first.wait_for(r"STARTED slow\d BY first", count=3)
        first.process.send_signal(signal.SIGINT)
        assert first.process.wait(timeout=30) == 0
        second.wait_for(rf"Leading: the lease '{namespace}/test-lease' is held by second")
        time.sleep(1)  # time for the new leader to start anything left
    finally:
        codes = [replica.stop() for replica in replicas.values()]
    assert codes == [0, 0]
    finished = re.findall(r"FINISHED (slow\d) BY first AT ([\d.]+)", first.output)
    assert sorted(name for name, _ in finished) == ["slow0", "slow1", "slow2"], first.output
    assert "STARTED slow" not in second.output, "the next leader took over before the handlers finished"
    assert f"Releasing the lease '{namespace}/test-lease' once the handling in progress has finished." in first.output
    assert f"Released the lease '{namespace}/test-lease'." in first.output


def test_the_example_deployments_rbac_is_enough(crd: None, namespace: str, tmp_path: Path) -> None:
    """The documented ServiceAccount and roles let the operator elect and handle: run it
    with that account's token (as the Deployment's pods would) and see it work."""
    manifests = yaml_documents(EXAMPLES / "leader-election" / "deployment.yaml")
    apply([m for m in manifests if m["kind"] != "Deployment"])  # kwok runs no containers: the operator runs here
    kubeconfig = account_kubeconfig("greeter", tmp_path)
    operator = OperatorProcess(["run", "--all-namespaces", "--standalone", "--lease", "greeter-leader",
                                str(EXAMPLES / "greeter" / "operator.py")], cwd=tmp_path,
                               env={"KUBECONFIG": str(kubeconfig), "POD_ID": "greeter-pod", "POD_NAMESPACE": "default"})
    try:
        operator.wait_for(r"Leading: the lease 'default/greeter-leader' is held by greeter-pod")
        apply({**greeting("rbac", namespace), "spec": {"who": "RBAC"}})
        status = eventually(lambda: get("greeting", "rbac", namespace).get("status"), what="the status")
        assert status == {"greet": {"message": "Hello, RBAC!"}}
    finally:
        assert operator.stop() == 0
    assert not refused(operator.output), operator.output
    assert "Released the lease 'default/greeter-leader'." in operator.output
