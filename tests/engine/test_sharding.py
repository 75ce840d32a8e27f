"""Automatic sharding (`kopf run --shards auto`, not in Kopf): replicas find each other by
Leases, split the objects' uid hashes among the live ones, re-split when one dies or joins,
and hand a range over only once its previous replica has stopped handling it."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import time
import urllib.parse
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from support.audit import AuditLog
from support.cluster import apply, kubectl
from support.operators import (
    OperatorProcess,
    account_kubeconfig,
    eventually,
    greeted_statuses,
    refused,
    write_script,
    yaml_documents,
)

EXAMPLES = Path(__file__).parents[2] / "examples"
CLUSTER = Path(__file__).parents[2] / "checks" / "cluster"
DURATION, DEADLINE, RETRY = 4.0, 3.0, 0.5


def greetings(namespace: str, names: list[str]) -> str:
    return json.dumps({"apiVersion": "v1", "kind": "List", "items": [
        {"apiVersion": "demo.kopf.dev/v1", "kind": "Greeting",
         "metadata": {"name": name, "namespace": namespace}} for name in names]})


def sharded_script(tmp_path: Path, namespace: str, group: str, handlers: str) -> Path:
    """A script whose replicas share in `group`, with short lease timings, and `handlers`."""
    return write_script(tmp_path, f"""
        import os, time
        import kopf

        @kopf.on.startup()
        def configure(settings, **_):
            settings.sharding.group = {group!r}
            settings.leadership.lease_namespace = {namespace!r}
            settings.leadership.lease_duration = {DURATION}
            settings.leadership.renew_deadline = {DEADLINE}
            settings.leadership.retry_period = {RETRY}
    """ + handlers)


def start(script: Path, namespace: str, tmp_path: Path, identity: str) -> OperatorProcess:
    return OperatorProcess(["run", "-n", namespace, "--standalone", "--shards", "auto", str(script)],
                           cwd=tmp_path, env={"POD_ID": identity})


def serving(replica: OperatorProcess, of: int) -> bool:
    return re.search(rf"Serving shard \d of {of}: shardRange", replica.output) is not None


def greeted(replicas: list[OperatorProcess]) -> Counter[str]:
    return Counter(name for replica in replicas for name in re.findall(r"GREETED (\S+) BY", replica.output))


def daemon_intervals(replicas: list[OperatorProcess], ended: dict[int, float]) -> dict[str, list[tuple[float, float]]]:
    """Each object's daemon runs, (start, stop), from all replicas' logs; a run that did not
    stop ended when its replica did (`ended`: a killed one's time, by index)."""
    runs: dict[str, list[tuple[float, float]]] = {}
    for index, replica in enumerate(replicas):
        started: dict[str, float] = {}
        for what, name, at in re.findall(r"DAEMON (START|STOP) (\S+) AT ([\d.]+)", replica.output):
            if what == "START":
                started[name] = float(at)
            else:
                runs.setdefault(name, []).append((started.pop(name), float(at)))
        for name, start in started.items():
            runs.setdefault(name, []).append((start, ended.get(index, float("inf"))))
    return runs


def test_replicas_share_the_objects_and_resplit_when_one_dies_or_joins(
        crd: None, namespace: str, tmp_path: Path) -> None:
    audit = AuditLog()
    script = sharded_script(tmp_path, namespace, "test-shards", """
        @kopf.on.create('greetings')
        def greet(name, logger, **_):
            logger.info(f"GREETED {name} BY {os.environ['POD_ID']}")
            return {'by': os.environ['POD_ID']}

        @kopf.daemon('greetings')
        async def guard(name, stopped, logger, **_):
            logger.info(f"DAEMON START {name} AT {time.time():.6f}")
            await stopped.wait()
            logger.info(f"DAEMON STOP {name} AT {time.time():.6f}")
    """)
    replicas = [start(script, namespace, tmp_path, f"replica-{i}") for i in range(3)]
    try:
        eventually(lambda: all(serving(r, 3) for r in replicas), timeout=60, what="3 replicas with a shard each")
        batch1 = [f"a{i:03}" for i in range(300)]
        kubectl("create", "-f", "-", input=greetings(namespace, batch1))
        eventually(lambda: set(batch1) <= set(greeted(replicas)), timeout=120, what="300 greetings handled")
        per_replica = [len(re.findall(r"GREETED a\d+ BY", r.output)) for r in replicas]
        assert all(count > 50 for count in per_replica), per_replica  # about a third each
        # Their results written before the kill: an object's main patch and its status
        # subresource's are two requests (as in Kopf), and a kill between them leaves the
        # object handled without its result, which is not what this test is about.
        greeted_statuses(namespace, 300)

        # A replica dies without a word: its range is taken over after its lease expires.
        replicas[2].process.send_signal(signal.SIGKILL)
        replicas[2].process.wait()
        killed, killed_at = time.monotonic(), time.time()
        survivors = replicas[:2]
        eventually(lambda: all(serving(r, 2) for r in survivors), timeout=30, what="2 replicas re-split")
        resplit = time.monotonic() - killed
        batch2 = [f"b{i:03}" for i in range(60)]
        kubectl("create", "-f", "-", input=greetings(namespace, batch2))
        eventually(lambda: set(batch2) <= set(greeted(replicas)), timeout=60, what="the second batch handled")
        # The bound: the lease's duration plus a retry period (and the test's polling).
        assert resplit < DURATION + RETRY + 3, resplit

        # A fourth replica joins: the ranges are split in three again.
        joined = start(script, namespace, tmp_path, "replica-3")
        replicas.append(joined)
        live = [replicas[0], replicas[1], joined]
        eventually(lambda: all(serving(r, 3) for r in live), timeout=30, what="3 replicas again")
        batch3 = [f"c{i:03}" for i in range(60)]
        kubectl("create", "-f", "-", input=greetings(namespace, batch3))
        eventually(lambda: set(batch3) <= set(greeted(replicas)), timeout=60, what="the third batch handled")
        assert re.search(r"GREETED c\d+ BY replica-3", joined.output), "the new replica has a share"
        time.sleep(2)  # time for a second handling, if any were to come
    finally:
        codes = [r.stop() for r in replicas if r.process.poll() is None]
    assert codes == [0, 0, 0]
    counts = greeted(replicas)
    assert set(counts) == set(batch1 + batch2 + batch3)
    assert [name for name, count in counts.items() if count != 1] == [], "each handled once"
    statuses = greeted_statuses(namespace, 420, timeout=10)
    assert all(status.get("by") for status in statuses.values())
    # Each object's daemon ran on one replica at a time: stopped (or killed) on the one
    # before it started on the next.
    intervals = daemon_intervals(replicas, ended={2: killed_at})
    assert set(intervals) == set(counts)
    for name, runs in intervals.items():
        runs.sort()
        assert all(later[0] >= earlier[1] for earlier, later in zip(runs, runs[1:], strict=False)), (name, runs)
    assert sum(len(runs) for runs in intervals.values()) > len(intervals), "daemons moved between replicas"

    # Graceful exits leave the group (the leases deleted); the dead one's stays until it is
    # long expired. The streams asked the API server for the shards.
    for replica in replicas[:2] + [joined]:
        assert "Left the group 'test-shards'" in replica.output, tail(replica)
    shards = {urllib.parse.parse_qs(urllib.parse.urlparse(r["requestURI"]).query).get("shardSelector", [""])[0]
              for r in audit.requests(agent="kopf-rs/", namespace=namespace)
              if r.get("objectRef", {}).get("resource") == "greetings" and r["verb"] in ("list", "watch")}
    assert "shardRange(object.metadata.uid, '0x0000000000000000', '0x5555555555555555')" in shards
    assert "shardRange(object.metadata.uid, '0x8000000000000000', '0x10000000000000000')" in shards
    assert "" not in shards, "never unsharded"


def test_a_handler_still_running_holds_its_range_until_it_finishes(
        crd: None, namespace: str, tmp_path: Path) -> None:
    """Fenced hand-over: a replica that must give a range up stops handling, and claims the
    smaller range only when the handler it had started has finished; the newcomer waits."""
    script = sharded_script(tmp_path, namespace, "slow-shards", """
        @kopf.on.create('greetings')
        def greet(name, logger, **_):
            logger.info(f"STARTED {name} BY {os.environ['POD_ID']}")
            time.sleep(8 if name.startswith('slow') else 0)
            logger.info(f"FINISHED {name} BY {os.environ['POD_ID']}")
    """)
    first = start(script, namespace, tmp_path, "first")
    replicas = [first]
    try:
        first.wait_for(r"Serving shard 1 of 1")
        kubectl("create", "-f", "-", input=greetings(namespace, [f"slow{i}" for i in range(4)]))
        first.wait_for(r"STARTED slow")
        second = start(script, namespace, tmp_path, "second")
        replicas.append(second)
        first.wait_for(r"Handing over shardRange")
        second.wait_for(r"Serving shard \d of 2", timeout=40)
        finished = [line for line in first.output.splitlines() if "FINISHED slow" in line]
        assert finished, "the newcomer started before the running handler finished"
        eventually(lambda: serving(first, 2), what="the first replica with its half")
    finally:
        codes = [r.stop() for r in replicas]
    assert codes == [0, 0]


def test_a_leaving_replica_holds_its_range_until_its_handler_finishes(
        crd: None, namespace: str, tmp_path: Path) -> None:
    """On exit, a replica keeps claiming its range (renewing its Lease past the lease's
    duration) while the handlers it had started finish (within the exit timeout), and
    deletes its Lease only then: the other replica does not start those objects meanwhile."""
    script = sharded_script(tmp_path, namespace, "leaving-shards", """
        @kopf.on.startup()
        def wait_longer(settings, **_):
            settings.queueing.exit_timeout = 15

        @kopf.on.create('greetings')
        def greet(name, logger, **_):
            logger.info(f"STARTED {name} BY {os.environ['POD_ID']} AT {time.time():.6f}")
            if os.environ['POD_ID'] == 'first':
                time.sleep(8)  # twice the lease's duration
            logger.info(f"FINISHED {name} BY {os.environ['POD_ID']} AT {time.time():.6f}")
    """)
    first, second = (start(script, namespace, tmp_path, identity) for identity in ("first", "second"))
    try:
        for replica in (first, second):
            replica.wait_for(r"Serving shard \d of 2", timeout=40)
        names = [f"slow{i}" for i in range(12)]  # some in each half (none in the first's: 1 in 4096)
        kubectl("create", "-f", "-", input=greetings(namespace, names))
        first.wait_for(r"STARTED slow\d BY first")
        first.process.send_signal(signal.SIGINT)
        assert first.process.wait(timeout=30) == 0
        second.wait_for(r"Serving shard 1 of 1", timeout=30)
        eventually(lambda: set(names) <= {name for r in (first, second) for name, _ in events(r, "FINISHED")},
                   timeout=60, what="all handled")
    finally:
        codes = [r.stop() for r in (first, second)]
    assert codes[1] == 0
    finished_by_first = dict(events(first, "FINISHED"))
    assert finished_by_first, "the first replica's handlers finished before it exited"
    restarted = dict(events(second, "STARTED"))
    assert all(restarted.get(name, float("inf")) > at for name, at in finished_by_first.items()), \
        (finished_by_first, restarted)
    assert "Leaving the group 'leaving-shards' once the handling in progress has finished." in first.output
    assert "Left the group 'leaving-shards'" in first.output, tail(first)


def tail(replica: OperatorProcess, lines: int = 30) -> str:
    """The last lines of a replica's log, for an assertion's message (pytest cuts long ones)."""
    return "\n".join(replica.output.splitlines()[-lines:])


def events(replica: OperatorProcess, what: str) -> list[tuple[str, float]]:
    """The handler's STARTED/FINISHED lines of a replica: (name, when)."""
    return [(name, float(at)) for name, at in re.findall(rf"{what} (\S+) BY \S+ AT ([\d.]+)", replica.output)]


def test_contradicting_options_are_refused_at_once(tmp_path: Path, namespace: str) -> None:
    script = write_script(tmp_path, """
        import kopf

        @kopf.on.startup()
        def configure(settings, **_):
            settings.watching.shard_selectors['greetings'] = "shardRange(object.metadata.uid, '0x0', '0x8')"

        @kopf.on.create('greetings')
        def greet(**_):
            pass
    """)
    operator = OperatorProcess(["run", "-n", namespace, "--standalone", "--shards", "auto", str(script)], cwd=tmp_path)
    assert operator.process.wait(timeout=60) == 1
    assert "settings.watching.shard_selectors cannot be used with it" in operator.output
    operator.stop()

    script.with_name("empty.py").write_text("import kopf\n")
    both = OperatorProcess(["run", "-n", namespace, "--standalone", "--shards", "auto", "--lease", "x",
                            str(script.with_name("empty.py"))], cwd=tmp_path)
    assert both.process.wait(timeout=60) == 1
    assert "either its shard (--shards auto) or everything as the leader (--lease NAME)" in both.output
    both.stop()

    bad = OperatorProcess(["run", "-n", namespace, "--shards", "sometimes", str(script)], cwd=tmp_path)
    assert bad.process.wait(timeout=60) == 2
    assert "'sometimes' is not 'auto'" in bad.output
    bad.stop()


def test_the_auto_sharding_examples_replicas_share_with_its_rbac(
        crd: None, namespace: str, tmp_path: Path) -> None:
    """examples/sharding/auto: two replicas (as the Deployment's pods) with the example's
    service account: each greeting greeted once, both replicas having a share."""
    manifests = yaml_documents(EXAMPLES / "sharding" / "auto" / "deployment.yaml")
    apply([m for m in manifests if m["kind"] != "Deployment"])  # kwok runs no containers: the operator runs here
    kubectl("delete", "leases", "-n", "default", "-l", "kopf.dev/shard-group=auto-greeter", check=False)
    kubeconfig = account_kubeconfig("auto-greeter", tmp_path)
    replicas = [OperatorProcess(["run", "-n", namespace, "--standalone", "--shards", "auto",
                                 str(EXAMPLES / "sharding" / "auto" / "operator.py")],
                                cwd=tmp_path, env={"KUBECONFIG": str(kubeconfig), "POD_ID": f"auto-greeter-{i}",
                                                   "POD_NAMESPACE": "default"})
                for i in range(2)]
    try:
        eventually(lambda: all(serving(r, 2) for r in replicas), timeout=60, what="2 replicas with a shard each")
        names = [f"x{i:02}" for i in range(40)]
        kubectl("create", "-f", "-", input=greetings(namespace, names))
        found = greeted_statuses(namespace, 40)
    finally:
        codes = [replica.stop() for replica in replicas]
    assert codes == [0, 0]
    by = Counter(status["replica"] for status in found.values())
    assert set(by) == {"auto-greeter-0", "auto-greeter-1"}, by
    for replica in replicas:
        assert not refused(replica.output), replica.output


@pytest.fixture
def unsharded(cluster: dict[str, str], tmp_path: Path) -> Iterator[Path]:
    """A kubeconfig of a second API server of the same cluster, without server-side sharding."""
    config = yaml.safe_load(Path(os.environ["KUBECONFIG"]).read_text())
    for entry in config["clusters"]:
        server = urllib.parse.urlparse(entry["cluster"]["server"])
        entry["cluster"]["server"] = f"https://{server.hostname}:{server.port + 5}"
    path = tmp_path / "unsharded.kubeconfig"
    path.write_text(yaml.safe_dump(config))
    with open(tmp_path / "unsharded-apiserver.log", "wb") as log:
        server_process = subprocess.Popen([str(CLUSTER), "unsharded"], stdout=log, stderr=subprocess.STDOUT)
    try:
        eventually(lambda: kubectl("--kubeconfig", str(path), "get", "--raw", "/readyz", check=False).strip() == "ok",
                   timeout=120, what="the second API server ready")
        yield path
    finally:
        server_process.terminate()
        server_process.wait(timeout=60)


def test_without_server_side_sharding_the_replicas_elect_one_leader(
        crd: None, namespace: str, tmp_path: Path, unsharded: Path) -> None:
    script = sharded_script(tmp_path, namespace, "fallback", """
        @kopf.on.create('greetings')
        def greet(name, logger, **_):
            logger.info(f"GREETED {name} BY {os.environ['POD_ID']}")
            return {'by': os.environ['POD_ID']}
    """)
    replicas = [OperatorProcess(["run", "-n", namespace, "--standalone", "--shards", "auto", str(script)],
                                cwd=tmp_path, env={"POD_ID": f"fallback-{i}", "KUBECONFIG": str(unsharded)})
                for i in range(2)]
    try:
        for replica in replicas:
            replica.wait_for(r"The API server does not filter lists and watches by shards .* the replicas elect "
                             rf"one leader by the lease '{namespace}/fallback-leader'; the others wait\.")
        eventually(lambda: any(f"Leading: the lease '{namespace}/fallback-leader' is held by" in r.output
                               for r in replicas), what="a leader")
        names = [f"f{i:02}" for i in range(20)]
        kubectl("create", "-f", "-", input=greetings(namespace, names))
        statuses = greeted_statuses(namespace, 20)
        time.sleep(1)  # time for a second handling, if any were to come
    finally:
        codes = [r.stop() for r in replicas]
    assert codes == [0, 0]
    assert len({status["by"] for status in statuses.values()}) == 1, "all by the one leader"
    assert sorted(greeted(replicas).elements()) == sorted(names), "each handled once"
    assert not any(serving(r, 1) or serving(r, 2) for r in replicas)
