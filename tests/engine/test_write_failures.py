"""A write that the API refuses (here: by an admission webhook, 403) is retried, as Kopf retries
it, by the request's `error_backoffs`; once those are spent, the object's processing is retried
with the throttling delays; either way, the handlers that already ran are not run again."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from support.cluster import kubectl
from support.operators import OperatorProcess, eventually, get, write_script
from support.webhooks import validating_webhook


@pytest.fixture()
def refusing_webhook(tmp_path: Path, namespace: str) -> Iterator[list[str]]:
    """Deny the operator's first two writes of its state to greetings; record every UPDATE."""
    seen: list[str] = []

    def decide(request: dict[str, Any]) -> tuple[bool, str]:
        annotations = request["object"].get("metadata", {}).get("annotations", {})
        state_write = "kopf.zalando.org/last-handled-configuration" in annotations
        seen.append("state" if state_write else "other")
        return not state_write or seen.count("state") > 2, "temporarily refused"

    rule = {"apiGroups": ["demo.kopf.dev"], "apiVersions": ["v1"], "operations": ["UPDATE"],
            "resources": ["greetings"]}
    with validating_webhook(tmp_path, f"refuse-{namespace}", decide, rule=rule, namespace=namespace):
        yield seen


@pytest.mark.parametrize("request_retries", [True, False])
def test_refused_writes_are_retried_without_rerunning_handlers(
        crd: None, namespace: str, tmp_path: Path, refusing_webhook: list[str], request_retries: bool) -> None:
    script = write_script(tmp_path, f"""
        import kopf

        @kopf.on.startup()
        def configure(settings, **_):
            settings.networking.error_backoffs = {[0.5] * 3 if request_retries else []}

        @kopf.on.create('greetings')
        def once(name, logger, **_):
            logger.info(f"once {{name}}")
            return 'done'
    """)
    kubectl("create", "-f", "-", input=json.dumps({"apiVersion": "demo.kopf.dev/v1", "kind": "Greeting",
                                                   "metadata": {"name": "w1", "namespace": namespace}}))
    # The webhook's configuration takes a moment to become active: probe it with dry-runs.
    eventually(lambda: kubectl("annotate", "greeting", "w1", "-n", namespace, "probe=1", "--overwrite",
                               "--dry-run=server", check=False) is not None and "other" in refusing_webhook,
               what="the webhook to be called")
    operator = OperatorProcess(["run", "-n", namespace, str(script)], cwd=tmp_path)
    try:
        # The result lands first (the status), the diff base after it (refused, retried).
        obj = eventually(lambda: (o := get("greeting", "w1", namespace)).get("status") and
                         "kopf.zalando.org/last-handled-configuration" in o["metadata"].get("annotations", {})
                         and o, timeout=60, what="the result and the diff base")
    finally:
        operator.stop()
    output = operator.output
    assert output.count("once w1") == 1
    if request_retries:
        assert f"Request attempt #1/4 failed; will retry: PATCH /apis/demo.kopf.dev/v1/namespaces/{namespace}" \
               "/greetings/w1" in output
        assert "Throttling" not in output
    else:
        assert "Throttling for 1 seconds due to an unexpected error" in output
    assert "temporarily refused" in output
    assert obj["status"] == {"once": "done"}
    assert "kopf.zalando.org/last-handled-configuration" in obj["metadata"]["annotations"]
