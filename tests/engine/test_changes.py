"""`kopf run` with change handlers against the real API: what a user sees in the cluster and the logs."""

from __future__ import annotations

import datetime
import json
import re
import signal
import time
from pathlib import Path

import pytest
from support.cluster import kubectl
from support.operators import OperatorProcess, eventually, get, write_script

EXAMPLES = Path(__file__).parents[2] / "examples"


DIFFBASE = "kopf.zalando.org/last-handled-configuration"


def greeting(name: str, namespace: str, **spec: object) -> str:
    return json.dumps({"apiVersion": "demo.kopf.dev/v1", "kind": "Greeting",
                       "metadata": {"name": name, "namespace": namespace}, "spec": spec})


def test_greeter_lifecycle(crd: None, namespace: str, tmp_path: Path) -> None:
    operator = OperatorProcess(["run", "-n", namespace, "--verbose", str(EXAMPLES / "greeter" / "operator.py")],
                               cwd=tmp_path)
    try:
        kubectl("create", "-f", "-", input=greeting("g1", namespace, who="Alice"))
        # The status and the diff base come in two requests (results first): wait for the last.
        handled = '{"spec":{"who":"Alice"}}\n'
        obj = eventually(lambda: (o := get("greeting", "g1", namespace)).get("status") and
                         o["metadata"].get("annotations", {}).get(DIFFBASE) == handled and o,
                         what="the status and the diff base")
        assert obj["status"] == {"greet": {"message": "Hello, Alice!"}}
        assert obj["metadata"]["finalizers"] == ["kopf.zalando.org/KopfFinalizerMarker"]
        annotations = obj["metadata"]["annotations"]
        assert "kopf.zalando.org/greet" not in annotations  # progress is purged when done

        kubectl("patch", "greeting", "g1", "-n", namespace, "--type=merge", "-p", '{"spec": {"who": "Bob"}}')
        operator.wait_for(r"Handler 'regreet/spec.who' succeeded")
        # (the log line comes before the writes: wait for them as for the first ones)
        handled = '{"spec":{"who":"Bob"}}\n'
        obj = eventually(lambda: (o := get("greeting", "g1", namespace))["metadata"].get("annotations", {})
                         .get(DIFFBASE) == handled and o, what="the new diff base")
        assert obj["status"]["regreet/spec.who"] == {"message": "Hello again, Bob!"}

        kubectl("delete", "greeting", "g1", "-n", namespace, "--timeout=30s")
        output = operator.wait_for(r"Deleted, really deleted, and we are notified")
    finally:
        exit_code = operator.stop(signal.SIGINT)
    prefix = f"[{namespace}/g1]"
    for line in [
        f"{prefix} Adding the finalizer, thus preventing the actual deletion.",
        f"{prefix} Creation is in progress: ",
        f"{prefix} Greeting g1: Hello, Alice!",
        f"{prefix} Handler 'greet' succeeded.",
        f"{prefix} Creation is processed: 1 succeeded; 0 failed.",
        f"{prefix} Updating diff: (('change', ('spec', 'who'), 'Alice', 'Bob'),)",
        f"{prefix} Renamed from 'Alice' to 'Bob'.",
        f"{prefix} Updating is processed: 1 succeeded; 0 failed.",
        f"{prefix} Goodbye, g1.",
        f"{prefix} Handler 'farewell' succeeded.",
        f"{prefix} Deletion is processed: 1 succeeded; 0 failed.",
        f"{prefix} Removing the finalizer, thus allowing the actual deletion.",
        "Signal SIGINT is received. Operator is stopping.",
    ]:
        assert line in output or line in operator.output, line
    assert output.count("Handler 'greet' succeeded.") == 1
    assert "Traceback" not in operator.output
    assert exit_code == 0


