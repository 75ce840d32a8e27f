"""`@kopf.on.log`: the lines of pods' containers' logs (pods on kwok's simulated nodes, their logs
files that the tests write), matched in the core and handled in Python: in order, with their
groups, per container; across broken streams, restarts and ends of containers, filter changes,
deletions and failing handlers. Kopf has no log handlers: nothing to compare with side by side."""

from __future__ import annotations

import datetime
import json
import re
import subprocess
import sys
import time
from pathlib import Path

from support.cluster import EXAMPLES, apply, kopf_cli, kubectl
from support.kwok import exit_with, log_files, pod, restart, write_lines
from support.operators import OperatorProcess, account_kubeconfig, eventually, refused, write_script

OPERATOR = """
import kopf

@kopf.on.startup()
def configure(settings, **_):
    # Streams silent for longer are opened again (a real break: it must lose and repeat nothing).
    settings.networking.request_timeout = 2

@kopf.on.log(labels={'app': 'talker'}, regex=r'^step (\\d+): (\\w+)$', container='main')
def steps(match, container, timestamp, name, logger, **_):
    logger.info(f"STEP {name} {container} {match.group(1)} {match.group(2)} {timestamp.isoformat()}")

@kopf.on.log(labels={'app': 'talker'}, container=['main', 'side'])
async def lines(log, match, container, name, logger, **_):
    logger.info(f"LINE {name} {container} {log!r} {match!r}")

@kopf.on.log(labels={'app': 'talker'}, regex='boom')
def exploding(log, **_):
    raise ValueError(f"cannot take {log!r}")

def verbose(annotations, **_):
    return annotations.get('verbose') == 'yes'

@kopf.on.log(labels={'app': 'talker'}, when=verbose, regex='^debug')
def debugging(log, name, logger, **_):
    logger.info(f"DEBUGGING {name} {log}")

@kopf.on.log(labels={'app': 'talker'}, regex='^flaky', errors=kopf.ErrorsMode.TEMPORARY, backoff=0.3)
def flaky(log, retry, name, logger, **_):
    if retry < 2:
        raise kopf.TemporaryError(f"not yet: {log}", delay=0.3)
    logger.info(f"FLAKY {name} {log} after {retry} retries")
"""


def start(tmp_path: Path, namespace: str, *peering: str) -> OperatorProcess:
    script = write_script(tmp_path, OPERATOR)
    options = list(peering) or ["--standalone"]
    operator = OperatorProcess(["run", "-n", namespace, *options, "--verbose", str(script)], cwd=tmp_path)
    operator.wait_for("Initial authentication has finished")
    return operator


def talker(name: str, namespace: str, tmp_path: Path, containers: tuple[str, ...] = ("main",)) -> dict[str, Path]:
    """A pod labelled for the handlers, its containers' log files, once it runs."""
    files = {container: tmp_path / f"{name}-{container}.log" for container in containers}
    log_files(name, namespace, files)
    apply(pod(name, namespace, containers=containers, labels={"app": "talker"}))
    return files


def handled(output: str, prefix: str, name: str) -> list[str]:
    return re.findall(rf"\] {prefix} {name} (.*)$", output, flags=re.MULTILINE)


def test_lines_are_matched_and_handled_in_order_with_groups_per_container(
        namespace: str, tmp_path: Path) -> None:
    operator = start(tmp_path, namespace)
    try:
        files = talker("p1", namespace, tmp_path, containers=("main", "side", "other"))
        at = datetime.datetime(2026, 1, 2, 3, 4, 5, 678901, tzinfo=datetime.UTC)
        write_lines(files["main"], "step 1: warmup", at=at)
        write_lines(files["main"], "noise", "step 2: training")
        write_lines(files["side"], "step 3: sidecar", "hello")
        write_lines(files["other"], "step 4: unfollowed")
        output = operator.wait_for(r"LINE p1 main 'step 2: training'", timeout=40)
        output = operator.wait_for(r"LINE p1 side 'hello'")
        output = operator.wait_for(r"STEP p1 main 2 training")
    finally:
        code = operator.stop()
    assert code == 0  # its streams are let go at the exit, in no time
    # The line's time as written (to the microsecond), aware, in UTC.
    first, second = handled(output, "STEP", "p1")
    assert first == "main 1 warmup 2026-01-02T03:04:05.678901+00:00"
    assert re.fullmatch(r"main 2 training 20\d\d-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}\+00:00", second), second
    main = [line for line in handled(output, "LINE", "p1") if line.startswith("main ")]
    side = [line for line in handled(output, "LINE", "p1") if line.startswith("side ")]
    assert main == ["main 'step 1: warmup' None", "main 'noise' None", "main 'step 2: training' None"]
    assert side == ["side 'step 3: sidecar' None", "side 'hello' None"]
    assert "unfollowed" not in output  # a container no handler follows is not read at all
    assert "Traceback" not in output


