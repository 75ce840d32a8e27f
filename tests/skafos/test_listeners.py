"""Skafos' listener API (`skafos.stream_watch.StreamWatch`) on the core, as Skafos' users run
it: `python app.py`, with the `kubernetes` client; checked by what they would look at — the
objects' status, what the listeners print, the health port, the election's ConfigMap."""

from __future__ import annotations

import json
import os
import re
import signal
import sys
import urllib.error
import urllib.request
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from support.cluster import apply, kubectl, kubectl_json
from support.forwarding import Forwarder
from support.network import free_port
from support.operators import OperatorProcess, eventually

HERE = Path(__file__).parent


class Listeners(OperatorProcess):
    """`python listeners.py` (a Skafos operator) with its output collected."""

    def __init__(self, namespace: str, tmp_path: Path, **env: str) -> None:
        self.port = free_port()
        env = {"NAMESPACE": namespace, "PORT": str(self.port), **env}
        super().__init__([str(HERE / "listeners.py")], cwd=tmp_path, env=env, kopf=Path(sys.executable))

    def health(self) -> int:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/healthz", timeout=5) as response:
                return int(response.status)
        except urllib.error.HTTPError as e:
            return e.code

    def lines(self, word: str) -> list[str]:
        return re.findall(rf"^{word} (.*)$", self.output, re.M)


@pytest.fixture()
def start(namespace: str, tmp_path: Path) -> Iterator[Any]:
    started: list[Listeners] = []

    def starting(**env: str) -> Listeners:
        process = Listeners(namespace, tmp_path, **env)
        started.append(process)
        return process

    yield starting
    for process in started:
        process.kill()


def listenee(name: str, namespace: str, **spec: Any) -> dict[str, Any]:
    return {"apiVersion": "skafos.kopf.dev/v1", "kind": "Listenee",
            "metadata": {"name": name, "namespace": namespace}, "spec": spec}


def status(name: str, namespace: str) -> dict[str, Any]:
    return dict(kubectl_json("get", "listenees.skafos.kopf.dev", name, "-n", namespace).get("status") or {})


def test_listeners_by_reference_and_by_class(start: Any, namespace: str) -> None:
    app = start()
    app.wait_for(r"Streaming the events of listenees")
    apply([listenee("one", namespace), listenee("two", namespace)])
    eventually(lambda: status("one", namespace).get("greeted") and status("two", namespace).get("greeted"),
               what="both objects greeted by the class listener's kubernetes client")
    kubectl("patch", "listenees.skafos.kopf.dev", "one", "-n", namespace, "--type=merge", "-p",
            '{"spec": {"size": 2}}')
    app.wait_for(r"EVENT MODIFIED one \d+ by \d+", count=2)  # its status, then its spec
    kubectl("delete", "listenees.skafos.kopf.dev", "two", "-n", namespace)
    app.wait_for(r"EVENT DELETED two ")
    journal = app.lines("EVENT")
    assert len({line.rsplit(" by ", 1)[1] for line in journal}) == 1, journal  # one instance for all
    greeters = [line.rsplit(" by ", 1)[1] for line in app.lines("CREATED")]
    assert sorted(line.split()[0] for line in app.lines("CREATED")) == ["one", "two"]
    assert len(set(greeters)) == 2  # a new instance per event
    assert "one :: Greeter completed with status: succeeded" in app.output
    assert app.health() == 200


def test_a_failing_listener_is_logged_and_the_next_event_arrives(start: Any, namespace: str) -> None:
    app = start()
    app.wait_for(r"Streaming the events of listenees")
    apply([listenee("bad", namespace, fail=True)])
    app.wait_for(r"ROLLBACK Journal bad")
    apply([listenee("refused", namespace, refuse=True)])
    app.wait_for(r"ROLLBACK Journal refused")
    apply([listenee("good", namespace)])
    eventually(lambda: status("good", namespace).get("greeted"), what="the next object greeted")
    output = app.output
    assert "ValueError: asked to fail by bad" in output
    assert "bad :: Greeter failed" in output
    assert "Listener returned False on event, rolling back previous changes" in output
    assert "refused :: Greeter completed with status: failed" in output
    assert app.process.poll() is None


def election_configmap(namespace: str, name: str) -> dict[str, Any]:
    return dict(kubectl_json("get", "configmap", name, "-n", namespace).get("data") or {})


def test_error_events_reach_the_listeners_and_an_expired_handover_relists(start: Any, namespace: str) -> None:
    """A former leader handed over a version the API server no longer has: the stream's
    ERROR (410 Expired) reaches `error()`, and the objects come from a new listing."""
    apply([listenee("existing", namespace)])
    kubectl("create", "configmap", "app-le", "-n", namespace,
            "--from-literal=leader=", "--from-literal=heartbeat=2020-01-01T00:00:00",
            "--from-literal=handledVersion=1")
    app = start(HOSTNAME="app-5d9f8-aaaaa", ELECTION_NAMESPACE=namespace)
    app.wait_for(r"Streaming the events of listenees.* from the handled version 1\.")
    app.wait_for(r"(?m)^ERROR 410 Expired$")
    app.wait_for(r"EVENT ERROR None None")
    eventually(lambda: status("existing", namespace).get("greeted") == "app-5d9f8-aaaaa",
               what="the existing object delivered by the new listing")
    assert election_configmap(namespace, "app-le")["leader"] == "app-5d9f8-aaaaa"


