"""The operator's life around the handlers: activities, probes, embedding, KopfRunner, signals."""

from __future__ import annotations

import hashlib
import json
import os
import re
import signal
import textwrap
import threading
import time
import urllib.parse
import urllib.request
from pathlib import Path

import kopf
import pytest
from kopf.testing import KopfRunner
from support.cluster import kubectl
from support.network import free_port
from support.operators import OperatorProcess, eventually, get, write_script


def test_activities_and_liveness_probes(cluster: dict[str, str], namespace: str, tmp_path: Path) -> None:
    port = free_port()
    script = write_script(tmp_path, """
        import kopf

        @kopf.on.startup()
        def prepare(memo, logger, **_):
            memo.calls = 0
            logger.info("preparing")

        @kopf.on.startup()
        def flaky_start(retry, **_):
            if retry < 2:
                raise kopf.TemporaryError("not yet", delay=0.1)

        @kopf.on.probe(id='calls')
        def calls(memo, **_):
            memo.calls += 1
            return memo.calls

        @kopf.on.cleanup()
        def finish(logger, **_):
            logger.info("finishing")
    """)
    operator = OperatorProcess(["run", "-n", namespace, "--liveness", f"http://127.0.0.1:{port}/healthz",
                                str(script)], cwd=tmp_path)
    try:
        def probe() -> dict:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=5) as response:
                return json.loads(response.read())
        first = eventually(probe, what="a liveness response")
        second = probe()
        try:
            urllib.request.urlopen(f"http://127.0.0.1:{port}/other", timeout=5)
            raise AssertionError("a wrong path must not be served")
        except urllib.error.HTTPError as e:
            assert e.code == 404
    finally:
        exit_code = operator.stop(signal.SIGTERM)
    assert first == {"calls": 1}
    assert second == first  # cached for 10 seconds, as Kopf does
    output = operator.output
    assert "Activity 'prepare' succeeded." in output
    assert output.count("Activity 'flaky_start' failed temporarily: not yet") == 2
    assert "Activity 'flaky_start' succeeded." in output
    assert output.index("Activity 'flaky_start' succeeded.") < output.index("Initial authentication has finished.")
    assert "Signal SIGTERM is received. Operator is stopping." in output
    assert output.index("Operator is stopping.") < output.index("finishing")
    assert exit_code == 0


def test_failed_startup_stops_the_operator(cluster: dict[str, str], tmp_path: Path) -> None:
    script = write_script(tmp_path, """
        import kopf

        @kopf.on.startup()
        def impossible(**_):
            raise kopf.PermanentError("cannot start")
    """)
    operator = OperatorProcess(["run", "-A", str(script)], cwd=tmp_path)
    exit_code = operator.process.wait(timeout=30)
    operator.stop()
    assert exit_code != 0
    assert "Activity 'impossible' failed permanently: cannot start" in operator.output


@pytest.mark.parametrize("engine", ["ours", "kopf"])
def test_a_signal_stops_a_startup_retried_forever(cluster: dict[str, str], tmp_path: Path,
                                                  reference_kopf: Path, engine: str) -> None:
    """SIGTERM while a startup handler waits for its retry stops the operator at once, as in
    Kopf 1.45.2 (the same run under both: ours went on retrying, deaf to the signal); the
    cleanup handlers do not run after a startup that has not finished."""
    script = write_script(tmp_path, """
        import kopf

        @kopf.on.startup()
        def failing(**_):
            raise Exception("not yet")

        @kopf.on.cleanup()
        def cleaning(logger, **_):
            logger.info("cleaning up")
    """)
    kopf_command = reference_kopf if engine == "kopf" else None
    operator = OperatorProcess(["run", "-A", "--standalone", str(script)], cwd=tmp_path, kopf=kopf_command)
    try:
        operator.wait_for(r"Activity 'failing' failed with an exception and will try again in 60 seconds")
        exit_code = operator.stop(signal.SIGTERM, timeout=15)
    finally:
        operator.kill()
    output = operator.output
    assert exit_code == 0, output
    assert "Signal SIGTERM is received. Operator is stopping." in output
    assert "Startup activity is only partially executed due to cancellation." in output
    assert "cleaning up" not in output


