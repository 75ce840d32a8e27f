"""`settings.posting.level` given as a level's name, as real operators do (kube-mcp-operator sets
`settings.posting.level = 'INFO'` in its startup handler): ours takes it as `logging` takes it;
PyPI's Kopf 1.45.2 compares the name with numbers at its first object's log line and stops the
operator as "a framework bug" (its bug, not a contract). A value that is no level stops ours at
once, before anything is served, and says why."""

from __future__ import annotations

import datetime
import json
import re
from pathlib import Path

from support.cluster import kubectl, kubectl_json
from support.operators import OperatorProcess, eventually, get, write_script

SCRIPT = """
import kopf

@kopf.on.startup()
def configure(settings, **_):
    settings.posting.level = {level!r}
    settings.posting.loggers = True  # the object's log lines become Events, from that level up

@kopf.on.create('greetings')
def greet(name, logger, **_):
    logger.info(f"A quiet line for {{name}}.")
    logger.warning(f"A loud line for {{name}}.")
    return {{'greeted': name}}
"""


def greeting(name: str, namespace: str) -> str:
    return json.dumps({"apiVersion": "demo.kopf.dev/v1", "kind": "Greeting",
                       "metadata": {"name": name, "namespace": namespace}, "spec": {}})


def messages(namespace: str) -> set[str]:
    return {event["message"] for event in kubectl_json("get", "events", "-n", namespace)["items"]}


def test_a_level_by_name_is_a_level(crd: None, namespace: str, tmp_path: Path, reference_kopf: Path) -> None:
    script = write_script(tmp_path, SCRIPT.format(level="WARNING"))
    operator = OperatorProcess(["run", "-n", namespace, "--standalone", str(script)], cwd=tmp_path)
    try:
        kubectl("create", "-f", "-", input=greeting("ours", namespace))
        eventually(lambda: get("greeting", "ours", namespace).get("status", {}).get("greet"), what="the status")
        eventually(lambda: "A loud line for ours." in messages(namespace), what="the warning's Event")
    finally:
        assert operator.stop() == 0
    assert "A quiet line for ours." not in messages(namespace)  # below the level: logged, not posted
    assert "A quiet line for ours." in operator.output

    kopf = OperatorProcess(["run", "-n", namespace, "--standalone", str(script)], cwd=tmp_path, kopf=reference_kopf)
    try:
        kubectl("create", "-f", "-", input=greeting("kopf", namespace))
        kopf.wait_for(r"TypeError: '>=' not supported between instances of 'int' and 'str'")
        kopf.wait_for(r"Event processing has failed with an unrecoverable error")
    finally:
        kopf.stop()
    assert "greet" not in get("greeting", "kopf", namespace).get("status", {})


def test_a_level_that_is_no_level_stops_the_operator_at_once(crd: None, namespace: str, tmp_path: Path) -> None:
    script = write_script(tmp_path, SCRIPT.format(level="loud"))
    operator = OperatorProcess(["run", "-n", namespace, "--standalone", str(script)], cwd=tmp_path)
    code = operator.process.wait(timeout=30)
    operator.stop()
    assert code != 0
    assert "settings.posting.level must be a logging level, a number or a name such as 'INFO': 'loud'" \
        in operator.output


CORE_LINES = """
import logging, os
import kopf
from kopf._handling import execution as _execution
from kopf._running.calls import Bridge

if os.environ.get('THROUGH_LOGGING'):  # anything else that may see the lines: they go to logging
    for name in ('kopf.objects', 'kopf._core.engine'):
        logging.getLogger(name).addFilter(lambda record: True)

sent = Bridge.log
def log(self, name, level, ref, message, local=False):  # which core lines came to Python
    if 'processed' in message or 'Unresolved' in message or 'succeeded' in message:
        print(f"sent to Python: {message}", flush=True)
    return sent(self, name, level, ref, message, local)
Bridge.log = log

logged = _execution.log_here
def log_here(logger, level, message, extra=None):  # which handlers' lines Python logged
    if message.startswith('Handler') and 'succeeded' in message:
        print(f"logged in Python: {message}", flush=True)
    return logged(logger, level, message, extra)
_execution.log_here = log_here

@kopf.on.startup()
def configure(settings, **_):
    settings.posting.loggers = True

@kopf.on.create('greetings')
def greet(**_):
    pass

@kopf.on.event('greetings')
async def seen(type, **_):
    pass

@kopf.on.create('nonexistent-things.example.com')  # unresolved: the core warns about it
def never(**_):
    pass
"""


