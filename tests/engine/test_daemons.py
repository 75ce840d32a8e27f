"""Daemons and timers under `kopf run`, against the real API: what they do to the objects,
what they log, and how they stop (deletion, filters, operator exit)."""

from __future__ import annotations

import json
import re
import signal
import time
from pathlib import Path

from support.cluster import kubectl
from support.operators import OperatorProcess, eventually, get, write_script

EXAMPLES = Path(__file__).parents[2] / "examples"


def greeting(name: str, namespace: str, labels: dict[str, str] | None = None, **spec: object) -> str:
    return json.dumps({"apiVersion": "demo.kopf.dev/v1", "kind": "Greeting",
                       "metadata": {"name": name, "namespace": namespace, "labels": labels or {}}, "spec": spec})


def test_sync_and_async_daemons_tick_and_stop_on_deletion(crd: None, namespace: str, tmp_path: Path) -> None:
    script = write_script(tmp_path, """
        import kopf

        @kopf.daemon('greetings', initial_delay=0.5)
        async def ticker(stopped, logger, spec, **_):
            ticks = 0
            while not stopped:
                ticks += 1
                logger.info(f"async tick {ticks}: {spec.get('who')}")
                await stopped.wait(0.3)
            logger.info(f"async stopped: {stopped.reason}")

        @kopf.daemon('greetings')
        def watcher(stopped, logger, spec, **_):
            ticks = 0
            while not stopped:
                ticks += 1
                logger.info(f"sync tick {ticks}: {spec.get('who')}")
                stopped.wait(0.3)
            logger.info(f"sync stopped: {stopped.reason}")
    """)
    operator = OperatorProcess(["run", "-n", namespace, "--verbose", str(script)], cwd=tmp_path)
    try:
        kubectl("create", "-f", "-", input=greeting("d1", namespace, who="Alice"))
        operator.wait_for(r"async tick 3: Alice")
        operator.wait_for(r"sync tick 3: Alice")
        assert get("greeting", "d1", namespace)["metadata"]["finalizers"] == ["kopf.zalando.org/KopfFinalizerMarker"]

        # Both daemons see the object's latest state without being restarted.
        kubectl("patch", "greeting", "d1", "-n", namespace, "--type=merge", "-p", '{"spec": {"who": "Bob"}}')
        operator.wait_for(r"async tick \d+: Bob")
        operator.wait_for(r"sync tick \d+: Bob")

        kubectl("delete", "greeting", "d1", "-n", namespace, "--timeout=10s")
        output = operator.wait_for(r"Removing the finalizer, thus allowing the actual deletion")
    finally:
        exit_code = operator.stop()
    prefix = f"[{namespace}/d1]"
    assert f"{prefix} async stopped: DaemonStoppingReason.RESOURCE_DELETED" in output
    assert f"{prefix} sync stopped: DaemonStoppingReason.RESOURCE_DELETED" in output
    assert f"{prefix} Daemon 'ticker' has exited on request and will not be retried or restarted." in output
    assert f"{prefix} Daemon 'watcher' has exited on request and will not be retried or restarted." in output
    assert output.index("async stopped") < output.index("Removing the finalizer, thus allowing")
    assert output.count("] async tick 1:") == 1 and output.count("] sync tick 1:") == 1  # never restarted
    assert "Traceback" not in operator.output
    assert exit_code == 0