def test_restart_in_the_middle_of_retries(crd: None, namespace: str, tmp_path: Path) -> None:
    script = write_script(tmp_path, """
        import kopf

        @kopf.on.create('greetings')
        def flaky(retry, **_):
            if retry == 0:
                raise kopf.TemporaryError("not ready yet", delay=4)
            return {'retried': retry}
    """)
    first = OperatorProcess(["run", "-n", namespace, "--verbose", str(script)], cwd=tmp_path)
    try:
        kubectl("create", "-f", "-", input=greeting("g2", namespace))
        first.wait_for(r"Handler 'flaky' failed temporarily: not ready yet")
        record = eventually(lambda: get("greeting", "g2", namespace)["metadata"].get("annotations", {})
                            .get("kopf.zalando.org/flaky"), what="the progress record")
    finally:
        assert first.stop(signal.SIGTERM) == 0
    progress = json.loads(record)
    assert progress["retries"] == 1 and progress["purpose"] == "create"
    assert progress["success"] is False and progress["failure"] is False
    assert progress["message"] == "not ready yet" and "delayed" in progress
    assert "status" not in get("greeting", "g2", namespace)

    second = OperatorProcess(["run", "-n", namespace, "--verbose", str(script)], cwd=tmp_path)
    try:
        second.wait_for(r"Handler 'flaky' succeeded")
        # The progress is purged in the request after the results': wait for both.
        obj = eventually(lambda: (o := get("greeting", "g2", namespace)).get("status") and
                         "kopf.zalando.org/flaky" not in o["metadata"].get("annotations", {}) and o,
                         what="the status, and the progress purged")
    finally:
        assert second.stop() == 0
    assert obj["status"] == {"flaky": {"retried": 1}}
    assert second.output.count("Handler 'flaky' is invoked") == 1
    assert "failed temporarily" not in second.output


def test_handlers_do_not_repeat_and_resume_after_restart(crd: None, namespace: str, tmp_path: Path) -> None:
    script = write_script(tmp_path, """
        import kopf

        @kopf.on.create('greetings')
        def created(name, logger, **_):
            logger.info(f"created {name}")

        @kopf.on.resume('greetings')
        def resumed(name, logger, **_):
            logger.info(f"resumed {name}")
    """)
    first = OperatorProcess(["run", "-n", namespace, str(script)], cwd=tmp_path)
    try:
        kubectl("create", "-f", "-", input=greeting("g3", namespace))
        first.wait_for(r"Creation is processed")
    finally:
        first.stop()
    second = OperatorProcess(["run", "-n", namespace, str(script)], cwd=tmp_path)
    try:
        second.wait_for(r"Handler 'resumed' succeeded")
    finally:
        second.stop()
    assert "created g3" in first.output and "resumed g3" not in first.output
    assert "resumed g3" in second.output and "created g3" not in second.output


def test_errors_of_handlers(crd: None, namespace: str, tmp_path: Path) -> None:
    script = write_script(tmp_path, """
        import kopf

        @kopf.on.create('greetings', id='permanent')
        def permanent(**_):
            raise kopf.PermanentError("this is fatal")

        @kopf.on.create('greetings', id='ignored', errors=kopf.ErrorsMode.IGNORED)
        def ignored(**_):
            raise ValueError("this is ignored")

        @kopf.on.create('greetings', id='limited', retries=2, backoff=0.5)
        def limited(**_):
            raise ValueError("this is retried")

        @kopf.on.create('greetings', id='fine')
        def fine(**_):
            return 42
    """)
    operator = OperatorProcess(["run", "-n", namespace, str(script)], cwd=tmp_path)
    try:
        kubectl("create", "-f", "-", input=greeting("g4", namespace))
        operator.wait_for(r"Creation is processed: 2 succeeded; 2 failed\.", timeout=60)
        # (the progress is purged in the request after the results')
        obj = eventually(lambda: (o := get("greeting", "g4", namespace)).get("status", {}).get("fine") and
                         DIFFBASE in o["metadata"].get("annotations", {}) and o,
                         what="the result of the fine handler, and the diff base")
    finally:
        operator.stop()
    output = operator.output
    assert "Handler 'permanent' failed permanently: this is fatal" in output
    assert "Handler 'ignored' failed with an exception and will ignore it: this is ignored" in output
    assert "Handler 'limited' failed with an exception and will try again in 0.5 seconds: this is retried" \
        in output
    assert ("Handler 'limited' failed with an exception and will stop now "
            "(it would exceed 2 retries on the next attempt): this is retried") in output
    assert output.count("Handler 'permanent' is invoked") <= 1
    assert obj["status"] == {"fine": 42}
    assert not any(k.startswith("kopf.zalando.org/") and k != "kopf.zalando.org/last-handled-configuration"
                   for k in obj["metadata"]["annotations"])