def test_the_cores_own_lines_are_the_same_written_by_the_core_or_by_logging(
        crd: None, namespace: str, tmp_path: Path) -> None:
    """The core writes the lines that only `kopf run`'s stream handler would take itself
    (`Bridge.log_writing()`), and posts those about objects as Kopf's poster would: the same
    bytes and the same Events as when they go through Python's logging. So are the handlers'
    "succeeded" lines, sync or async, which their threads then leave to the core: posted for
    change handlers, never for `on.event` handlers (as Kopf's local object logger)."""
    script = write_script(tmp_path, CORE_LINES)
    outputs = {}
    for mode, name, other in [("direct", "first", "second"), ("logging", "second", "first")]:
        # A zone far from UTC (a POSIX rule: no zone files needed): both writers' times in it.
        env = {"THROUGH_LOGGING": "1"} if mode == "logging" else {"TZ": "IST-5:30"}
        operator = OperatorProcess(["run", "-n", namespace, "--standalone", str(script)], cwd=tmp_path, env=env)
        try:
            operator.wait_for("Unresolved resources")
            kubectl("create", "-f", "-", input=greeting(name, namespace))
            output = operator.wait_for(rf"\[{namespace}/{name}\] Creation is processed")
            # (Before the exit: the Events still queued then are not posted, in either way.)
            assert eventually(lambda name=name: "Creation is processed: 1 succeeded; 0 failed." in
                              messages_of(namespace, name), what=f"the Event of {name}'s line")
            assert eventually(lambda name=name: "Handler 'greet' succeeded." in messages_of(namespace, name),
                              what=f"the Event of {name}'s handler's line")
            assert "Handler 'seen' succeeded." not in messages_of(namespace, name)
        finally:
            operator.stop()
        # (The other run's object is seen too; `on.event` handlers are called for every event.)
        lines = {TIME.sub("[T] ", line).replace(name, "NAME") for line in output.splitlines()
                 if ("is processed" in line or "Unresolved" in line or "succeeded" in line) and "login" not in line
                 and not line.startswith(("sent to", "logged in")) and f"/{other}]" not in line}
        outputs[mode] = (lines, "sent to Python" in output, "logged in Python" in output)
        # A line of Python's (the startup handler's) and the core's next to it: the same local time.
        times = [datetime.datetime.strptime(line[1:20], "%Y-%m-%d %H:%M:%S") for line in output.splitlines()
                 if "Activity 'configure' succeeded" in line or f"[{namespace}/{name}] Creation is processed" in line]
        assert len(times) == 2 and abs((times[1] - times[0]).total_seconds()) < 60, output
    assert outputs["direct"][0] == outputs["logging"][0]
    assert outputs["direct"][0] == {
        "[T] kopf.activities.star [INFO    ] Activity 'configure' succeeded.",
        "[T] kopf._core.engine    [WARNING ] Unresolved resources cannot be served (try creating their CRDs): "
        "Selector(group='example.com', any_name='nonexistent-things')",
        f"[T] kopf.objects         [INFO    ] [{namespace}/NAME] Handler 'seen' succeeded.",
        f"[T] kopf.objects         [INFO    ] [{namespace}/NAME] Handler 'greet' succeeded.",
        f"[T] kopf.objects         [INFO    ] [{namespace}/NAME] Creation is processed: 1 succeeded; 0 failed.",
    }
    # When the core writes, Python logs none of these (the activity's line is not a handler's).
    assert outputs["direct"][1:] == (False, False)
    assert outputs["logging"][1:] == (True, True)


TIME = re.compile(r"^\[\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3}\] ")


def messages_of(namespace: str, name: str) -> set[str]:
    return {event["message"] for event in kubectl_json("get", "events", "-n", namespace)["items"]
            if event["involvedObject"].get("name") == name and event["reason"] == "Logging"}
