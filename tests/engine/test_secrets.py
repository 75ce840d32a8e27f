"""Secrets stay secret: at `--debug`, in every log format, through a Secret's creation, an update of
a value, a failing handler and the deletion, and a custom resource with a field named secret in
`settings.secrets.fields`, no value is found in the output nor in the Events, while the handlers
get the values in `body`. Kopf 1.45.2, side by side, shows them (in its body dumps and patch lines):
the contract is Kopf's lines, not its leaks. Two operators embedded in one process redact each by
its own settings."""

from __future__ import annotations

import base64
import json
import sys
from pathlib import Path
from typing import Any

import pytest
from support.cluster import apply, kubectl, kubectl_json
from support.operators import OperatorProcess, eventually, write_script

SECRET = "TopSecretValue123"
CHANGED = "NewSecretValue456"
GREETING_PASSWORD = "GreetingPass789"
DIFF_BASE = "kopf.zalando.org/last-handled-configuration"
# What may never appear: the values and their base64, with or without the padding.
FORBIDDEN = [text for value in (SECRET, CHANGED, GREETING_PASSWORD)
             for text in (value, base64.b64encode(value.encode()).decode(),
                          base64.b64encode(value.encode()).decode().rstrip("="))]

OPERATOR = """
    import base64
    import logging
    import kopf

    @kopf.on.startup()
    def configure(settings, **_):
        settings.secrets.fields = ['spec.password']
        # Every line about an object, down to DEBUG, becomes an Event too (off by default).
        settings.posting.loggers = True
        settings.posting.level = logging.DEBUG

    def value(body):
        return base64.b64decode(body['data']['password']).decode()

    @kopf.on.create('', 'v1', 'secrets', labels={'redaction-test': 'yes'})
    def created(body, patch, **_):
        patch.metadata.annotations['seen-created'] = str(len(value(body)))

    @kopf.on.update('', 'v1', 'secrets', labels={'redaction-test': 'yes'})
    def updated(body, patch, **_):
        patch.metadata.annotations['seen-updated'] = str(len(value(body)))

    @kopf.on.delete('', 'v1', 'secrets', labels={'redaction-test': 'yes'})
    def deleted(body, **_):
        pass

    @kopf.on.create('', 'v1', 'secrets', labels={'redaction-test': 'fails'}, retries=2, backoff=0.5)
    def failing(body, **_):
        raise kopf.TemporaryError(f"cannot use a value of {len(value(body))} characters", delay=0.5)

    @kopf.on.create('demo.kopf.dev', 'v1', 'greetings')
    def greeted(spec, **_):
        return {'length': len(spec['password'])}
"""


def secret(name: str, value: str, label: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Secret", "type": "Opaque",
            "metadata": {"name": name, "labels": {"redaction-test": label}},
            "data": {"password": base64.b64encode(value.encode()).decode()}}


def scenario(namespace: str, operator: OperatorProcess) -> None:
    """Create, update a value, fail, delete; a Greeting with a secret field; each awaited."""
    apply({**secret("kept", SECRET, "yes"), "metadata": {**secret("kept", SECRET, "yes")["metadata"],
                                                          "namespace": namespace}})
    eventually(lambda: kubectl_json("get", "secret", "kept", "-n", namespace)["metadata"]
               .get("annotations", {}).get("seen-created") == str(len(SECRET)), what="the creation handled")
    kubectl("patch", "secret", "kept", "-n", namespace, "--type=merge",
            "-p", json.dumps({"data": {"password": base64.b64encode(CHANGED.encode()).decode()}}))
    eventually(lambda: kubectl_json("get", "secret", "kept", "-n", namespace)["metadata"]
               .get("annotations", {}).get("seen-updated") == str(len(CHANGED)), what="the update handled")
    apply({**secret("broken", SECRET, "fails"), "metadata": {**secret("broken", SECRET, "fails")["metadata"],
                                                              "namespace": namespace}})
    operator.wait_for(r"Handler 'failing' failed temporarily: cannot use a value of 17 characters")
    apply({"apiVersion": "demo.kopf.dev/v1", "kind": "Greeting",
           "metadata": {"name": "hello", "namespace": namespace},
           "spec": {"who": "Ada", "password": GREETING_PASSWORD}})
    eventually(lambda: kubectl_json("get", "greeting", "hello", "-n", namespace).get("status", {})
               .get("greeted") == {"length": len(GREETING_PASSWORD)}, what="the greeting handled")
    kubectl("delete", "secret", "kept", "-n", namespace, "--wait=false")
    operator.wait_for(r"Handler 'deleted' succeeded")
    eventually(lambda: "kept" not in kubectl("get", "secrets", "-n", namespace, "-o", "name"),
               what="the secret deleted")


def leaks(text: str) -> list[str]:
    return [value for value in FORBIDDEN if value in text]