def test_filters(crd: None, namespace: str, tmp_path: Path) -> None:
    script = write_script(tmp_path, """
        import kopf

        @kopf.on.create('greetings', labels={'app': 'x', 'skip': kopf.ABSENT}, id='by_labels')
        def by_labels(name, logger, **_):
            logger.info(f"labels matched {name}")

        @kopf.on.create('greetings', annotations={'note': kopf.PRESENT}, id='by_annotations')
        def by_annotations(name, logger, **_):
            logger.info(f"annotations matched {name}")

        @kopf.on.create('greetings', labels={'app': lambda value, **_: value == 'y'}, id='by_callback')
        def by_callback(name, logger, **_):
            logger.info(f"callback matched {name}")

        @kopf.on.create('greetings', when=lambda spec, **_: spec.get('size', 0) > 2, id='by_when')
        def by_when(name, logger, **_):
            logger.info(f"when matched {name}")

        @kopf.on.create('greetings', field='spec.who', value='Carol', id='by_value')
        def by_value(name, logger, **_):
            logger.info(f"value matched {name}")
    """)
    objects = {
        "f-labels": ({"labels": {"app": "x"}}, {}),
        "f-skipped": ({"labels": {"app": "x", "skip": "1"}}, {}),
        "f-annotated": ({"annotations": {"note": ""}}, {}),
        "f-callback": ({"labels": {"app": "y"}}, {"size": 3}),
        "f-valued": ({}, {"who": "Carol"}),
    }
    operator = OperatorProcess(["run", "-n", namespace, str(script)], cwd=tmp_path)
    try:
        for name, (metadata, spec) in objects.items():
            kubectl("create", "-f", "-", input=json.dumps({
                "apiVersion": "demo.kopf.dev/v1", "kind": "Greeting",
                "metadata": {"name": name, "namespace": namespace, **metadata}, "spec": spec,
            }))
        operator.wait_for(r"Creation is processed", count=4)
        operator.wait_for(r"f-callback\] Creation is processed: 2 succeeded")
    finally:
        operator.stop()
    matched = set(re.findall(r"\] (\w+ matched [\w-]+)$", operator.output, re.MULTILINE))
    assert matched == {"labels matched f-labels", "annotations matched f-annotated", "callback matched f-callback",
                       "when matched f-callback", "value matched f-valued"}


def test_event_handlers_and_kubernetes_events(crd: None, namespace: str, tmp_path: Path) -> None:
    script = write_script(tmp_path, """
        import kopf

        @kopf.on.event('greetings')
        def watch(type, name, logger, **_):
            logger.info(f"event {type} {name}")

        @kopf.on.event('greetings')
        def attempt(name, retry, started, runtime, logger, **_):  # as Kopf passes them
            at = started.isoformat()
            logger.info(f"attempt {name}: {retry} {started.tzinfo} {runtime.total_seconds() < 5} at {at}")

        @kopf.on.create('greetings')
        def notify(body, **_):
            kopf.info(body, reason='Greeted', message='A greeting was made.')
            kopf.warn(body, reason='Long', message='x' * 2000)
            lost = {'apiVersion': 'v1', 'kind': 'ConfigMap', 'metadata': {'name': 'x', 'namespace': 'nowhere'}}
            kopf.info(lost, reason='Lost', message='This cannot be posted.')
    """)
    kubectl("create", "-f", "-", input=greeting("g-before", namespace))
    operator = OperatorProcess(["run", "-n", namespace, str(script)], cwd=tmp_path)
    try:
        operator.wait_for(r"event None g-before")
        kubectl("create", "-f", "-", input=greeting("g-after", namespace))
        operator.wait_for(r"event ADDED g-after")
        operator.wait_for(r"attempt g-after: 0 None True")
        operator.wait_for(r"event MODIFIED g-after")
        operator.wait_for(r"attempt g-after: .* at .*\n(.*\n)*.*attempt g-after: .* at ")
        kubectl("delete", "greeting", "g-after", "-n", namespace, "--timeout=30s")
        operator.wait_for(r"event DELETED g-after")

        def events() -> list[dict]:
            items = json.loads(kubectl("get", "events", "-n", namespace, "-o", "json"))["items"]
            return [e for e in items if e["involvedObject"].get("name") == "g-before"
                    and e["reason"] in ("Greeted", "Long")]
        found = eventually(lambda: len(events()) == 2 and events(), what="two Events")
        operator.wait_for(r"Failed to post an event\. Ignoring and continuing\. Code: 404\..*reason='Lost'")
    finally:
        operator.stop()
    assert "Handler 'notify' succeeded." in operator.output  # a failed post is not fatal
    # Each event's call starts now (naive UTC), not when an earlier one did.
    starts = re.findall(r"attempt g-after: 0 None True at (\S+)", operator.output)
    assert len(starts) >= 2 and len(set(starts)) == len(starts)
    first = datetime.datetime.fromisoformat(starts[0])
    assert abs(first - datetime.datetime.now(datetime.UTC).replace(tzinfo=None)) < datetime.timedelta(minutes=5)
    by_reason = {e["reason"]: e for e in found}
    assert by_reason["Greeted"]["type"] == "Normal"
    assert by_reason["Greeted"]["message"] == "A greeting was made."
    assert by_reason["Greeted"]["source"]["component"] == "kopf"
    assert by_reason["Long"]["type"] == "Warning"
    assert len(by_reason["Long"]["message"]) == 1024 and "..." in by_reason["Long"]["message"]


