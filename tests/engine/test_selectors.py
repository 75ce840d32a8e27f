"""Kopf's server-side selectors (`settings.watching.label_selectors`, `field_selectors`,
`shard_selectors`): the API filters the objects, so those outside are never listed or watched;
operators with shards split the objects and do not pause each other in a peering."""

from __future__ import annotations

import collections
import json
import re
import time
import urllib.parse
from pathlib import Path
from typing import Any

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

AGENT = "kopf-rs/"
EXAMPLES = Path(__file__).parents[2] / "examples"


def greetings(namespace: str, names: list[str], labels: dict[str, str] | None = None) -> str:
    return json.dumps({"apiVersion": "v1", "kind": "List", "items": [
        {"apiVersion": "demo.kopf.dev/v1", "kind": "Greeting",
         "metadata": {"name": name, "namespace": namespace, "labels": labels or {}}} for name in names]})


def greeting_requests(audit: AuditLog, namespace: str) -> list[dict[str, Any]]:
    return [r for r in audit.requests(agent=AGENT, namespace=namespace)
            if r.get("objectRef", {}).get("resource") == "greetings" and r["verb"] in ("list", "watch")]


def test_label_and_field_selectors_filter_on_the_server(crd: None, namespace: str, tmp_path: Path) -> None:
    audit = AuditLog()
    script = write_script(tmp_path, """
        import kopf

        @kopf.on.startup()
        def configure(settings, **_):
            settings.watching.label_selectors['greetings'] = 'team=a'
            settings.watching.label_selectors['demo.kopf.dev', 'v1', 'greetings'] = 'tier'
            settings.watching.label_selectors['pods'] = 'never=applies'
            settings.watching.field_selectors['greetings.demo.kopf.dev'] = 'metadata.name!=a-skipped'

        @kopf.on.event('greetings')
        def seen(name, type, logger, **_):
            logger.info(f"seen {name}")
    """)
    kubectl("create", "-f", "-", input=greetings(namespace, ["a-before"], {"team": "a", "tier": "1"}))
    operator = OperatorProcess(["run", "-n", namespace, str(script)], cwd=tmp_path)
    try:
        operator.wait_for(r"seen a-before")
        kubectl("create", "-f", "-", input=greetings(namespace, ["a-after", "a-skipped"], {"team": "a", "tier": "1"}))
        kubectl("create", "-f", "-", input=greetings(namespace, ["b-after"], {"team": "b", "tier": "1"}))
        kubectl("create", "-f", "-", input=greetings(namespace, ["a-untiered"], {"team": "a"}))
        operator.wait_for(r"seen a-after")
        kubectl("create", "-f", "-", input=greetings(namespace, ["a-last"], {"team": "a", "tier": "2"}))
        operator.wait_for(r"seen a-last")
    finally:
        operator.stop()
    seen = set(re.findall(r"seen (\S+)", operator.output))
    assert seen == {"a-before", "a-after", "a-last"}
    requests = greeting_requests(audit, namespace)
    assert {r["verb"] for r in requests} == {"list", "watch"}
    for request in requests:
        query = urllib.parse.parse_qs(urllib.parse.urlparse(request["requestURI"]).query)
        assert query["labelSelector"] == ["team=a,tier"]  # joined, deduplicated, sorted (as Kopf)
        assert query["fieldSelector"] == ["metadata.name!=a-skipped"]
        assert "shardSelector" not in query


HALVES = [
    "shardRange(object.metadata.uid, '0x0000000000000000', '0x8000000000000000')",
    "shardRange(object.metadata.uid, '0x8000000000000000', '0x10000000000000000')",
]


def test_two_sharded_operators_split_the_objects_and_both_work_in_a_peering(
        peering: str, namespace: str, tmp_path: Path) -> None:
    audit = AuditLog()
    operators = []
    for index, shard in enumerate(HALVES):
        script = write_script(tmp_path, f"""
            import kopf

            @kopf.on.startup()
            def configure(settings, **_):
                settings.watching.shard_selectors['greetings'] = {shard!r}

            @kopf.on.create('greetings')
            def greet(name, logger, **_):
                logger.info(f"greeted {{name}}")
        """, name=f"shard{index}.py")
        operators.append(OperatorProcess(["run", "-n", namespace, "--peering", peering, str(script)],
                                         cwd=tmp_path, env={"POD_ID": f"shard-{index}"}))
    try:
        names = [f"s{i:03}" for i in range(200)]
        kubectl("create", "-f", "-", input=greetings(namespace, names))
        eventually(lambda: sum(len(re.findall(r"greeted s\d+", o.output)) for o in operators) >= 200,
                   timeout=120, what="200 greetings handled")
        time.sleep(2)  # time for a second handling, if any were to come
    finally:
        for operator in operators:
            operator.stop()
    assert sum(len(re.findall(r"greeted s\d+", o.output)) for o in operators) == 200
    handled = [set(re.findall(r"greeted (s\d+)", o.output)) for o in operators]
    assert set(handled[0]) | set(handled[1]) == set(names)
    assert not set(handled[0]) & set(handled[1])  # each object by exactly one operator
    assert len(handled[0]) > 40 and len(handled[1]) > 40  # halves of the uids' hashes, about even
    for operator in operators:
        assert "Pausing all operators" not in operator.output  # shards do not conflict (as Kopf)
    shards = {urllib.parse.parse_qs(urllib.parse.urlparse(r["requestURI"]).query).get("shardSelector", [""])[0]
              for r in greeting_requests(audit, namespace)}
    assert shards == set(HALVES)


def test_the_sharding_examples_replicas_split_the_objects_with_its_rbac(
        crd: None, namespace: str, tmp_path: Path) -> None:
    """examples/sharding: two replicas (as the StatefulSet's pods, by their HOSTNAME) with the
    example's service account: each greeting is greeted once, by the replica of its shard."""
    manifests = yaml_documents(EXAMPLES / "sharding" / "statefulset.yaml")
    apply([m for m in manifests if m["kind"] != "StatefulSet"])  # kwok runs no containers: the operator runs here
    kubeconfig = account_kubeconfig("sharded-greeter", tmp_path)
    replicas = [OperatorProcess(["run", "-n", namespace, "--standalone", str(EXAMPLES / "sharding" / "operator.py")],
                                cwd=tmp_path, env={"KUBECONFIG": str(kubeconfig), "SHARDS": "2",
                                                   "HOSTNAME": f"sharded-greeter-{ordinal}"})
                for ordinal in (0, 1)]
    try:
        for ordinal, replica in enumerate(replicas):
            replica.wait_for(rf"Serving shard {ordinal} of 2: shardRange")
        names = [f"x{i:02}" for i in range(40)]
        kubectl("create", "-f", "-", input=greetings(namespace, names))
        found = greeted_statuses(namespace, 40)
    finally:
        codes = [replica.stop() for replica in replicas]
    assert codes == [0, 0]
    shards = collections.Counter(status["shard"] for status in found.values())
    assert set(shards) == {0, 1}, shards
    for ordinal, replica in enumerate(replicas):
        handled = re.findall(r"\[[^/]+/(x\d+)\] Handler 'greet' succeeded", replica.output)
        assert sorted(handled) == sorted(n for n, s in found.items() if s["shard"] == ordinal)
        assert not refused(replica.output), replica.output