def test_a_broken_stream_resumes_without_losses_or_repeats(namespace: str, tmp_path: Path) -> None:
    operator = start(tmp_path, namespace)
    try:
        files = talker("p2", namespace, tmp_path)
        # Lines of the same time, then silence (the stream breaks after 2 s), then more of
        # that very time (the new stream repeats the whole second: the count tells them apart).
        at = datetime.datetime.now(datetime.UTC).replace(microsecond=500000)
        write_lines(files["main"], "step 1: a", "step 2: b", at=at)
        operator.wait_for(r"STEP p2 main 2 b", timeout=40)
        time.sleep(4)
        write_lines(files["main"], "step 3: c", "step 4: d", at=at)
        write_lines(files["main"], "step 5: e")
        output = operator.wait_for(r"STEP p2 main 5 e")
    finally:
        operator.stop()
    steps = [line.split()[1] for line in handled(output, "STEP", "p2")]
    assert steps == ["1", "2", "3", "4", "5"]


def test_an_ended_container_is_read_to_its_end_and_a_restarted_one_followed_on(
        namespace: str, tmp_path: Path) -> None:
    operator = start(tmp_path, namespace)
    try:
        files = talker("p3", namespace, tmp_path)
        write_lines(files["main"], "step 1: before")
        operator.wait_for(r"STEP p3 main 1 before", timeout=40)
        restart("p3", namespace, 1)
        eventually(lambda: "restartCount\":1" in kubectl("get", "pod", "p3", "-n", namespace, "-o", "json")
                   .replace(" ", ""), what="the restart")
        write_lines(files["main"], "step 2: restarted")
        operator.wait_for(r"STEP p3 main 2 restarted")
        write_lines(files["main"], "step 3: final")
        exit_with("p3", namespace, 1)
        output = operator.wait_for(r"STEP p3 main 3 final")
        time.sleep(2)  # the ended container's stream is let go
        output = operator.output
    finally:
        operator.stop()
    steps = [line.split()[1] for line in handled(output, "STEP", "p3")]
    assert steps == ["1", "2", "3"]


def test_filters_deletion_and_failing_handlers(namespace: str, tmp_path: Path) -> None:
    operator = start(tmp_path, namespace)
    try:
        files = talker("p4", namespace, tmp_path)
        other = talker("p5", namespace, tmp_path)
        write_lines(files["main"], "boom", "flaky one", "step 1: after")
        operator.wait_for(r"STEP p4 main 1 after", timeout=40)
        # Not matching for a while: what it logs meanwhile is not for the handlers.
        kubectl("label", "pod", "p4", "-n", namespace, "app-")
        time.sleep(1)
        write_lines(files["main"], "step 2: unlabelled")
        time.sleep(3)
        assert "STEP p4 main 2" not in operator.output
        kubectl("label", "pod", "p4", "-n", namespace, "app=talker")
        time.sleep(2)
        write_lines(files["main"], "step 3: relabelled")
        operator.wait_for(r"STEP p4 main 3 relabelled")
        # A `when=` callback: asked for the pod's states, not for each line.
        write_lines(files["main"], "debug one")
        time.sleep(1)
        kubectl("annotate", "pod", "p4", "-n", namespace, "verbose=yes")
        time.sleep(2)
        write_lines(files["main"], "debug two", "step 4: annotated")
        operator.wait_for(r"STEP p4 main 4 annotated")
        # Deleted while logging: the operator goes on with the other pods.
        write_lines(files["main"], "step 5: deleted")
        kubectl("delete", "pod", "p4", "-n", namespace, "--wait=false")
        write_lines(other["main"], "step 1: served")
        output = operator.wait_for(r"STEP p5 main 1 served")
    finally:
        operator.stop()
    # A failing handler (errors=IGNORED by default) is logged, and the line is let go.
    assert "Log handler 'exploding' failed with an exception and will ignore it: cannot take 'boom'" in output
    assert "ValueError: cannot take 'boom'" in output
    # A temporary error: the line is retried (before the pod's next lines), then handled.
    assert "FLAKY p4 flaky one after 2 retries" in output
    assert output.index("FLAKY p4") < output.index("STEP p4 main 1 after")
    assert [line.split()[1] for line in handled(output, "STEP", "p4")][:3] == ["1", "3", "4"]
    assert handled(output, "DEBUGGING", "p4") == ["debug two"]


def test_a_paused_operator_handles_the_lines_after_the_pause_once(
        peering: str, namespace: str, tmp_path: Path) -> None:
    operator = start(tmp_path, namespace, "--peering", peering)
    try:
        files = talker("p6", namespace, tmp_path)
        write_lines(files["main"], "step 1: before")
        operator.wait_for(r"STEP p6 main 1 before", timeout=40)
        frozen = kopf_cli("freeze", "-n", namespace, "--peering", peering, "--lifetime", "600", "--id", "ops")
        assert frozen.returncode == 0, frozen.stderr
        operator.wait_for(r"Pausing operations in favour of")
        write_lines(files["main"], "step 2: paused", "step 3: paused")
        time.sleep(3)
        assert "STEP p6 main 2" not in operator.output
        resumed = kopf_cli("resume", "-n", namespace, "--peering", peering, "--id", "ops")
        assert resumed.returncode == 0, resumed.stderr
        output = operator.wait_for(r"STEP p6 main 3 paused")
    finally:
        operator.stop()
    assert [line.split()[1] for line in handled(output, "STEP", "p6")] == ["1", "2", "3"]


