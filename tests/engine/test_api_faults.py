"""Faults between the operator and the API server (`tests/support/faults.py`): throttling with only a
Retry-After header, an unavailable server, a watch stream cut in the middle of an event; run
with our engine and, for comparison, with PyPI's Kopf 1.45.2."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from support.cluster import kubectl
from support.faults import Fault, FaultProxy
from support.operators import OperatorProcess, write_script

HANDLERS = """
    import kopf

    @kopf.on.startup()
    def configure(settings, **_):
        settings.networking.error_backoffs = [1, 1, 1, 1]

    @kopf.on.create('greetings')
    def hello(name, logger, **_):
        logger.info(f"hello {name}")
        return 'greeted'
"""


@pytest.fixture()
def proxy() -> Iterator[FaultProxy]:
    proxy = FaultProxy()
    yield proxy
    proxy.close()


def greeting(namespace: str, name: str) -> None:
    kubectl("create", "-f", "-", input=json.dumps({"apiVersion": "demo.kopf.dev/v1", "kind": "Greeting",
                                                   "metadata": {"name": name, "namespace": namespace}}))


def run(proxy: FaultProxy, tmp_path: Path, namespace: str, kopf: Path | None = None) -> OperatorProcess:
    script = write_script(tmp_path, HANDLERS)
    env = {"KUBECONFIG": str(proxy.kubeconfig(tmp_path))}
    return OperatorProcess(["run", "--standalone", "-n", namespace, str(script)], cwd=tmp_path, env=env, kopf=kopf)


@pytest.mark.parametrize("engine", ["ours", "kopf"])
def test_a_throttled_patch_waits_as_long_as_the_header_asks(
        crd: None, namespace: str, tmp_path: Path, proxy: FaultProxy, reference_kopf: Path, engine: str) -> None:
    # A gateway's 429: no Status body, only `Retry-After: 3`, for the first write of the object.
    throttled = []

    def rule(method: str, path: str) -> Fault | None:
        if method == "PATCH" and "/greetings/g1" in path and not throttled:
            throttled.append(time.monotonic())
            return Fault(code=429, headers={"Retry-After": "3"}, body=b"Too Many Requests")
        return None

    proxy.rule = rule
    greeting(namespace, "g1")
    operator = run(proxy, tmp_path, namespace, kopf=reference_kopf if engine == "kopf" else None)
    try:
        operator.wait_for("Handler 'hello' succeeded", timeout=30)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and len([s for s in proxy.seen if s.method == "PATCH"]) < 2:
            time.sleep(0.1)
    finally:
        operator.stop()
    patches = [s for s in proxy.seen if s.method == "PATCH" and "/greetings/g1" in s.path]
    assert len(patches) >= 2, operator.output
    gap = patches[1].at - patches[0].at
    print(f"\n{engine}: retried the throttled PATCH after {gap:.2f}s (Retry-After: 3, backoff 1)")
    assert gap >= 2.95, operator.output


def test_an_unavailable_server_is_listed_again_when_it_asks(
        crd: None, namespace: str, tmp_path: Path, proxy: FaultProxy) -> None:
    # The first listing of greetings gets a 503 with `Retry-After: 4` and no Status body; the
    # request's own retries (1 s each) stretch to 4 s.
    refused = []

    def rule(method: str, path: str) -> Fault | None:
        if method == "GET" and "/greetings" in path and "watch=" not in path and not refused:
            refused.append(time.monotonic())
            return Fault(code=503, headers={"Retry-After": "4"}, body=b"Service Unavailable")
        return None

    proxy.rule = rule
    greeting(namespace, "u1")
    operator = run(proxy, tmp_path, namespace)
    try:
        operator.wait_for("hello u1", timeout=30)
    finally:
        operator.stop()
    lists = [s for s in proxy.seen if s.method == "GET" and "/greetings" in s.path and "watch=" not in s.path]
    gap = lists[1].at - lists[0].at
    print(f"\nours: listed again {gap:.2f}s after the 503 (Retry-After: 4)")
    assert gap >= 3.95, operator.output


@pytest.mark.parametrize("engine", ["ours", "kopf"])
def test_a_watch_stream_cut_in_an_event_is_resumed(
        crd: None, namespace: str, tmp_path: Path, proxy: FaultProxy, reference_kopf: Path, engine: str) -> None:
    # The first watch stream of greetings ends 40 bytes into its first event (a truncated
    # chunk: the connection closes mid-JSON); the object of that event must still be handled.
    cut = []

    def rule(method: str, path: str) -> Fault | None:
        if "/greetings" in path and "watch=true" in path and not cut:
            cut.append(path)
            return Fault(cut_after=40)
        return None

    proxy.rule = rule
    operator = run(proxy, tmp_path, namespace, kopf=reference_kopf if engine == "kopf" else None)
    try:
        operator.wait_for("Initial authentication has finished", timeout=30)
        deadline = time.monotonic() + 20
        while not cut and time.monotonic() < deadline:
            time.sleep(0.1)
        time.sleep(0.5)  # the watch request is being answered: its first event is the new object
        greeting(namespace, "c1")
        handled = True
        try:
            operator.wait_for("hello c1", timeout=20)
        except AssertionError:
            handled = False
        alive = operator.process.poll() is None
    finally:
        operator.stop()
    print(f"\n{engine}: the object of the cut event handled: {handled}; the operator alive: {alive}")
    if engine == "ours":
        assert handled and alive, operator.output