def test_a_stubborn_async_daemon_is_cancelled_and_the_deletion_completes(
        crd: None, namespace: str, tmp_path: Path) -> None:
    script = write_script(tmp_path, """
        import asyncio
        import kopf

        @kopf.daemon('greetings', cancellation_backoff=1.0, cancellation_timeout=2.0)
        async def stubborn(logger, **_):
            logger.info("stubborn is running")
            try:
                while True:
                    await asyncio.sleep(10)
            except asyncio.CancelledError:
                logger.info("stubborn is cancelled")
                raise
    """)
    operator = OperatorProcess(["run", "-n", namespace, "--verbose", str(script)], cwd=tmp_path)
    try:
        kubectl("create", "-f", "-", input=greeting("d2", namespace))
        operator.wait_for(r"stubborn is running")
        eventually(lambda: get("greeting", "d2", namespace)["metadata"].get("finalizers"), what="the finalizer")
        # Within cancellation_backoff + cancellation_timeout plus a second, or kubectl fails.
        kubectl("delete", "greeting", "d2", "-n", namespace, "--timeout=4s")
        output = operator.output
    finally:
        exit_code = operator.stop()
    prefix = f"[{namespace}/d2]"
    lines = [f"{prefix} Daemon 'stubborn' is signalled to exit gracefully.",
             f"{prefix} Daemon 'stubborn' is signalled to exit by force.",
             f"{prefix} stubborn is cancelled",
             f"{prefix} Daemon 'stubborn' is cancelled. Will escalate.",
             f"{prefix} Removing the finalizer, thus allowing the actual deletion."]
    positions = [output.index(line) for line in lines]
    assert positions == sorted(positions)
    assert exit_code == 0


def test_a_failing_daemon_is_retried_with_backoff_and_a_finished_one_stays_finished(
        crd: None, namespace: str, tmp_path: Path) -> None:
    script = write_script(tmp_path, """
        import kopf

        @kopf.daemon('greetings', backoff=0.5)
        def flaky(retry, logger, patch, **_):
            logger.info(f"flaky attempt {retry}")
            if retry < 2:
                raise ValueError(f"boom {retry}")
            patch.status['note'] = 'done'
            return {'attempts': retry + 1}

        @kopf.daemon('greetings', errors=kopf.ErrorsMode.PERMANENT)
        def fatal(logger, **_):
            raise ValueError("fatal failure")
    """)
    operator = OperatorProcess(["run", "-n", namespace, "--verbose", str(script)], cwd=tmp_path)
    try:
        kubectl("create", "-f", "-", input=greeting("d3", namespace))
        operator.wait_for(r"Daemon 'flaky' has exited on its own")
        obj = eventually(lambda: (o := get("greeting", "d3", namespace)).get("status", {}).get("note") and o,
                         what="the daemon's status")
        # A finished daemon is not spawned again by later changes.
        kubectl("patch", "greeting", "d3", "-n", namespace, "--type=merge", "-p", '{"spec": {"who": "X"}}')
        time.sleep(2)
    finally:
        exit_code = operator.stop()
    output = operator.output
    prefix = f"[{namespace}/d3]"
    assert obj["status"] == {"flaky": {"attempts": 3}, "note": "done"}
    assert f"{prefix} Daemon 'flaky' failed with an exception and will try again in 0.5 seconds: boom 0" in output
    assert f"{prefix} Daemon 'flaky' failed with an exception and will try again in 0.5 seconds: boom 1" in output
    assert f"{prefix} Daemon 'flaky' succeeded." in output
    assert [int(n) for n in re.findall(r"flaky attempt (\d+)", output)] == [0, 1, 2]
    assert f"{prefix} Daemon 'fatal' failed with an exception and will stop now: fatal failure" in output
    assert f"{prefix} Daemon 'fatal' has exited on its own and will not be retried or restarted." in output
    assert output.count("Daemon 'fatal' is invoked.") == 1
    assert exit_code == 0