@pytest.mark.parametrize("log_format", ["plain", "full", "json"])
def test_no_secret_value_in_the_logs_or_events(crd: None, namespace: str, tmp_path: Path,
                                                log_format: str) -> None:
    script = write_script(tmp_path, OPERATOR)
    operator = OperatorProcess(["run", "--debug", "--standalone", "-n", namespace,
                                f"--log-format={log_format}", str(script)], cwd=tmp_path)
    try:
        scenario(namespace, operator)
        events = eventually(lambda: (lambda text: "is in progress" in text and "Merge-patching" in text
                                     and "cannot use a value of 17 characters" in text and text)(
            kubectl("get", "events", "-n", namespace, "-o", "json")), what="the lines posted as Events")
    finally:
        operator.stop()
    output = operator.output
    assert "<redacted>" in output  # the body dumps and patches are there, redacted
    assert "is in progress" in output and "Merge-patching" in output
    assert not leaks(output), [line for line in output.splitlines() if leaks(line)][:5]
    assert "Handler 'failing' failed temporarily: cannot use a value of 17 characters" in events
    assert not leaks(events)


def test_kopf_shows_the_values_that_we_do_not(crd: None, namespace: str, tmp_path: Path,
                                              reference_kopf: Path) -> None:
    """Kopf 1.45.2 logs the Secrets' values at --debug: the behaviour we do better than."""
    script = write_script(tmp_path, OPERATOR.replace("settings.secrets.fields = ['spec.password']", ""))
    operator = OperatorProcess(["run", "--debug", "--standalone", "-n", namespace, str(script)],
                               cwd=tmp_path, kopf=reference_kopf)
    try:
        apply({**secret("kept", SECRET, "yes"), "metadata": {**secret("kept", SECRET, "yes")["metadata"],
                                                              "namespace": namespace}})
        operator.wait_for(r"Handler 'created' succeeded", timeout=60)
        operator.wait_for(r"Merge-patching the resource with")
    finally:
        operator.stop()
    assert base64.b64encode(SECRET.encode()).decode() in operator.output


DIGESTS = """
    import kopf

    @kopf.on.startup()
    def configure(settings, **_):
        settings.secrets.diffbase_digests = True

    @kopf.on.create('', 'v1', 'secrets', labels={'redaction-test': 'yes'})
    def created(body, patch, **_):
        patch.metadata.annotations['seen-created'] = 'yes'

    @kopf.on.update('', 'v1', 'secrets', labels={'redaction-test': 'yes'})
    def updated(body, old, new, diff, patch, **_):
        if old.get('data') == new.get('data'):  # (our own annotations' changes)
            return
        patch.metadata.annotations['seen-update'] = ' '.join([
            old['data']['password'][:8], new['data']['password'][:8],
            str(old['data']['password'] != new['data']['password']),
            str([op for op, field, *_ in diff if field[:1] == ('data',)]), str(len(body['data']['password']))])
"""


def secret_annotations(namespace: str, name: str) -> dict[str, str]:
    annotations: dict[str, str] = kubectl_json("get", "secret", name, "-n", namespace)["metadata"].get(
        "annotations", {})
    return annotations


def diff_base(namespace: str, name: str) -> Any:
    return json.loads(secret_annotations(namespace, name).get(DIFF_BASE, "null"))


def test_digests_keep_the_values_out_of_the_diff_base(namespace: str, tmp_path: Path) -> None:
    script = write_script(tmp_path, DIGESTS)
    operator = OperatorProcess(["run", "--verbose", "--standalone", "-n", namespace, str(script)], cwd=tmp_path)
    try:
        apply({**secret("kept", SECRET, "yes"), "metadata": {**secret("kept", SECRET, "yes")["metadata"],
                                                              "namespace": namespace}})
        base = eventually(lambda: diff_base(namespace, "kept"), what="the diff base stored")
        assert base["data"]["password"].startswith("blake2b:") and len(base["data"]["password"]) == 72
        kubectl("patch", "secret", "kept", "-n", namespace, "--type=merge",
                "-p", json.dumps({"data": {"password": base64.b64encode(CHANGED.encode()).decode()}}))
        seen = eventually(lambda: secret_annotations(namespace, "kept").get("seen-update"), what="the update handled")
        # old and new hold digests (different ones), the diff is a change, body has the value.
        assert seen == f"blake2b: blake2b: True ['change'] {len(base64.b64encode(CHANGED.encode()))}"
        eventually(lambda: diff_base(namespace, "kept")["data"]["password"] != base["data"]["password"],
                   what="the new digest stored")
    finally:
        operator.stop()
    # (kubectl's own last-applied-configuration keeps the first value: not ours to change.)
    assert not leaks(secret_annotations(namespace, "kept")[DIFF_BASE])

    # The way back (to hand over to Kopf): a restart with the setting off stores the values
    # again, and no handler runs for it.
    plain = write_script(tmp_path, DIGESTS.replace("settings.secrets.diffbase_digests = True", "pass"),
                         name="plain.py")
    operator = OperatorProcess(["run", "--verbose", "--standalone", "-n", namespace, str(plain)], cwd=tmp_path)
    try:
        encoded = base64.b64encode(CHANGED.encode()).decode()
        eventually(lambda: diff_base(namespace, "kept")["data"]["password"] == encoded,
                   what="the values stored again")
    finally:
        operator.stop()
    assert "Handler 'updated'" not in operator.output and "Handler 'created'" not in operator.output
    assert secret_annotations(namespace, "kept")["seen-update"] == seen


