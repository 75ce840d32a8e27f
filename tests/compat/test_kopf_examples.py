"""Kopf 1.45.2's own example operators, run unchanged on our engine.

The sdist is downloaded at test time (never stored in this repository) and unpacked
into a cache outside it. Each example runs under `KopfRunner` against the real
cluster while its demo object is created and deleted; then we check what Kopf's
own end-to-end test checks: the log lines, each handler succeeding exactly once,
failures only where expected, no tracebacks, and a clean exit.
"""

from __future__ import annotations

import collections
import dataclasses
import re
import time
from pathlib import Path

import kopf
import pytest
from kopf._handling.handlers import SmartOperatorRegistry
from kopf.testing import KopfRunner
from support.cluster import kubectl


@dataclasses.dataclass
class Expectations:
    """How an example behaves: what to wait for, and which handlers succeed or fail how often."""

    startup: list[str] = dataclasses.field(default_factory=lambda: ["Initial authentication has finished"])
    creation: list[str] = dataclasses.field(default_factory=lambda: ["Creation is processed"])
    deletion: list[str] = dataclasses.field(default_factory=lambda: ["Deleted, really deleted"])
    successes: dict[str, int] | None = None  # None: every handler that succeeded did so once
    failures: dict[str, int] | None = None   # None: no handler failed
    tracebacks: bool = False
    logged: list[str] = dataclasses.field(default_factory=list)  # lines the example must log
    missing: str | None = None  # a feature our engine does not have yet (the example is expected to fail)
    objects: str | None = None  # other objects that exist while it runs (a YAML manifest)
    webhooks: str | None = None  # the webhook configurations it manages (removed after it)
    mutated: str | None = None  # a JSONPath that its mutating webhooks fill in the demo object


EXAMPLE_POD = """
apiVersion: v1
kind: Pod
metadata: {name: kopf-example-pod, namespace: default, labels: {app: kopf-example-indexed}}
spec: {containers: [{name: main, image: busybox}]}
"""

EXAMPLES: dict[str, Expectations] = {
    "01-minimal": Expectations(),
    "02-children": Expectations(),
    "03-exceptions": Expectations(
        tracebacks=True, creation=["Something has changed,"],
        successes={"eventual_success_with_a_few_messages": 1},
        failures={"eventual_failure_with_tracebacks": 1, "instant_failure_with_traceback": 1,
                  "instant_failure_with_only_a_message": 1},
    ),
    "04-events": Expectations(),
    "05-handlers": Expectations(),
    "06-peering": Expectations(),
    "07-subhandlers": Expectations(
        # Each item's sub-handler in a cycle of its own (the default lifecycle), then the parent.
        successes={"create_fn/item1": 1, "create_fn/item2": 1, "create_fn": 1},
        logged=["=== Handling creation for item1. ===", "=== Handling creation for item2. ===",
                "Handler 'create_fn/item1' succeeded.", "Handler 'create_fn/item2' succeeded."],
    ),
    "08-events": Expectations(tracebacks=True, successes={"normal_event_fn": 2}, creation=[], deletion=[]),
    "13-hooks": Expectations(startup=["Served by the background task."], creation=[], deletion=[],
                             successes={"startup_fn_simple": 1, "startup_fn_retried": 1, "cleanup_fn": 1}),
    "14-daemons": Expectations(
        creation=["Ping from a sync daemon"], deletion=["Daemon 'background_sync' has exited"],
        logged=["Daemon 'background_sync' failed temporarily: Simulated failure.",
                "=> Ping from a sync daemon: field='value', retry=3",
                "=> Ping from an async daemon: field='value'",
                "Daemon 'background_async' is signalled to exit by force.",
                "Daemon 'background_sync' has exited on request and will not be retried or restarted."],
    ),
    "15-timers": Expectations(
        creation=["Ping from a sync timer"], deletion=[],
        logged=["Ping from a sync timer: field='value'", "Timer 'every_few_seconds_sync' succeeded."],
    ),
    "16-indexing": Expectations(
        # Its timer prints an index (to stdout) once the pod, existing before the start, is in it.
        objects=EXAMPLE_POD, creation=["Timer 'intervalled' succeeded."], deletion=[],
        logged=["[default/kopf-example-pod] Indexer 'is_running' succeeded.",
                "[default/kopf-example-pod] Indexer 'by_label' succeeded.",
                "{('app', 'kopf-example-indexed'): ['kopf-example-pod']}"],
    ),
    "17-admission": Expectations(
        # Its webhooks are called by the apiserver for the object (managed configurations).
        startup=["Reconfiguring the mutating webhook auto.kopf.dev."], mutated="{.spec.injected}",
        creation=["Webhook 'validate_subresources' succeeded."], deletion=[], successes={},
        logged=["Reconfiguring the validating webhook auto.kopf.dev.",
                "Reconfiguring the mutating webhook auto.kopf.dev.",
                "[default/kopf-example-1] Webhook 'mutate1' succeeded.",
                "[default/kopf-example-1] Webhook 'validate1' succeeded.",
                "[default/kopf-example-1] Webhook 'authhook' succeeded.",
                "Cleaning up the admission webhook auto.kopf.dev."],
        webhooks="auto.kopf.dev",
    ),
    "99-all-at-once": Expectations(
        tracebacks=True, creation=["Creation is processed:"],
        successes={"create_1": 1, "create_2": 1, "create_pod": 1, "delete": 1,
                   "startup_fn_simple": 1, "startup_fn_retried": 1, "cleanup_fn": 1},
    ),
}


