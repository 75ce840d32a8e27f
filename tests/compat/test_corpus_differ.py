"""The corpus' differ on made-up recordings (no cluster): what it normalises away (times,
uids, the run's namespace, traceback frames, other tests' objects), and what it reports."""

from __future__ import annotations

import collections
import json
import re
from pathlib import Path

import pytest
from corpus import differing, recording

NS = "corpus-demo-ours"
VENV = Path("/cache/corpus/demo-ours-0123")
KOPF_LOG = f"""\
[2026-11-27 03:00:03,150] kopf.objects         [INFO    ] [{NS}/a] Handler 'create_fn' succeeded.
[2026-11-27 03:00:03,151] kopf.objects         [ERROR   ] [{NS}/a] Handler 'x' failed: 0x7f3a2b1c4d5e
Traceback (most recent call last):
  File "{VENV}/lib/python3.11/site-packages/kopf/_core/actions/execution.py", line 250, in run
ValueError: boom at 2026-11-27T03:00:03.123456Z
[2026-11-27 03:00:04,000] kopf.objects         [INFO    ] [test-1234/other] Handler 'create_fn' succeeded.
[2026-11-27 03:00:04,001] kopf.objects         [INFO    ] [test-1234] Handler 'ns_fn' succeeded.
{VENV}/lib/python3.11/site-packages/kr8s/_api.py:91: UserWarning: not supported
"""


def test_log_lines_are_normalised_and_others_objects_left_out() -> None:
    lines = recording.normalised_logs(KOPF_LOG, NS, VENV)
    assert lines == collections.Counter({
        "kopf.objects [INFO] [<ns>/a] Handler 'create_fn' succeeded.": 1,
        "kopf.objects [ERROR] [<ns>/a] Handler 'x' failed: <address>": 1,
        "Traceback (most recent call last):": 1,
        "ValueError: boom at <time>": 1,
        "<venv>/lib/python3.11/site-packages/kr8s/_api.py:91: UserWarning: not supported": 1,
    })


def test_objects_lose_what_differs_in_every_run_and_keep_kopfs_json_by_value() -> None:
    item = {
        "apiVersion": "demo/v1", "kind": "Demo",
        "metadata": {"name": "a", "namespace": NS, "uid": "0d4f6a0e-5b1c-4c9e-9f1e-3a2b1c4d5e6f",
                     "resourceVersion": "123", "creationTimestamp": "2026-11-27T03:00:00Z", "managedFields": [],
                     "annotations": {"kopf.zalando.org/last-handled-configuration": '{"spec":{"x":1}}',
                                     "kubectl.kubernetes.io/last-applied-configuration": "{}"},
                     "ownerReferences": [{"uid": "8c2e4a1b-7d3f-4e5a-9b6c-1d2e3f4a5b6c", "name": "p"}]},
        "spec": {"x": 1, "ip": "10.0.0.17"},
    }
    assert recording.normalised_object(item, NS) == {
        "kind": "Demo",
        "metadata": {"name": "a", "namespace": "<ns>",
                     "annotations": {"kopf.zalando.org/last-handled-configuration": {"spec": {"x": 1}}},
                     "ownerReferences": [{"uid": "<uid>", "name": "p"}]},
        "spec": {"x": 1, "ip": "<ip>"},
    }


def _recordings() -> tuple[recording.Recording, recording.Recording]:
    kopf = recording.Recording(engine="kopf", exit_code=0, exit_seconds=0.5)
    ours = recording.Recording(engine="ours", exit_code=0, exit_seconds=0.1)
    for run in (kopf, ours):
        run.snapshots["creation"] = {"demos/a": {"status": {"create_fn": {"message": "hello"}}}}
        run.writes["engine patch demos a"] = 2
        run.logs["kopf.objects [INFO] [<ns>/a] Handler 'create_fn' succeeded."] = 1
    return kopf, ours


def test_equal_runs_have_no_differences() -> None:
    assert differing.differences(*_recordings()) == []


def test_every_kind_of_difference_is_a_line() -> None:
    kopf, ours = _recordings()
    ours.snapshots["creation"]["demos/a"]["status"]["create_fn"] = {"message": "bye"}
    ours.snapshots["creation"]["demos/b"] = {}
    ours.writes["engine patch demos a"] = 3
    del ours.logs["kopf.objects [INFO] [<ns>/a] Handler 'create_fn' succeeded."]
    ours.events["Demo/a Normal Logging: hi"] = 1
    ours.timeouts.append("the creation is handled")
    ours.exit_code, ours.exit_seconds = None, 30.0
    assert differing.differences(kopf, ours) == [
        "timeout: the creation is handled: kopf=False ours=True",
        'objects after creation: demos/a status.create_fn.message: kopf="hello" ours="bye"',
        "objects after creation: demos/b: only on ours",
        "writes: engine patch demos a: kopf=2 ours=3",
        "logs: kopf.objects [INFO] [<ns>/a] Handler 'create_fn' succeeded.: kopf=1 ours=0",
        "events: Demo/a Normal Logging: hi: kopf=0 ours=1",
        "exit code on SIGTERM: kopf=0 ours=None",
        "exit time on SIGTERM: kopf=0.5s ours=30.0s",
    ]


def test_accepted_differences_need_a_kind_and_a_reason_and_cover_by_pattern(tmp_path: Path,
                                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    lines = ["writes: engine patch demos a: kopf=2 ours=3", "logs: something else: kopf=1 ours=0"]
    entry = differing.Acceptance(operator="demo*", difference=re.compile("^writes: engine patch demos"),
                                 kind="engine-detail", reason="timing")
    assert differing.unaccepted("demo-asyncio", lines, [entry]) == ["logs: something else: kopf=1 ours=0"]
    assert differing.unaccepted("other", lines, [entry]) == lines
    bad = tmp_path / "accepted.toml"
    bad.write_text('[[accepted]]\ndifference = "x"\nkind = "engine-detail"\n')
    monkeypatch.setattr(differing, "ACCEPTED", bad)
    with pytest.raises(ValueError, match="a reason"):
        differing.accepted()


def test_the_corpus_own_list_of_accepted_differences_is_valid() -> None:
    assert all(entry.reason and entry.kind in differing.KINDS for entry in differing.accepted())


def test_writes_are_read_from_the_audit_log_and_refused_ones_counted_apart(tmp_path: Path) -> None:
    def entry(agent: str, verb: str, code: int, namespace: str = NS, subresource: str | None = None) -> str:
        ref = {"resource": "demos", "namespace": namespace, "name": "a"}
        if subresource:
            ref["subresource"] = subresource
        return json.dumps({"verb": verb, "userAgent": agent, "objectRef": ref, "responseStatus": {"code": code}})

    log = tmp_path / "audit.log"
    log.write_text("\n".join([
        entry("kubectl/v1.36.3", "create", 201),  # the scenario's own, not the operator's
        entry("kopf-rs/0.1.0", "patch", 409),  # its optimistic lock lost a race
        entry("kopf-rs/0.1.0", "patch", 200),
        entry("kopf-rs/0.1.0", "patch", 200, subresource="status"),
        entry("kopf-rs/0.1.0", "get", 200),  # not a write
        entry("kr8s/0.20", "patch", 200),
        entry("kopf-rs/0.1.0", "patch", 200, namespace="other"),
    ]) + "\n")
    assert recording.audit_writes(log, 0, NS) == collections.Counter({
        "engine patch demos a (refused: 409)": 1,
        "engine patch demos a": 1,
        "engine patch demos/status a": 1,
        "kr8s patch demos a": 1,
    })