def test_daemons_stop_when_filters_stop_matching_and_restart_when_they_match(
        crd: None, namespace: str, tmp_path: Path) -> None:
    script = write_script(tmp_path, """
        import kopf

        @kopf.daemon('greetings', labels={'watched': 'yes'})
        async def labelled(stopped, logger, **_):
            logger.info("labelled daemon starts")
            await stopped.wait()
            logger.info(f"labelled daemon stops: {stopped.reason}")
    """)
    operator = OperatorProcess(["run", "-n", namespace, "--verbose", str(script)], cwd=tmp_path)
    try:
        kubectl("create", "-f", "-", input=greeting("d4", namespace, labels={"watched": "yes"}))
        operator.wait_for(r"labelled daemon starts")
        kubectl("label", "greeting", "d4", "-n", namespace, "watched=no", "--overwrite")
        operator.wait_for(r"labelled daemon stops: DaemonStoppingReason.FILTERS_MISMATCH")
        kubectl("label", "greeting", "d4", "-n", namespace, "watched=yes", "--overwrite")
        output = operator.wait_for(r"labelled daemon starts", count=2)
    finally:
        exit_code = operator.stop(signal.SIGTERM)
    assert "labelled daemon stops: DaemonStoppingReason.OPERATOR_EXITING" in operator.output
    assert output.count("Daemon 'labelled' has exited on request") == 1
    assert exit_code == 0


def test_operator_exit_stops_many_daemons_cleanly(crd: None, namespace: str, tmp_path: Path) -> None:
    count = 200
    script = write_script(tmp_path, """
        import time
        import kopf

        @kopf.daemon('greetings')
        async def waiting(stopped, **_):
            await stopped.wait()

        @kopf.daemon('greetings', cancellation_backoff=0.5, cancellation_timeout=0.5)
        def lingering(stopped, name, logger, **_):
            if name == 'many-0':
                stopped.wait()
                time.sleep(2.0)  # slower than the backoff and the timeout: abandoned, then exits
                logger.info("lingering has finished late")
            else:
                stopped.wait()
    """)
    items = [json.loads(greeting(f"many-{i}", namespace)) for i in range(count)]
    kubectl("create", "-f", "-", input=json.dumps({"apiVersion": "v1", "kind": "List", "items": items}))
    operator = OperatorProcess(["run", "-n", namespace, "--verbose", str(script)], cwd=tmp_path)
    try:
        operator.wait_for(r"Daemon 'waiting' is invoked", count=count, timeout=120)
        operator.wait_for(r"Daemon 'lingering' is invoked", count=count, timeout=60)
    finally:
        exit_code = operator.stop(signal.SIGTERM, timeout=60)
    output = operator.output
    assert output.count("Daemon 'waiting' has exited on request") == count
    assert output.count("Daemon 'lingering' has exited on request") == count - 1
    assert f"[{namespace}/many-0] Daemon 'lingering' did not exit in time. Leaving it orphaned." in output
    assert "lingering has finished late" in output  # the thread was not killed, only left alone
    assert "Traceback" not in output
    assert exit_code == 0


def test_interval_timer_patches_status_and_retries_errors(crd: None, namespace: str, tmp_path: Path) -> None:
    script = write_script(tmp_path, """
        import kopf

        @kopf.timer('greetings', interval=0.5, backoff=0.3)
        def counter(memo, patch, retry, logger, **_):
            memo['calls'] = memo.get('calls', 0) + 1
            if memo['calls'] == 3:
                raise ValueError("third call fails")
            patch.status['last-retry'] = retry
            return {'calls': memo['calls']}

        @kopf.timer('greetings', interval=0.4, initial_delay=1.0)
        async def delayed(logger, **_):
            logger.info("delayed timer fired")

        def per_object_delay(name, stopped, **_):
            assert not stopped
            return 0.2 if name == 't1' else 60

        @kopf.timer('greetings', interval=0.5, sharp=True, initial_delay=per_object_delay)
        def sharp(logger, **_):
            logger.info("sharp timer fired")
    """)
    operator = OperatorProcess(["run", "-n", namespace, "--verbose", str(script)], cwd=tmp_path)
    try:
        kubectl("create", "-f", "-", input=greeting("t1", namespace))
        obj = eventually(lambda: (o := get("greeting", "t1", namespace)).get("status", {}).get("counter", {})
                         .get("calls", 0) >= 6 and o, what="six timer calls")
        output = operator.output
    finally:
        exit_code = operator.stop()
    prefix = f"[{namespace}/t1]"
    assert f"{prefix} Timer 'counter' failed with an exception and will try again in 0.3 seconds: third call fails" \
        in output
    assert f"{prefix} Timer 'counter' succeeded." in output
    assert obj["status"]["last-retry"] == 0  # the retry counter restarts after a success
    assert "retry" not in obj["status"]["counter"]
    assert output.index("Timer 'counter' succeeded.") < output.index("delayed timer fired")
    assert output.count("sharp timer fired") >= 2
    assert f"{prefix} Timer 'counter' has exited gracefully." in operator.output
    assert exit_code == 0