def test_builtin_pods(cluster: dict[str, str], namespace: str, tmp_path: Path) -> None:
    script = write_script(tmp_path, """
        import kopf

        @kopf.on.create('pods', labels={'handled-by': 'kopf'})
        def mark(patch, name, **_):
            patch.metadata.annotations['seen-by'] = 'kopf-rs'
            return {'marked': name}  # pods have a status subresource: this goes there

        @kopf.on.delete('v1', 'pods', labels={'handled-by': 'kopf'}, optional=True)
        def gone(name, logger, **_):
            logger.info(f"pod {name} is going")
    """)
    operator = OperatorProcess(["run", "-n", namespace, str(script)], cwd=tmp_path)
    try:
        for name, labels in (("p1", {"handled-by": "kopf"}), ("p2", {})):
            kubectl("create", "-f", "-", input=json.dumps({
                "apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": namespace,
                                                               "labels": labels},
                "spec": {"containers": [{"name": "c", "image": "busybox"}]},
            }))
        pod = eventually(lambda: (p := get("pod", "p1", namespace))["metadata"].get("annotations", {})
                         .get("seen-by") and p, what="the pod's annotation")
        assert "finalizers" not in pod["metadata"]  # the delete handler is optional
        assert "kopf.zalando.org/last-handled-configuration" in pod["metadata"]["annotations"]
        other = get("pod", "p2", namespace)
        assert "seen-by" not in other["metadata"].get("annotations", {})
        kubectl("delete", "pod", "p1", "-n", namespace, "--timeout=30s")
    finally:
        operator.stop()
    assert f"[{namespace}/p1] Handler 'mark' succeeded." in operator.output
    assert "p2" not in operator.output


def test_broken_script(tmp_path: Path, cluster: dict[str, str]) -> None:
    script = write_script(tmp_path, "import kopf\n\n@kopf.on.create('greetings')\ndef broken(:\n    pass\n")
    operator = OperatorProcess(["run", "-A", str(script)], cwd=tmp_path)
    exit_code = operator.process.wait(timeout=30)
    operator.stop()
    assert exit_code != 0
    assert "SyntaxError" in operator.output
    assert str(script) in operator.output


def test_missing_script(tmp_path: Path) -> None:
    operator = OperatorProcess(["run", "-A", "nonexistent.py"], cwd=tmp_path)
    assert operator.process.wait(timeout=30) == 2
    operator.stop()
    assert "nonexistent.py" in operator.output