@pytest.mark.parametrize("engine", ["ours", "kopf"])
def test_handlers_get_their_keyword_arguments_in_kopfs_order(namespace: str, tmp_path: Path,
                                                             reference_kopf: Path, engine: str) -> None:
    """A handler that lists its **kwargs sees them in Kopf 1.45.2's order (the same run under
    both); one without **_ fails naming the first it does not take, as in Kopf ('param').
    Ours gave the cause's first and the attempt's last."""
    script = write_script(tmp_path, """
        import kopf

        @kopf.index('configmaps')
        def names(name, **_):
            return {name: None}

        @kopf.on.startup()
        def starting(**kwargs):
            print("startup:", list(kwargs), flush=True)

        @kopf.on.create('configmaps', labels={'order': 'test'})
        def creating(**kwargs):
            print("create:", list(kwargs), flush=True)

        @kopf.on.event('configmaps', labels={'order': 'test'})
        async def watching(**kwargs):
            print("event:", list(kwargs), flush=True)

        @kopf.timer('configmaps', labels={'order': 'test'}, interval=100)
        def ticking(**kwargs):
            print("timer:", list(kwargs), flush=True)

        @kopf.on.cleanup()
        def strict():
            pass
    """)
    kopf_command = reference_kopf if engine == "kopf" else None
    operator = OperatorProcess(["run", "-n", namespace, "--standalone", str(script)], cwd=tmp_path, kopf=kopf_command)
    try:
        operator.wait_for("startup:")
        kubectl("create", "configmap", "ordered", "-n", namespace)
        kubectl("label", "configmap", "ordered", "-n", namespace, "order=test")
        operator.wait_for("create:")
        operator.wait_for("timer:")
        operator.wait_for("event:")
        # (Its cleanup is retried every minute, as by Kopf: not waited for.)
        operator.process.send_signal(signal.SIGTERM)
        operator.wait_for(r"Activity 'strict' failed with an exception")
    finally:
        operator.kill()
    attempt = "'param', 'retry', 'started', 'runtime', 'logger', 'memo'"
    body = "'resource', 'patch', 'body'"
    fields = "'spec', 'meta', 'status', 'uid', 'name', 'namespace', 'labels', 'annotations'"
    output = operator.output
    assert f"startup: [{attempt}, 'activity', 'settings', 'names']" in output
    assert f"create: [{attempt}, {body}, 'reason', 'diff', 'old', 'new', {fields}, 'names']" in output
    assert f"event: [{attempt}, {body}, 'type', 'event', {fields}, 'names']" in output
    assert f"timer: [{attempt}, {body}, {fields}, 'stopped', 'names']" in output
    assert "strict() got an unexpected keyword argument 'param'" in output


def test_handlers_speak_tls_and_hash_with_pythons_own_modules(cluster: dict[str, str], tmp_path: Path) -> None:
    """ssl, asyncio's TLS and hashlib are loaded at their first use (kopf._deferred), and work."""
    url = kubectl("config", "view", "--minify", "-o", "jsonpath={.clusters[0].cluster.server}")
    server = urllib.parse.urlsplit(url)
    script = write_script(tmp_path, """
        import asyncio, hashlib, os, ssl, sys
        import kopf

        @kopf.on.login()  # not the client libraries' logins: the test's virtualenv has them, with TLS
        def login(**kwargs):
            return kopf.login_with_kubeconfig(**kwargs)

        @kopf.on.startup()
        async def handshake(logger, **_):
            logger.info(f"OpenSSL before: {sorted(m for m in ('_ssl', '_hashlib') if m in sys.modules)}")
            context = ssl.create_default_context()
            context.check_hostname = False
            context.verify_mode = ssl.CERT_NONE
            reader, writer = await asyncio.open_connection(os.environ['HOST'], int(os.environ['PORT']), ssl=context)
            version = writer.get_extra_info('ssl_object').version()
            writer.close()
            await writer.wait_closed()
            logger.info(f"handshake: {version}; sha256: {hashlib.sha256(b'kopf').hexdigest()}")
    """)
    operator = OperatorProcess(["run", "-A", str(script)], cwd=tmp_path,
                               env={"HOST": server.hostname or "", "PORT": str(server.port)})
    try:
        output = operator.wait_for(r"Activity 'handshake' (succeeded|failed)")  # its last line
    finally:
        operator.stop()
    assert "OpenSSL before: []" in output
    assert f"handshake: TLSv1.3; sha256: {hashlib.sha256(b'kopf').hexdigest()}" in output
    assert "Activity 'handshake' succeeded." in output