def test_a_timer_sees_the_objects_latest_body(crd: None, namespace: str, tmp_path: Path) -> None:
    # Between calls the core keeps the body as compact JSON and sends it only when it changed.
    script = write_script(tmp_path, """
        import kopf

        @kopf.timer('greetings', interval=0.3)
        def reader(spec, meta, body, name, logger, **_):
            n = body['spec']['n'] + 1
            logger.info(f"reads {spec['who']} {meta['labels']['mood']} {n} {spec['ratio']} of {name}")
    """)
    operator = OperatorProcess(["run", "-n", namespace, "--verbose", str(script)], cwd=tmp_path)
    try:
        kubectl("create", "-f", "-", input=greeting("t2", namespace, {"mood": "calm"}, who="Alice", n=1, ratio=0.5))
        operator.wait_for(r"reads Alice calm 2 0.5 of t2")
        kubectl("patch", "greeting", "t2", "-n", namespace, "--type=merge",
                "-p", '{"metadata": {"labels": {"mood": "loud"}}, "spec": {"who": "Bob", "n": 41, "ratio": 1e-3}}')
        operator.wait_for(r"reads Bob loud 42 0.001 of t2")
    finally:
        exit_code = operator.stop()
    assert "Traceback" not in operator.output
    assert exit_code == 0

def test_idle_timer_waits_for_the_object_to_settle(crd: None, namespace: str, tmp_path: Path) -> None:
    script = write_script(tmp_path, """
        import time
        import kopf

        @kopf.timer('greetings', idle=1.5)
        def settled(spec, logger, **_):
            logger.info(f"settled at {time.time():.3f} with {spec.get('who')}")
    """)
    operator = OperatorProcess(["run", "-n", namespace, "--verbose", str(script)], cwd=tmp_path)
    try:
        kubectl("create", "-f", "-", input=greeting("t2", namespace, who="v0"))
        operator.wait_for(r"settled at [\d.]+ with v0")
        # Keep changing the object faster than the idle time: the timer must not fire meanwhile.
        last_change = 0.0
        changes: dict[str, tuple[float, float]] = {}  # when each patch began and ended
        for i in range(1, 6):
            # Taken before the patch: the operator may see the change before kubectl has exited
            # (under load, a tenth of a second and more), and the idle time counts from then.
            last_change = time.time()
            kubectl("patch", "greeting", "t2", "-n", namespace, "--type=merge", "-p",
                    json.dumps({"spec": {"who": f"v{i}"}}))
            changes[f"v{i}"] = (last_change, time.time())
            time.sleep(0.5)
        output = operator.wait_for(r"settled at [\d.]+ with v5")
    finally:
        exit_code = operator.stop()
    fired = [(float(t), who) for t, who in re.findall(r"settled at ([\d.]+) with (\w+)", output)]
    whos = [who for _, who in fired]
    assert whos[0] == "v0" and whos[-1] == "v5"  # idle-only: once after each quiet period
    # In between, only where the object really was quiet that long: a loaded machine's kubectl
    # can take a second, and the changes then come slower than the idle time.
    for who in whos[1:-1]:
        quiet = changes[f"v{int(who[1:]) + 1}"][1] - changes[who][0]
        assert quiet >= 1.45, (who, changes)
    assert len(whos) == len(set(whos))
    assert fired[-1][0] - last_change >= 1.4
    assert exit_code == 0


