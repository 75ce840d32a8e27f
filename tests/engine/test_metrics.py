"""`kopf run --metrics`: the engine's figures in the Prometheus format, scraped during a
lifecycle on the real control plane and checked against what happened; parsed with the
official Python client's parser."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from pathlib import Path

import pytest
from support.cluster import kubectl
from support.metrics import scrape, value
from support.network import free_port
from support.operators import OperatorProcess, eventually, write_script

HANDLERS = """
    import kopf

    @kopf.on.create('greetings')
    def create_fn(spec, **_):
        return {'greeted': spec.get('who')}

    @kopf.on.update('greetings')
    def update_fn(retry, **_):
        if retry < 1:
            raise kopf.TemporaryError("not yet", delay=0.5)

    @kopf.on.event('greetings')
    def seen(**_):
        pass

    @kopf.timer('greetings', interval=0.5)
    def tick(**_):
        pass

    @kopf.daemon('greetings')
    async def watcher(stopped, **_):
        await stopped.wait()
"""

RESOURCE = "greetings.v1.demo.kopf.dev"


def greeting(name: str, namespace: str) -> str:
    return json.dumps({"apiVersion": "demo.kopf.dev/v1", "kind": "Greeting",
                       "metadata": {"name": name, "namespace": namespace}, "spec": {"who": name}})


def test_the_figures_follow_a_lifecycle(crd: None, namespace: str, tmp_path: Path) -> None:
    script = write_script(tmp_path, HANDLERS)
    port = free_port()
    operator = OperatorProcess(["run", "-n", namespace, "--standalone", "--metrics", f"127.0.0.1:{port}",
                                str(script)], cwd=tmp_path)
    try:
        operator.wait_for(rf"Serving metrics at http://127.0.0.1:{port}/metrics")
        for name in ("m1", "m2", "m3"):
            kubectl("create", "-f", "-", input=greeting(name, namespace))
        operator.wait_for(r"Handler 'create_fn' succeeded", count=3)
        eventually(lambda: value(scrape(port), "kopf_timer_lateness_seconds_count", handler="tick") >= 6,
                   what="timer calls")
        kubectl("patch", "greeting", "m1", "-n", namespace, "--type=merge", "-p", '{"spec": {"x": 1}}')
        operator.wait_for(r"Handler 'update_fn' succeeded")

        samples = scrape(port)
        calls = "kopf_handler_calls_total"
        assert value(samples, calls, resource=RESOURCE, handler="create_fn", kind="changing",
                     outcome="success") == 3
        assert value(samples, calls, handler="update_fn", outcome="temporary") == 1
        assert value(samples, calls, handler="update_fn", outcome="success") == 1
        assert value(samples, "kopf_handler_retries_total", handler="update_fn") == 1
        assert value(samples, calls, handler="seen", kind="watching", outcome="success") >= 4
        assert value(samples, calls, handler="tick", kind="timer", outcome="success") >= 6
        assert value(samples, "kopf_handler_duration_seconds_count", handler="create_fn") == 3
        assert value(samples, "kopf_objects_watched", resource=RESOURCE) == 3
        assert value(samples, "kopf_daemons_running", resource=RESOURCE) == 3
        assert value(samples, "kopf_timers_running", resource=RESOURCE) == 3
        assert value(samples, "kopf_paused") == 0
        # Each creation: the finalizer, then the results and progress; the update: 2 attempts.
        assert value(samples, "kopf_api_requests_total", verb="PATCH", code="2xx") >= 8
        assert value(samples, "kopf_api_requests_total", verb="WATCH", code="2xx") >= 1
        assert value(samples, "kopf_api_request_duration_seconds_count", verb="PATCH") >= 8
        assert not [key for key in samples if any(v in ("m1", "m2", "m3") for _, v in key[1])], \
            "object names are never labels"

        for name in ("m1", "m2", "m3"):
            kubectl("delete", "greeting", name, "-n", namespace, "--timeout=30s")
        eventually(lambda: value(scrape(port), "kopf_objects_watched", resource=RESOURCE) == 0,
                   what="the objects forgotten")
        samples = scrape(port)
        assert value(samples, "kopf_daemons_running") == 0 and value(samples, "kopf_timers_running") == 0
        assert value(samples, calls, handler="watcher", kind="daemon", outcome="success") == 3
    finally:
        assert operator.stop() == 0


def test_without_the_option_nothing_is_served(crd: None, namespace: str, tmp_path: Path) -> None:
    script = write_script(tmp_path, HANDLERS)
    port = free_port()
    operator = OperatorProcess(["run", "-n", namespace, "--standalone", str(script)], cwd=tmp_path)
    try:
        kubectl("create", "-f", "-", input=greeting("n1", namespace))
        operator.wait_for(r"Handler 'create_fn' succeeded")
        with pytest.raises(urllib.error.URLError):
            urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=2)
        assert "metrics" not in operator.output.lower()
    finally:
        assert operator.stop() == 0


@pytest.mark.parametrize("address", ["nonsense", "127.0.0.1:99999", "::1:9090"])
def test_a_wrong_address_stops_the_start_with_a_clear_error(namespace: str, tmp_path: Path, address: str) -> None:
    script = write_script(tmp_path, HANDLERS)
    operator = OperatorProcess(["run", "-n", namespace, "--standalone", str(script)], cwd=tmp_path,
                               env={"KOPF_RUN_METRICS": address})
    operator.process.wait(timeout=30)
    assert operator.stop() == 1
    assert f"unsupported metrics address {address!r}: expected [HOST:]PORT" in operator.output.replace('"', "'")