def test_client_libraries_are_imported_only_when_the_operator_uses_them(crd: None, namespace: str,
                                                                        tmp_path: Path) -> None:
    """With ``kubernetes`` and pykube-ng installed (the test's virtualenv has both) and a plain
    kubeconfig, the default logins succeed as in Kopf without importing either client; a
    handler that imports ``kubernetes`` later finds it configured (kopf._connecting.piggybacking)."""
    script = write_script(tmp_path, """
        import sys
        import kopf

        @kopf.daemon('greetings')
        def use_the_client(logger, stopped, **_):
            logger.info(f"imported before: {sorted(m for m in ('kubernetes', 'pykube') if m in sys.modules)}")
            import kubernetes
            namespaces = kubernetes.client.CoreV1Api().list_namespace().items
            logger.info(f"the client lists {len(namespaces)} namespaces")
            stopped.wait(60)
    """)
    kubectl("create", "-f", "-", input=json.dumps({
        "apiVersion": "demo.kopf.dev/v1", "kind": "Greeting",
        "metadata": {"name": "clients", "namespace": namespace}, "spec": {}}))
    operator = OperatorProcess(["run", "--verbose", "-n", namespace, str(script)], cwd=tmp_path)
    try:
        output = operator.wait_for(r"the client lists \d+ namespaces|Daemon 'use_the_client' failed")
    finally:
        operator.stop()
    assert "Activity 'login_via_pykube' succeeded." in output
    assert "Activity 'login_via_client' succeeded." in output
    assert "imported before: []" in output
    assert "Client is configured via kubeconfig file." in output
    assert re.search(r"the client lists \d+ namespaces", output)


def test_core_threads_and_their_variable(cluster: dict[str, str], tmp_path: Path) -> None:
    """One core worker thread, which does not preempt Python's threads on wake-up (a batch
    thread on Linux); `TOKIO_WORKER_THREADS` sets their number, and a bad value stops the
    operator at once with a message saying so."""
    script = write_script(tmp_path, """
        import os
        import threading
        import time

        def core_threads():
            task = f"/proc/{os.getpid()}/task"
            for tid in sorted(os.listdir(task)):
                with open(f"{task}/{tid}/comm") as comm:
                    if comm.read().strip() == "tokio-rt-worker":
                        yield int(tid)

        def report():
            while not list(core_threads()):
                time.sleep(0.1)
            time.sleep(1)  # all the workers have started
            for tid in core_threads():
                print(f"core thread policy {os.sched_getscheduler(tid)}", flush=True)
            print("core threads counted", flush=True)

        threading.Thread(target=report, daemon=True).start()
    """)
    for workers, expected in [(None, 1), ("2", 2)]:
        env = {} if workers is None else {"TOKIO_WORKER_THREADS": workers}
        operator = OperatorProcess(["run", "-A", "--standalone", str(script)], cwd=tmp_path, env=env)
        try:
            output = operator.wait_for("core threads counted")
        finally:
            operator.stop()
        assert output.count(f"core thread policy {os.SCHED_BATCH}") == expected, output
        assert "core thread policy 0" not in output

    operator = OperatorProcess(["run", "-A", "--standalone", str(script)], cwd=tmp_path,
                               env={"TOKIO_WORKER_THREADS": "0"})
    exit_code = operator.process.wait(timeout=30)
    operator.stop()
    assert exit_code != 0
    assert 'TOKIO_WORKER_THREADS must be a positive integer, not "0"' in operator.output
    assert "core thread policy" not in operator.output


def test_kopf_runner(crd: None, namespace: str, tmp_path: Path) -> None:
    script = write_script(tmp_path, """
        import kopf

        @kopf.on.create('greetings')
        def hello(name, settings=None, **_):
            return {'hello': name}
    """)
    settings = kopf.OperatorSettings()
    settings.persistence.finalizer = "example.com/custom-finalizer"
    with KopfRunner(["run", "-n", namespace, "--verbose", str(script)], settings=settings, timeout=60) as runner:
        kubectl("create", "-f", "-", input=json.dumps({
            "apiVersion": "demo.kopf.dev/v1", "kind": "Greeting",
            "metadata": {"name": "r1", "namespace": namespace}, "spec": {}}))
        obj = eventually(lambda: (o := get("greeting", "r1", namespace)).get("status") and o, what="status")
    assert runner.exit_code == 0
    assert runner.exception is None
    assert f"[{namespace}/r1] Handler 'hello' succeeded." in runner.output
    assert obj["status"] == {"hello": {"hello": "r1"}}
    assert "OS signals are ignored: running not in the main thread." in runner.output