def test_the_daemons_example(crd: None, namespace: str, tmp_path: Path) -> None:
    operator = OperatorProcess(["run", "-n", namespace, "--verbose", str(EXAMPLES / "daemons" / "operator.py")],
                               cwd=tmp_path)
    try:
        kubectl("create", "-f", "-", input=greeting("hello", namespace, who="world"))
        obj = eventually(lambda: (o := get("greeting", "hello", namespace)).get("status", {}).get("uptime") and o,
                         what="the uptime timer's result")
        operator.wait_for(r"Watching over 'world'")
        operator.wait_for(r"Heartbeat #2 of hello")
        kubectl("delete", "greeting", "hello", "-n", namespace, "--timeout=10s")
        output = operator.wait_for(r"Heartbeat of hello stops: DaemonStoppingReason.RESOURCE_DELETED")
    finally:
        exit_code = operator.stop()
    assert obj["status"]["uptime"]["checks"] == 1
    assert obj["status"]["uptime"]["since"] == obj["metadata"]["creationTimestamp"]
    assert re.fullmatch(r"\d\d:\d\d:\d\d", obj["status"]["heartbeat"])
    assert "Daemon 'watcher' has exited on request" in output
    assert exit_code == 0


def test_a_timer_with_a_callable_resource_selector(crd: None, namespace: str, tmp_path: Path) -> None:
    script = write_script(tmp_path, """
        import kopf

        @kopf.on.create('greetings', id='other')
        def other(**_):
            pass

        @kopf.timer(lambda resource: resource.plural == 'greetings', interval=0.3)
        def chosen(resource, logger, **_):
            logger.info(f"timer for {resource.plural}")
    """)
    operator = OperatorProcess(["run", "-n", namespace, "--verbose", str(script)], cwd=tmp_path)
    try:
        kubectl("create", "-f", "-", input=greeting("t3", namespace))
        output = operator.wait_for(r"timer for greetings", count=2)
    finally:
        exit_code = operator.stop()
    assert "Traceback" not in output
    assert exit_code == 0


def test_a_cron_timer_runs_at_its_schedules_instants(crd: None, namespace: str, tmp_path: Path) -> None:
    """Not in Kopf: `cron=` (every minute here, at second 0); a failure is retried with the
    backoff, not at the next instant; the results go to the status as any timer's do."""
    script = write_script(tmp_path, """
        import datetime
        import kopf

        @kopf.timer('greetings', cron='* * * * *', timezone='Asia/Kolkata', backoff=1)
        def minutely(retry, logger, **_):
            now = datetime.datetime.now(datetime.UTC)
            logger.info(f"cron tick at second {now.second + now.microsecond / 1e6:.3f}, retry {retry}")
            if retry == 0:
                raise kopf.TemporaryError("first try fails", delay=1)
            return now.minute
    """)
    kubectl("create", "-f", "-", input=greeting("c1", namespace))
    operator = OperatorProcess(["run", "-n", namespace, str(script)], cwd=tmp_path)
    try:
        output = operator.wait_for(r"cron tick at second [\d.]+, retry 1", timeout=75)
        obj = eventually(lambda: (o := get("greeting", "c1", namespace)).get("status", {}).get("minutely") is not None
                         and o, what="the result in the status")
    finally:
        operator.stop()
    seconds = [float(s) for s in re.findall(r"cron tick at second ([\d.]+), retry 0", output)]
    assert seconds and seconds[0] < 1.0  # at the minute's start (a half-hour zone changes nothing)
    retried = [float(s) for s in re.findall(r"cron tick at second ([\d.]+), retry 1", output)]
    assert 0.9 < retried[0] - seconds[0] < 3.0  # after the backoff, not at the next minute
    assert isinstance(obj["status"]["minutely"], int)