def test_unreachable_api_server(tmp_path: Path) -> None:
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(json.dumps({
        "apiVersion": "v1", "kind": "Config", "current-context": "nowhere",
        "clusters": [{"name": "nowhere",
                      "cluster": {"server": "https://127.0.0.1:9", "insecure-skip-tls-verify": True}}],
        "users": [{"name": "nobody", "user": {"token": "s3cr3t-t0ken"}}],
        "contexts": [{"name": "nowhere", "context": {"cluster": "nowhere", "user": "nobody"}}],
    }))
    script = write_script(tmp_path, """
        import kopf

        @kopf.on.startup()
        def quick(settings, **_):
            settings.networking.error_backoffs = [0.1, 0.2]

        @kopf.on.create('greetings')
        def never(**_):
            pass
    """)
    operator = OperatorProcess(["run", "-A", str(script)], cwd=tmp_path, env={"KUBECONFIG": str(kubeconfig)})
    exit_code = operator.process.wait(timeout=60)
    operator.stop()
    assert exit_code == 1
    assert "Request attempt #1/3 failed; will retry" in operator.output
    assert "Request attempt #3/3 failed; escalating" in operator.output
    assert "127.0.0.1:9" in operator.output
    assert "s3cr3t-t0ken" not in operator.output  # credentials are never logged


@pytest.mark.parametrize("log_format", ["plain", "json"])
def test_log_formats(crd: None, namespace: str, tmp_path: Path, log_format: str) -> None:
    script = write_script(tmp_path, """
        import kopf

        @kopf.on.create('greetings')
        def hello(logger, **_):
            logger.info("hello from the handler")
    """)
    operator = OperatorProcess(["run", "-n", namespace, f"--log-format={log_format}", str(script)], cwd=tmp_path)
    try:
        kubectl("create", "-f", "-", input=greeting("g5", namespace))
        operator.wait_for(r"hello from the handler")
    finally:
        operator.stop()
    line = next(line for line in operator.output.splitlines() if "hello from the handler" in line)
    if log_format == "plain":
        assert line == f"[{namespace}/g5] hello from the handler"
    else:
        record = json.loads(line)
        assert record["message"] == "hello from the handler"
        assert record["severity"] == "info"
        assert record["object"]["name"] == "g5" and record["object"]["namespace"] == namespace


def test_namespace_globs_and_negations(crd: None, tmp_path: Path) -> None:
    suffix = str(time.monotonic_ns())[-6:]
    wanted, skipped, other = f"glob-{suffix}-a", f"glob-{suffix}-skip", f"other-{suffix}"
    for ns in (wanted, skipped, other):
        kubectl("create", "namespace", ns)
    script = write_script(tmp_path, """
        import kopf

        @kopf.on.create('greetings')
        def seen(namespace, name, logger, **_):
            logger.info(f"seen in {namespace}")
    """)
    operator = OperatorProcess(["run", "-n", f"glob-{suffix}-*,!*-skip", str(script)], cwd=tmp_path)
    try:
        for ns in (wanted, skipped, other):
            kubectl("create", "-f", "-", input=greeting("g", ns))
        operator.wait_for(rf"seen in {wanted}")
        time.sleep(2)  # the others would have been handled by now
    finally:
        operator.stop()
        for ns in (wanted, skipped, other):
            kubectl("delete", "namespace", ns, "--wait=false", check=False)
    assert f"seen in {skipped}" not in operator.output
    assert f"seen in {other}" not in operator.output


def test_resources_whose_crd_appears_later(cluster: dict[str, str], namespace: str, tmp_path: Path) -> None:
    group = f"late{str(time.monotonic_ns())[-6:]}.kopf.dev"
    crd = {
        "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {"name": f"latecomers.{group}"},
        "spec": {"group": group, "scope": "Namespaced",
                 "names": {"plural": "latecomers", "singular": "latecomer", "kind": "Latecomer"},
                 "versions": [{"name": "v1", "served": True, "storage": True, "schema": {"openAPIV3Schema": {
                     "type": "object", "x-kubernetes-preserve-unknown-fields": True}}}]},
    }
    script = write_script(tmp_path, f"""
        import kopf

        @kopf.on.create('{group}', 'latecomers')
        def welcome(name, logger, **_):
            logger.info(f"welcome {{name}}")
    """)
    operator = OperatorProcess(["run", "-n", namespace, str(script)], cwd=tmp_path)
    try:
        operator.wait_for("Unresolved resources cannot be served")
        kubectl("apply", "-f", "-", input=json.dumps(crd))
        kubectl("wait", "--for=condition=Established", f"crd/latecomers.{group}", "--timeout=30s")
        kubectl("create", "-f", "-", input=json.dumps({
            "apiVersion": f"{group}/v1", "kind": "Latecomer", "metadata": {"name": "late", "namespace": namespace}}))
        operator.wait_for("welcome late")
    finally:
        operator.stop()
        kubectl("delete", "crd", f"latecomers.{group}", "--wait=false", check=False)