def test_embedded_operator_with_flags_and_memo(crd: None, namespace: str) -> None:
    registry = kopf.OperatorRegistry()  # a bare registry: it needs a login handler of its own
    kopf.on.login(registry=registry)(kopf.login_with_kubeconfig)
    seen: list[str] = []

    @kopf.on.create("greetings", registry=registry)
    def remember(memo: kopf.Memo, name: str, **_: object) -> None:
        seen.append(memo.prefix + name)

    ready, stop = threading.Event(), threading.Event()

    def operate() -> None:
        import asyncio
        asyncio.run(kopf.operator(registry=registry, namespaces=[namespace], ready_flag=ready, stop_flag=stop,
                                  memo=kopf.Memo(prefix="seen:")))

    thread = threading.Thread(target=operate)
    thread.start()
    try:
        assert ready.wait(30), "the operator did not become ready"
        kubectl("create", "-f", "-", input=json.dumps({
            "apiVersion": "demo.kopf.dev/v1", "kind": "Greeting",
            "metadata": {"name": "e1", "namespace": namespace}, "spec": {}}))
        eventually(lambda: seen == ["seen:e1"], what="the handler's call")
    finally:
        stop.set()
        thread.join(30)
    assert not thread.is_alive()


def test_sigterm_with_a_slow_handler_exits_cleanly(crd: None, namespace: str, tmp_path: Path) -> None:
    script = write_script(tmp_path, """
        import time
        import kopf

        @kopf.on.create('greetings')
        def slow(logger, **_):
            logger.info("slow handler started")
            time.sleep(1)
    """)
    operator = OperatorProcess(["run", "-n", namespace, str(script)], cwd=tmp_path)
    kubectl("create", "-f", "-", input=json.dumps({
        "apiVersion": "demo.kopf.dev/v1", "kind": "Greeting",
        "metadata": {"name": "s1", "namespace": namespace}, "spec": {}}))
    operator.wait_for("slow handler started")
    started = time.monotonic()
    assert operator.stop(signal.SIGTERM) == 0
    assert time.monotonic() - started < 15


def greet_with_login(namespace: str, tmp_path: Path, login: str, name: str) -> str:
    """Run an operator whose login handler has the body `login` (it may read the admin's
    token file, the server and its CA from `ADMIN_TOKEN_FILE`, `SERVER`, `CA_PATH`) until it
    greets a new object `name`; the operator's output. (`attempts` is a list for the login's
    own use.)"""
    pki = Path(os.environ["KUBECONFIG"]).parent / "pki"
    server = json.loads(Path(os.environ["KUBECONFIG"]).read_text())["clusters"][0]["cluster"]["server"]
    body = textwrap.indent(textwrap.dedent(login).strip(), " " * 4)
    script = write_script(tmp_path, "\n".join([
        "import os", "import kopf", "", "attempts = []", "",
        "@kopf.on.login()", "def login(logger, **_):", body, "",
        "@kopf.on.create('greetings')", "def hello(name, logger, **_):", "    logger.info(f'hello {name}')", ""]))
    env = {"ADMIN_TOKEN_FILE": str(pki / "admin.token"), "SERVER": server, "CA_PATH": str(pki / "ca.crt")}
    operator = OperatorProcess(["run", "-n", namespace, str(script)], cwd=tmp_path, env=env)
    try:
        kubectl("create", "-f", "-", input=json.dumps({
            "apiVersion": "demo.kopf.dev/v1", "kind": "Greeting",
            "metadata": {"name": name, "namespace": namespace}, "spec": {}}))
        operator.wait_for(f"hello {name}")
    finally:
        operator.stop()
    return operator.output


@pytest.mark.parametrize("tls", ["insecure=True", "ca_data=open(os.environ['CA_PATH'], 'rb').read()"])
def test_a_logins_tls_insecure_or_with_an_inline_ca(crd: None, namespace: str, tmp_path: Path, tls: str) -> None:
    greet_with_login(namespace, tmp_path, f"""
        with open(os.environ['ADMIN_TOKEN_FILE']) as f:
            token = f.read().strip()
        return kopf.ConnectionInfo(server=os.environ['SERVER'], token=token, {tls})
    """, "t1")


def test_relogin_when_the_server_refuses_the_credentials(crd: None, namespace: str, tmp_path: Path) -> None:
    pki = Path(os.environ["KUBECONFIG"]).parent / "pki"
    output = greet_with_login(namespace, tmp_path, """
        attempts.append(1)
        # The first token is refused (as an expired one would be); then the real one.
        with open(os.environ['ADMIN_TOKEN_FILE']) as f:
            token = 'expired-s3cr3t' if len(attempts) == 1 else f.read().strip()
        logger.info(f"login attempt {len(attempts)}")
        return kopf.ConnectionInfo(server=os.environ['SERVER'], ca_path=os.environ['CA_PATH'], token=token)
    """, "l1")
    assert "login attempt 1" in output and "login attempt 2" in output
    assert "Re-authentication has been initiated." in output
    assert "Re-authentication has finished." in output
    assert "expired-s3cr3t" not in output and (pki / "admin.token").read_text().strip() not in output
