"""Pods run on the control plane's simulated nodes (kwok): scheduled, running, ending,
restarting, deleted; their containers' logs served through the API server, also followed."""

from __future__ import annotations

import datetime
import queue
import subprocess
import threading
from pathlib import Path
from typing import Any

from support.cluster import apply, kubectl, kubectl_json
from support.kwok import exit_with, log_files, pod, pod_status, restart, write_lines
from support.operators import eventually

NODES = {"kwok-node-0", "kwok-node-1"}


def logs_of(*args: str) -> str:
    result = subprocess.run(["kubectl", "logs", *args], capture_output=True, text=True, check=False)
    return result.stdout if result.returncode == 0 else ""


class Follower:
    """`kubectl logs -f`, its lines read with a deadline (a stream that stalls fails the test)."""

    def __init__(self, *args: str) -> None:
        self.process = subprocess.Popen(["kubectl", "logs", "-f", *args], stdout=subprocess.PIPE, text=True)
        self.lines: queue.Queue[str] = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            self.lines.put(line)

    def line(self, timeout: float = 20) -> str:
        return self.lines.get(timeout=timeout)

    def stop(self) -> None:
        self.process.kill()
        self.process.wait()


def running(name: str, namespace: str) -> dict[str, Any]:
    return eventually(lambda: (s := pod_status(name, namespace)).get("phase") == "Running" and s,
                      what=f"pod {name} running")


def test_the_simulated_nodes_are_ready(cluster: dict[str, str]) -> None:
    nodes = kubectl_json("get", "nodes", "-l", "type=kwok")["items"]
    assert {node["metadata"]["name"] for node in nodes} == NODES
    for node in nodes:
        assert {"type": "InternalIP", "address": "127.0.0.1"} in node["status"]["addresses"]
        assert [c["status"] for c in node["status"]["conditions"] if c["type"] == "Ready"] == ["True"]


def test_a_pod_is_scheduled_and_runs(namespace: str) -> None:
    apply(pod("p1", namespace, containers=("main", "sidecar")))
    status = running("p1", namespace)
    assert kubectl_json("get", "pod", "p1", "-n", namespace)["spec"]["nodeName"] in NODES
    assert status["podIP"].startswith("10.1.")
    assert [(c["name"], list(c["state"])) for c in status["containerStatuses"]] == \
        [("main", ["running"]), ("sidecar", ["running"])]
    reasons = {e["reason"] for e in kubectl_json("get", "events", "-n", namespace)["items"]}
    assert "Scheduled" in reasons


def test_a_pod_ends_as_its_containers_exit(namespace: str) -> None:
    apply([pod("done", namespace), pod("broken", namespace)])
    for name in ("done", "broken"):
        running(name, namespace)
    exit_with("done", namespace, 0)
    exit_with("broken", namespace, 3)
    for name, phase, code in [("done", "Succeeded", 0), ("broken", "Failed", 3)]:
        status = eventually(lambda name=name: (s := pod_status(name, namespace)).get("phase") != "Running" and s,
                            what=f"pod {name} ended")
        assert status["phase"] == phase
        terminated = status["containerStatuses"][0]["state"]["terminated"]
        assert terminated["exitCode"] == code


def test_a_pods_containers_restart(namespace: str) -> None:
    apply(pod("flaky", namespace))
    running("flaky", namespace)
    restart("flaky", namespace, 1)
    status = eventually(lambda: (s := pod_status("flaky", namespace))["containerStatuses"][0]["restartCount"] == 1
                        and s, what="a restart")
    container = status["containerStatuses"][0]
    assert status["phase"] == "Running"
    assert "running" in container["state"] and "terminated" in container["lastState"]


def test_a_deleted_pod_is_gone_at_once(namespace: str) -> None:
    apply(pod("gone", namespace))
    running("gone", namespace)
    kubectl("delete", "pod", "gone", "-n", namespace, "--wait=false")
    eventually(lambda: not pod_status("gone", namespace), what="the pod's removal")


def test_a_containers_logs_are_served_and_followed(namespace: str, tmp_path: Path) -> None:
    apply(pod("talker", namespace, containers=("main", "sidecar")))
    running("talker", namespace)
    files = {"main": tmp_path / "main.log", "sidecar": tmp_path / "sidecar.log"}
    at = datetime.datetime(2026, 1, 2, 3, 4, 5, 678901, tzinfo=datetime.UTC)
    write_lines(files["main"], "first line", "second line", at=at)
    write_lines(files["sidecar"], "the sidecar's line")
    log_files("talker", namespace, files)
    logs = eventually(lambda: logs_of("talker", "-c", "main", "-n", namespace, "--timestamps"), what="the logs")
    assert logs.splitlines() == ["2026-01-02T03:04:05.678901000Z first line",
                                 "2026-01-02T03:04:05.678901000Z second line"]
    assert logs_of("talker", "-c", "sidecar", "-n", namespace) == "the sidecar's line\n"
    # Followed: lines written later arrive on the open stream.
    follower = Follower("talker", "-c", "main", "-n", namespace)
    try:
        assert [follower.line(), follower.line()] == ["first line\n", "second line\n"]
        write_lines(files["main"], "a later line")
        assert follower.line() == "a later line\n"
    finally:
        follower.stop()