def test_a_peering_with_kopf_is_refused_while_digests_are_on(peering: str, namespace: str, tmp_path: Path,
                                                              reference_kopf: Path) -> None:
    kopf_script = write_script(tmp_path, DIGESTS.replace("settings.secrets.diffbase_digests = True", "pass"),
                               name="kopf.py")
    kopf = OperatorProcess(["run", "--verbose", "-n", namespace, "--peering", peering, "--priority", "1",
                            str(kopf_script)], cwd=tmp_path, kopf=reference_kopf)
    ours: OperatorProcess | None = None
    try:
        kopf.wait_for(r"Keep-alive in 'test'", timeout=60)
        script = write_script(tmp_path, DIGESTS, name="ours.py")
        ours = OperatorProcess(["run", "-n", namespace, "--peering", peering, "--priority", "10", str(script)],
                               cwd=tmp_path)
        ours.wait_for(r"Refusing a hand-over with \[<Peer [^:]+: priority=1, .*\]: Secrets' diff base holds "
                      r"digests \(settings.secrets.diffbase_digests\)")
        kopf.wait_for(r"Pausing operations in favour of \[<Peer ")  # Kopf defers to the higher priority
        apply({**secret("waiting", SECRET, "yes"),
               "metadata": {**secret("waiting", SECRET, "yes")["metadata"], "namespace": namespace}})
        assert kopf.stop() == 0, kopf.output
        # Kopf gone, the hand-over is over: ours serves, with digests.
        ours.wait_for(r"Resuming operations after the pause")
        eventually(lambda: secret_annotations(namespace, "waiting").get("seen-created") == "yes",
                   what="the secret handled after Kopf left")
        assert ours.stop() == 0
    finally:
        kopf.kill()
        if ours is not None:
            ours.kill()


EMBEDDED = """
    import asyncio
    import logging
    import signal
    import sys
    import threading
    import kopf

    logging.basicConfig(level=logging.DEBUG, format='%(message)s', stream=sys.stdout)

    def operator(namespace, field, stop):
        registry = kopf.OperatorRegistry()
        settings = kopf.OperatorSettings()
        settings.secrets.fields = [field]

        @kopf.on.login(registry=registry)
        def login(**kwargs):
            return kopf.login_with_kubeconfig(**kwargs)

        @kopf.on.create('demo.kopf.dev', 'v1', 'greetings', registry=registry)
        def greeted(spec, **_):
            return {'seen': sorted(spec)}

        asyncio.run(kopf.operator(registry=registry, settings=settings, namespaces=[namespace],
                                  standalone=True, stop_flag=stop))

    stops = [threading.Event(), threading.Event()]
    threads = [threading.Thread(target=operator, args=(sys.argv[1], 'spec.password', stops[0])),
               threading.Thread(target=operator, args=(sys.argv[2], 'spec.token', stops[1]))]
    for thread in threads:
        thread.start()
    signal.sigwait([signal.SIGINT, signal.SIGTERM])
    for stop in stops:
        stop.set()
    for thread in threads:
        thread.join()
"""


def test_two_embedded_operators_redact_each_by_its_own_settings(crd: None, namespace: str, tmp_path: Path) -> None:
    """One process, two operators: each one's `settings.secrets.fields` is its own (no operator's
    settings overwrite the other's redaction)."""
    other = f"{namespace}-other"
    kubectl("create", "namespace", other)
    script = write_script(tmp_path, EMBEDDED, name="embedded.py")
    signal_blocked = f"import signal; signal.pthread_sigmask(signal.SIG_BLOCK, [signal.SIGINT, signal.SIGTERM]); " \
                     f"exec(open({str(script)!r}).read())"
    operator = OperatorProcess(["-c", signal_blocked, namespace, other], cwd=tmp_path,
                               kopf=Path(sys.executable))
    try:
        for ns, password, token in [(namespace, "FirstPassword1", "FirstToken1"),
                                    (other, "SecondPassword2", "SecondToken2")]:
            apply({"apiVersion": "demo.kopf.dev/v1", "kind": "Greeting",
                   "metadata": {"name": "hello", "namespace": ns},
                   "spec": {"who": "Ada", "password": password, "token": token}})
        operator.wait_for(r"Handler '\S*greeted' succeeded", count=2)
    finally:
        operator.stop()
        kubectl("delete", "namespace", other, "--wait=false", check=False)
    output = operator.output
    assert "<redacted>" in output
    assert "FirstPassword1" not in output and "FirstToken1" in output, "the first one's fields"
    assert "SecondToken2" not in output and "SecondPassword2" in output, "the second one's fields"