def test_a_name_of_two_resources_serves_neither(cluster: dict[str, str], namespace: str, tmp_path: Path) -> None:
    """As Kopf: `'twins'` is the plural of two groups' resources, so its handler serves neither, with
    Kopf's warning. Kopf 1.45.2 also stops serving them for the handlers that name the group (its
    bug: the exact handler goes silent for another's vagueness); here those still serve them."""
    suffix = str(time.monotonic_ns())[-6:]
    groups = [f"a{suffix}.kopf.dev", f"b{suffix}.kopf.dev"]
    for group in groups:
        kubectl("apply", "-f", "-", input=json.dumps({
            "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
            "metadata": {"name": f"twins.{group}"},
            "spec": {"group": group, "scope": "Namespaced",
                     "names": {"plural": "twins", "singular": "twin", "kind": "Twin"},
                     "versions": [{"name": "v1", "served": True, "storage": True, "schema": {"openAPIV3Schema": {
                         "type": "object", "x-kubernetes-preserve-unknown-fields": True}}}]}}))
        kubectl("wait", "--for=condition=Established", f"crd/twins.{group}", "--timeout=30s")
    script = write_script(tmp_path, f"""
        import kopf

        @kopf.on.create('twins')
        def vague(name, logger, **_):
            logger.info(f"vague {{name}}")

        @kopf.on.create('{groups[0]}', 'twins')
        def exact(name, logger, **_):
            logger.info(f"exact {{name}}")
    """)
    operator = OperatorProcess(["run", "-n", namespace, str(script)], cwd=tmp_path)
    try:
        operator.wait_for(r"Ambiguous resources will not be served \(try specifying API groups\): "
                          r"Selector\(any_name='twins'\) => twins\.v1\.a")
        kubectl("create", "-f", "-", input=json.dumps({
            "apiVersion": f"{groups[1]}/v1", "kind": "Twin", "metadata": {"name": "second", "namespace": namespace}}))
        kubectl("create", "-f", "-", input=json.dumps({
            "apiVersion": f"{groups[0]}/v1", "kind": "Twin", "metadata": {"name": "first", "namespace": namespace}}))
        operator.wait_for("exact first")
        operator.wait_for("Handler 'exact' succeeded")
    finally:
        operator.stop()
        for group in groups:
            kubectl("delete", "crd", f"twins.{group}", "--wait=false", check=False)
    assert "vague first" not in operator.output and "vague second" not in operator.output
    assert "exact second" not in operator.output