def test_the_example_puts_what_the_logs_say_into_the_jobs_status(namespace: str, tmp_path: Path) -> None:
    kubectl("apply", "-f", str(EXAMPLES / "logs" / "crd.yaml"))
    kubectl("wait", "--for=condition=Established", "crd/trainingjobs.demo.kopf.dev", "--timeout=30s")
    kubectl("apply", "-n", namespace, "-f", str(EXAMPLES / "logs" / "trainingjob.yaml"))
    path = tmp_path / "trainer.log"
    log_files("mnist-trainer", namespace, {"trainer": path})
    kubectl("apply", "-n", namespace, "-f", str(EXAMPLES / "logs" / "pod.yaml"))
    operator = OperatorProcess(["run", "-n", namespace, "--standalone", str(EXAMPLES / "logs" / "operator.py")],
                               cwd=tmp_path)
    try:
        operator.wait_for("Initial authentication has finished")
        write_lines(path, "epoch 1: model accuracy is 80.5%", "epoch 2: model accuracy is 93.25%",
                    "epoch 3: model accuracy is 90.0%", "Traceback (most recent call last):",
                    '  File "train.py", line 3, in <module>', "ValueError: the data ran out")

        def status() -> dict:
            found = kubectl("get", "trainingjob", "mnist", "-n", namespace, "-o", "jsonpath={.status}")
            return json.loads(found or "{}")
        eventually(lambda: status().get("failure"), timeout=40, what="the failure in the job's status")
    finally:
        operator.stop()
    assert status()["accuracy"] == "93.25%"
    assert status()["failure"] == "trainer: ValueError: the data ran out"
    assert "Traceback" not in operator.output  # (the pod's own traceback is not the operator's)


def test_the_generated_rbac_lets_the_log_handlers_read_the_logs(namespace: str, tmp_path: Path) -> None:
    script = write_script(tmp_path, OPERATOR)
    account = f"logs-{namespace}"
    kopf = Path(sys.executable).with_name("kopf")
    generated = subprocess.run([str(kopf), "rbac", "generate", "-n", namespace, "--name", account, "--standalone",
                                str(script)], capture_output=True, text=True, check=False, timeout=60)
    assert generated.returncode == 0, generated.stderr
    assert "# get: log handler 'steps' (the containers' logs, followed)" in generated.stdout
    kubectl("apply", "-f", "-", input=generated.stdout)
    try:
        kubeconfig = account_kubeconfig(account, tmp_path, namespace)
        operator = OperatorProcess(["run", "-n", namespace, "--standalone", str(script)], cwd=tmp_path,
                                   env={"KUBECONFIG": str(kubeconfig)})
        try:
            operator.wait_for("Initial authentication has finished")
            files = talker("p7", namespace, tmp_path)
            write_lines(files["main"], "step 1: allowed")
            operator.wait_for(r"STEP p7 main 1 allowed", timeout=40)
        finally:
            operator.stop()
        assert not refused(operator.output), operator.output
    finally:
        kubectl("delete", "clusterrole,clusterrolebinding", account, "--ignore-not-found")


BOUNDED = """
import time
import kopf

@kopf.on.startup()
def configure(settings, **_):
    settings.logs.queue_size = 2
    settings.logs.max_streams = 1

@kopf.on.log(labels={'app': 'talker'}, regex=r'^step (\\d+): (\\w+)$')
def slow(match, name, logger, **_):
    time.sleep(0.2)
    logger.info(f"STEP {name} {match.group(1)}")
"""


def test_the_bounds_of_streams_and_queued_lines_act(namespace: str, tmp_path: Path) -> None:
    script = write_script(tmp_path, BOUNDED)
    operator = OperatorProcess(["run", "-n", namespace, "--standalone", str(script)], cwd=tmp_path)
    try:
        operator.wait_for("Initial authentication has finished")
        first = talker("p8", namespace, tmp_path)
        write_lines(first["main"], *[f"step {n}: x" for n in range(1, 11)])
        operator.wait_for(r"STEP p8 10", timeout=40)
        # One stream at a time: the second pod waits until the first one's container ends.
        second = talker("p9", namespace, tmp_path)
        write_lines(second["main"], "step 1: y")
        time.sleep(3)
        assert "STEP p9" not in operator.output
        exit_with("p8", namespace, 0)
        output = operator.wait_for(r"STEP p9 1", timeout=40)
    finally:
        operator.stop()
    assert [int(n) for n in re.findall(r"STEP p8 (\d+)", output)] == list(range(1, 11))
    # Warned about once while it stays behind, not for every line.
    assert output.count("The log handlers fall behind the log of container 'main': 2 matched lines wait "
                        "(settings.logs.queue_size); it is read on when they catch up.") == 1, output