def wait_for(caplog: pytest.LogCaptureFixture, runner: KopfRunner, patterns: list[str], timeout: float = 20) -> bool:
    if not patterns:  # nothing to wait for: give it a few seconds
        time.sleep(3)
        return True
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and not runner.future.done():  # done: it has exited early
        if any(re.search(pattern, message) for message in list(caplog.messages) for pattern in patterns):
            return True
        time.sleep(0.2)
    return False


def mutating_in_force(obj: Path, jsonpath: str, timeout: float = 20) -> None:
    """The apiserver reads webhook configurations through an informer: a configuration written
    a moment ago may not be called yet. A server-side dry run shows when it is."""
    deadline = time.monotonic() + timeout
    while not kubectl("create", "--dry-run=server", "-f", str(obj), "-o", f"jsonpath={jsonpath}"):
        assert time.monotonic() < deadline, f"the mutating webhooks are not called in {timeout} s"
        time.sleep(0.2)


def handler_decorators(source: str) -> set[str]:
    return set(re.findall(r"^@kopf\.(?:on\.)?(\w+)\(", source, re.MULTILINE))


@pytest.mark.parametrize("name", sorted(EXAMPLES))
def test_kopf_example(name: str, kopf_source: Path, example_crd: None, caplog: pytest.LogCaptureFixture,
                      request: pytest.FixtureRequest) -> None:
    expected = EXAMPLES[name]
    if expected.missing:
        request.applymarker(pytest.mark.xfail(reason=f"needs {expected.missing}", strict=True, raises=Exception))
    example = kopf_source / "examples" / name / "example.py"
    obj = kopf_source / "examples" / "obj.yaml"
    source = example.read_text()
    kinds = handler_decorators(source)
    mandatory_delete = bool(re.search(r"^@kopf\.on\.delete\((?![^)]*optional=True)", source, re.MULTILINE))

    settings = kopf.OperatorSettings()
    settings.execution.default_backoff = 1  # the examples' retries should not take minutes
    settings.watching.server_timeout = 10
    kubectl("delete", "-f", str(obj), "--ignore-not-found", "--timeout=30s")
    if expected.objects:
        kubectl("apply", "-f", "-", input=expected.objects)
        request.addfinalizer(lambda: kubectl("delete", "-f", "-", "--ignore-not-found", input=expected.objects))
    if expected.webhooks:  # left behind, they would refuse other tests' objects
        request.addfinalizer(lambda: kubectl(
            "delete", "validatingwebhookconfigurations,mutatingwebhookconfigurations",
            expected.webhooks, "--ignore-not-found"))
    registry = SmartOperatorRegistry()  # each example registers into its own, as in a separate process
    with KopfRunner(["run", "--all-namespaces", "--standalone", "--verbose", str(example)],
                    timeout=60, settings=settings, registry=registry) as runner:
        wait_for(caplog, runner, expected.startup)
        kubectl("apply", "-f", str(obj))
        wait_for(caplog, runner, expected.creation)
        kubectl("delete", "-f", str(obj), "--timeout=30s")
        wait_for(caplog, runner, expected.deletion)

    assert runner.exception is None
    assert runner.exit_code == 0
    output = runner.output
    if mandatory_delete:
        assert "[default/kopf-example-1] Adding the finalizer" in output
        assert "[default/kopf-example-1] Deletion is in progress:" in output
    if "create" in kinds:
        assert "[default/kopf-example-1] Creation is in progress:" in output
    if kinds & {"create", "update", "delete"}:
        assert "[default/kopf-example-1] Deleted, really deleted" in output
    if not expected.tracebacks:
        assert "Traceback (most recent call last):" not in output

    # Only the handlers' own result lines: debug dumps of bodies quote the stored messages too.
    succeeded = collections.Counter(re.findall(r"(?:Handler|Activity|Indexer) '([^']+)' succeeded\.$", output, re.M))
    if expected.successes is None:
        assert set(succeeded.values()) <= {1}, succeeded
    else:
        assert {k: v for k, v in succeeded.items() if k in expected.successes} == expected.successes
    for line in expected.logged:
        assert line in output, line
    failed = collections.Counter(re.findall(
        r"\] Handler '([^']+)' failed (?:permanently|with an exception and will stop)", output))
    assert dict(failed) == (expected.failures or {})