def test_cluster_scoped_resources(cluster: dict[str, str], tmp_path: Path) -> None:
    name = f"scoped-{str(time.monotonic_ns())[-6:]}"
    script = write_script(tmp_path, """
        import kopf

        @kopf.on.create('namespaces', labels={'kopf-rs-test': 'scoped'})
        def mark(patch, name, logger, **_):
            patch.metadata.annotations['noticed'] = 'yes'
            logger.info(f"namespace {name} noticed")
    """)
    operator = OperatorProcess(["run", "-A", str(script)], cwd=tmp_path)
    try:
        kubectl("create", "-f", "-", input=json.dumps({
            "apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name, "labels": {"kopf-rs-test": "scoped"}}}))
        annotations = eventually(lambda: json.loads(kubectl("get", "namespace", name, "-o", "json"))["metadata"]
                                 .get("annotations", {}).get("noticed"), what="the namespace's annotation")
    finally:
        operator.stop()
        kubectl("delete", "namespace", name, "--wait=false", check=False)
    assert annotations == "yes"
    assert f"[{name}] namespace {name} noticed" in operator.output  # no namespace in the prefix


def test_objects_are_handled_concurrently(crd: None, namespace: str, tmp_path: Path) -> None:
    script = write_script(tmp_path, """
        import asyncio
        import kopf

        @kopf.on.create('greetings')
        async def slow(name, logger, **_):
            logger.info(f"start {name}")
            await asyncio.sleep(2)
            logger.info(f"end {name}")
    """)
    operator = OperatorProcess(["run", "-n", namespace, str(script)], cwd=tmp_path)
    try:
        for name in ("c1", "c2"):
            kubectl("create", "-f", "-", input=greeting(name, namespace))
        output = operator.wait_for(r"end c\d", count=2)
    finally:
        operator.stop()
    order = re.findall(r"\] (start|end) (c\d)$", output, re.MULTILINE)
    assert [event for event, _ in order] == ["start", "start", "end", "end"], order


SPEC = {"who": "Alice", "n": 3, "ratio": 0.5, "list": [{"x": None}, True, False, -7, [1.5, "ü"]],
        "big": 9_007_199_254_740_993, "small": -9_223_372_036_854_775_808, "empty": {}, "none": [],
        # Keys that are escaped in the text, not ASCII, or longer than the names the core keeps.
        'quo"ted\\': {"ключ": "значение"}, "k" * 70: 1}


def test_a_handlers_body_reads_as_a_mapping_of_plain_values(crd: None, namespace: str, tmp_path: Path) -> None:
    """The core hands bodies over unconverted and converts a field when it is first read: to
    a handler, `body` is still a mapping of plain dicts in the API's order, that compares,
    copies and pickles as Kopf's does."""
    script = write_script(tmp_path, """
        import copy, json, pickle
        import kopf

        def describe(body):
            return json.dumps({
                "keys": list(body), "len": len(body),
                "in": ["spec" in body, "nothing" in body, 5 in body],
                "same": body["spec"] is body["spec"], "type": type(body["spec"]).__name__,
                "copies": copy.deepcopy(body) == body and pickle.loads(pickle.dumps(body)) == dict(body),
                "spec": dict(body)["spec"], "default": body.get("nothing", "none"),
                "labels": dict(body.meta.labels), "name": body.metadata.name,
                "spec_text": json.dumps(dict(body)["spec"]),  # ints stay ints, floats floats
            }, sort_keys=True)

        @kopf.on.create('greetings')
        def created(body, logger, **_):
            logger.info(f"created sees {describe(body)}")

        @kopf.on.event('greetings')
        def event(body, logger, **_):
            logger.info(f"event sees {describe(body)}")

        @kopf.timer('greetings', interval=0.3)
        async def ticked(body, logger, **_):
            logger.info(f"ticked sees {describe(body)}")
    """)
    operator = OperatorProcess(["run", "-n", namespace, "--verbose", str(script)], cwd=tmp_path)
    try:
        kubectl("create", "-f", "-", input=json.dumps({
            "apiVersion": "demo.kopf.dev/v1", "kind": "Greeting",
            "metadata": {"name": "b1", "namespace": namespace, "labels": {"z": "1", "a": "2"}},
            "spec": SPEC}))
        operator.wait_for(r"created sees")
        operator.wait_for(r"event sees")
        output = operator.wait_for(r"ticked sees")
    finally:
        exit_code = operator.stop()
    lines = re.findall(r"\] (created|ticked|event) sees (.*)$", output, re.MULTILINE)
    seen = {kind: json.loads(text) for kind, text in lines}
    for kind in ("created", "ticked", "event"):
        assert seen[kind]["keys"][:4] == ["apiVersion", "kind", "metadata", "spec"], kind
        assert seen[kind]["len"] == len(seen[kind]["keys"])
        assert seen[kind]["in"] == [True, False, False]
        assert seen[kind]["same"] is True and seen[kind]["type"] == "dict" and seen[kind]["copies"] is True
        assert seen[kind]["spec"] == SPEC
        assert seen[kind]["spec_text"] == json.dumps(SPEC, sort_keys=True), kind  # in the API's order
        assert seen[kind]["default"] == "none"
        assert seen[kind]["labels"] == {"z": "1", "a": "2"} and seen[kind]["name"] == "b1"
    assert "Traceback" not in operator.output
    assert exit_code == 0


def test_sync_handlers_threads(crd: None, namespace: str, tmp_path: Path) -> None:
    """Sync handlers run in threads, at most `max_workers` at once and no more threads than
    that (as Kopf's executor), with the context the operator had; a custom executor set by
    the operator is the one that runs them."""
    script = write_script(tmp_path, """
        import concurrent.futures
        import contextvars
        import os
        import threading
        import time
        import kopf

        GREETING = contextvars.ContextVar('greeting', default='unset')
        GREETING.set('hello')
        running = []
        lock = threading.Lock()

        @kopf.on.startup()
        def setup(settings, **_):
            if os.environ.get('CUSTOM_EXECUTOR'):
                settings.execution.executor = concurrent.futures.ThreadPoolExecutor(
                    max_workers=1, thread_name_prefix='custom-pool')
            else:
                settings.execution.max_workers = 2

        @kopf.on.create('greetings')
        def slow(name, logger, **_):
            with lock:
                running.append(name)
                logger.info(f"start {name} with {len(running)} running, {GREETING.get()}, "
                            f"in {threading.current_thread().name}")
            time.sleep(1)
            with lock:
                running.remove(name)
    """)
    for custom in (False, True):
        env = {"CUSTOM_EXECUTOR": "1"} if custom else {}
        operator = OperatorProcess(["run", "-n", namespace, str(script)], cwd=tmp_path, env=env)
        names = [f"t{int(custom)}{i}" for i in range(4)]
        try:
            for name in names:
                kubectl("create", "-f", "-", input=greeting(name, namespace))
            output = operator.wait_for(r"Handler 'slow' succeeded", count=4, timeout=60)
        finally:
            operator.stop()
        starts = re.findall(r"start (t\d+) with (\d) running, (\w+), in (\S+)$", output, re.MULTILINE)
        assert sorted(name for name, *_ in starts) == names
        assert {greeting for _, _, greeting, _ in starts} == {"hello"}
        concurrency = max(int(count) for _, count, _, _ in starts)
        if custom:
            assert concurrency == 1, starts
            assert all(thread.startswith("custom-pool") for *_, thread in starts), starts
        else:
            assert concurrency == 2, starts
            assert len({thread for *_, thread in starts}) <= 2, starts


def test_handler_timeouts(crd: None, namespace: str, tmp_path: Path) -> None:
    script = write_script(tmp_path, """
        import kopf

        @kopf.on.create('greetings', timeout=1.5)
        def never_ready(**_):
            raise kopf.TemporaryError("still waiting", delay=0.5)
    """)
    operator = OperatorProcess(["run", "-n", namespace, str(script)], cwd=tmp_path, env={"KOPF_RUN_VERBOSE": "1"})
    try:
        kubectl("create", "-f", "-", input=greeting("t1", namespace))
        operator.wait_for(r"Creation is processed: 0 succeeded; 1 failed\.")
    finally:
        operator.stop()
    assert "Handler 'never_ready' failed temporarily: still waiting" in operator.output
    assert "Handler 'never_ready' failed temporarily but will time out after 1.5 seconds: still waiting" \
        in operator.output
    assert "Handler 'never_ready' is invoked." in operator.output  # KOPF_RUN_VERBOSE=1 is --verbose


def test_callable_resource_selectors(crd: None, namespace: str, tmp_path: Path) -> None:
    script = write_script(tmp_path, """
        import kopf

        @kopf.on.event(lambda resource: resource.plural == 'greetings' and resource.group == 'demo.kopf.dev')
        def any_greeting(name, resource, logger, **_):
            logger.info(f"selected {resource.plural} {name}")  # listed or added: the start races
    """)
    operator = OperatorProcess(["run", "-n", namespace, str(script)], cwd=tmp_path)
    try:
        kubectl("create", "-f", "-", input=greeting("sel", namespace))
        operator.wait_for(r"selected greetings sel")
    finally:
        operator.stop()
    assert "Unresolved resources" not in operator.output