def test_the_health_port_follows_the_stream(start: Any, namespace: str, tmp_path: Path) -> None:
    config = json.loads(Path(os.environ["KUBECONFIG"]).read_text())
    server = config["clusters"][0]["cluster"]["server"]
    host, port = re.match(r"https://([^:/]+):(\d+)", server).groups()  # type: ignore[union-attr]
    forwarder = Forwarder((host, int(port)))
    config["clusters"][0]["cluster"]["server"] = f"https://{host}:{forwarder.port}"
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(json.dumps(config))
    app = start(KUBECONFIG=str(kubeconfig), TIMEOUT="3")
    app.wait_for(r"Streaming the events of listenees")
    eventually(lambda: app.health() == 200, what="healthy while streaming")
    forwarder.cut()
    eventually(lambda: app.health() == 503, timeout=20, what="unhealthy with the API server unreachable")
    forwarder.restore()
    eventually(lambda: app.health() == 200, timeout=40, what="healthy again once the API server is back")
    apply([listenee("after", namespace)])
    eventually(lambda: status("after", namespace).get("greeted"), what="events flowing again")
    forwarder.cut()


def test_stop_from_another_thread_ends_run_promptly(start: Any, namespace: str) -> None:
    app = start(STOP_AFTER="3", HOSTNAME="app-5d9f8-ccccc", ELECTION_NAMESPACE=namespace)
    output = app.wait_for(r"STOPPED after", timeout=30)
    seconds = float(re.search(r"STOPPED after ([\d.]+)s", output).group(1))  # type: ignore[union-attr]
    assert seconds < 10, output  # the watch timeout is 7200 seconds
    assert app.process.wait(timeout=10) == 0
    data = election_configmap(namespace, "app-le")
    assert data["leader"] == ""  # released for the next replica, not left to expire


def test_two_replicas_the_leader_killed_each_event_handled_once(start: Any, namespace: str) -> None:
    first = start(HOSTNAME="app-5d9f8-aaaaa", ELECTION_NAMESPACE=namespace)
    first.wait_for(r"Leading: the ConfigMap '.*/app-le' is held by app-5d9f8-aaaaa")
    second = start(HOSTNAME="app-5d9f8-bbbbb", ELECTION_NAMESPACE=namespace)
    second.wait_for(r"Not leading: the ConfigMap '.*/app-le' is held by app-5d9f8-aaaaa")
    apply([listenee(f"before-{i}", namespace) for i in range(5)])
    eventually(lambda: all(status(f"before-{i}", namespace).get("greeted") == "app-5d9f8-aaaaa"
                           for i in range(5)), what="the leader greeting the first objects")

    def recorded() -> bool:  # the leader's record says it handled every version there is
        versions = [int(item["metadata"]["resourceVersion"])
                    for item in kubectl_json("get", "listenees.skafos.kopf.dev", "-n", namespace)["items"]]
        return int(election_configmap(namespace, "app-le").get("handledVersion", 0)) >= max(versions)

    eventually(recorded, what="the handled version recorded in the ConfigMap")
    first.process.send_signal(signal.SIGKILL)
    apply([listenee(f"after-{i}", namespace) for i in range(5)])
    # Taken over after 30 seconds without renewals (+ a 5 seconds' retry).
    eventually(lambda: all(status(f"after-{i}", namespace).get("greeted") == "app-5d9f8-bbbbb"
                           for i in range(5)), timeout=60, what="the other replica taking over")
    second.wait_for(r"Leading: the ConfigMap '.*/app-le' is held by app-5d9f8-bbbbb")
    first_events = [line.rsplit(" by ", 1)[0] for line in first.lines("EVENT")]
    second_events = [line.rsplit(" by ", 1)[0] for line in second.lines("EVENT")]
    both = Counter(first_events + second_events)
    assert [event for event, count in both.items() if count > 1] == [], (first_events, second_events)
    assert sorted(line.split()[0] for line in first.lines("CREATED")) == [f"before-{i}" for i in range(5)]
    assert sorted(line.split()[0] for line in second.lines("CREATED")) == [f"after-{i}" for i in range(5)]
    assert not any(event.startswith("ADDED before-") for event in second_events)


def test_a_frozen_leader_does_not_deliver_after_its_term(start: Any, namespace: str) -> None:
    """Fencing: a leader frozen past its renew deadline (while another took over) delivers
    nothing of what it receives when it wakes up."""
    first = start(HOSTNAME="app-5d9f8-aaaaa", ELECTION_NAMESPACE=namespace)
    first.wait_for(r"Leading: the ConfigMap '.*/app-le' is held by app-5d9f8-aaaaa")
    second = start(HOSTNAME="app-5d9f8-bbbbb", ELECTION_NAMESPACE=namespace)
    second.wait_for(r"Not leading: the ConfigMap '.*/app-le' is held by app-5d9f8-aaaaa")
    first.process.send_signal(signal.SIGSTOP)
    try:
        apply([listenee(f"frozen-{i}", namespace) for i in range(3)])
        eventually(lambda: all(status(f"frozen-{i}", namespace).get("greeted") == "app-5d9f8-bbbbb"
                               for i in range(3)), timeout=60, what="the other replica taking over")
    finally:
        first.process.send_signal(signal.SIGCONT)
    first.wait_for(r"Lost the ConfigMap '.*/app-le': .*; handling stops\.")
    eventually(lambda: first.health() == 200, what="the frozen replica answering again")
    assert not [line for line in first.lines("EVENT") if "frozen-" in line], first.output
    assert not first.lines("CREATED")
