"""The operator killed (SIGKILL) in the middle of a burst, then started again: no object is left
marked as handled (its diff base written) without its handler's result in its status. A cycle's
writes go out results first, the diff base after them (`applying::plan`), so a kill between two
writes re-runs a handler, never drops its result."""

from __future__ import annotations

import json
import signal
import time
from pathlib import Path

from support.cluster import kubectl
from support.operators import OperatorProcess, write_script

OBJECTS = 300
ROUNDS = 3
HANDLED = "kopf.zalando.org/last-handled-configuration"


def census(namespace: str) -> tuple[int, int, list[str]]:
    """How many objects have their result; how many are marked handled; which are marked
    handled without a result (lost for good: nothing would call the handler again)."""
    items = json.loads(kubectl("get", "greetings", "-n", namespace, "-o", "json"))["items"]
    results = [item for item in items if (item.get("status") or {}).get("create_fn")]
    handled = [item for item in items if HANDLED in (item["metadata"].get("annotations") or {})]
    lost = [item["metadata"]["name"] for item in handled if not (item.get("status") or {}).get("create_fn")]
    return len(results), len(handled), lost


def test_a_kill_in_a_burst_loses_no_result(crd: None, namespace: str, tmp_path: Path) -> None:
    script = write_script(tmp_path, """
        import kopf

        @kopf.on.create('greetings')
        def create_fn(name, **_):
            return {'greeted': name}
    """)
    killed_at = []
    for round in range(ROUNDS):
        names = [f"r{round}-{i}" for i in range(OBJECTS)]
        items = [{"apiVersion": "demo.kopf.dev/v1", "kind": "Greeting",
                  "metadata": {"name": name, "namespace": namespace}, "spec": {}} for name in names]
        kubectl("create", "-f", "-", input=json.dumps({"apiVersion": "v1", "kind": "List", "items": items}))
        operator = OperatorProcess(["run", "--standalone", "-n", namespace, str(script)], cwd=tmp_path)
        try:
            # Killed when a third of the handlers have returned (its log says so at once; the
            # cluster's view lags behind): their writes are then in flight.
            operator.wait_for("Handler 'create_fn' succeeded", timeout=60, count=OBJECTS // 3)
            operator.process.send_signal(signal.SIGKILL)
            operator.process.wait()
            killed_at.append(census(namespace)[0] - round * OBJECTS)
        finally:
            operator.kill()
        restarted = OperatorProcess(["run", "--standalone", "-n", namespace, str(script)], cwd=tmp_path)
        try:
            deadline = time.monotonic() + 90
            while census(namespace)[1] < (round + 1) * OBJECTS and time.monotonic() < deadline:
                time.sleep(0.2)
            results, handled, lost = census(namespace)
        finally:
            restarted.stop(signal.SIGTERM)
        assert lost == [], f"round {round}: marked handled without a result: {lost}"
        assert (results, handled) == ((round + 1) * OBJECTS,) * 2, restarted.output[-3000:]
    print(f"\n{ROUNDS} rounds of {OBJECTS}: killed with {killed_at} results in; 0 lost")
