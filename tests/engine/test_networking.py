"""How the operator talks to the API, as Kopf's settings and credentials say: proxies, timeouts,
retried requests, expiring credentials, streamed listings, CRD scanning, and Events' retries."""

from __future__ import annotations

import json
import os
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from support.audit import AuditLog
from support.cluster import apply, kubectl
from support.forwarding import pipe
from support.operators import OperatorProcess, eventually, get, write_script
from support.webhooks import validating_webhook

AGENT = "kopf-rs/"


def greeting(name: str, namespace: str) -> str:
    return json.dumps({"apiVersion": "demo.kopf.dev/v1", "kind": "Greeting",
                       "metadata": {"name": name, "namespace": namespace}, "spec": {}})


class ConnectProxy:
    """An HTTP CONNECT proxy on loopback that records where it was asked to connect; with
    `stall`, a server that accepts connections and never answers anything."""

    def __init__(self, *, stall: bool = False) -> None:
        self.stall = stall
        self.targets: list[str] = []
        self.server = socket.create_server(("127.0.0.1", 0))
        self.port = self.server.getsockname()[1]
        self.held: list[socket.socket] = []
        threading.Thread(target=self._accept, daemon=True).start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self.server.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(client,), daemon=True).start()

    def _serve(self, client: socket.socket) -> None:
        if self.stall:
            self.held.append(client)  # never answered, never closed
            return
        head = b""
        while b"\r\n\r\n" not in head:
            chunk = client.recv(4096)
            if not chunk:
                client.close()
                return
            head += chunk
        method, target, _ = head.split(b"\r\n")[0].decode().split(" ", 2)
        if method != "CONNECT":
            client.sendall(b"HTTP/1.1 405 Method Not Allowed\r\nContent-Length: 0\r\n\r\n")
            client.close()
            return
        self.targets.append(target)
        host, port = target.rsplit(":", 1)
        upstream = socket.create_connection((host, int(port)))
        client.sendall(b"HTTP/1.1 200 Connection established\r\n\r\n")
        threading.Thread(target=pipe, args=(upstream, client), daemon=True).start()
        pipe(client, upstream)

    def close(self) -> None:
        self.server.close()
        for held in self.held:
            held.close()


@pytest.fixture()
def proxy() -> Iterator[ConnectProxy]:
    proxy = ConnectProxy()
    yield proxy
    proxy.close()


def kubeconfig_with(tmp_path: Path, namespace: str | None = None, **cluster: Any) -> Path:
    """The test cluster's kubeconfig with some of the cluster's fields (or the context's
    namespace) changed."""
    config = json.loads(Path(os.environ["KUBECONFIG"]).read_text())
    config["clusters"][0]["cluster"].update(cluster)
    if namespace is not None:
        config["contexts"][0]["context"]["namespace"] = namespace
    path = tmp_path / "kubeconfig"
    path.write_text(json.dumps(config))
    return path


def events(namespace: str, reason: str) -> list[dict[str, Any]]:
    """The Kubernetes Events of this reason in the namespace."""
    items = json.loads(kubectl("get", "events", "-n", namespace, "-o", "json"))["items"]
    return [event for event in items if event["reason"] == reason]


GREETER = """
    import kopf

    @kopf.on.startup()
    def configure(settings, **_):
        {settings}

    @kopf.on.create('greetings')
    def greet(name, logger, **_):
        logger.info(f"greeted {{name}}")
"""


def test_a_kubeconfigs_proxy_url_carries_every_request(
        crd: None, namespace: str, tmp_path: Path, proxy: ConnectProxy) -> None:
    kubeconfig = kubeconfig_with(tmp_path, **{"proxy-url": proxy.url})
    script = write_script(tmp_path, GREETER.format(settings="pass"))
    operator = OperatorProcess(["run", "-n", namespace, str(script)], cwd=tmp_path,
                               env={"KUBECONFIG": str(kubeconfig), "HTTPS_PROXY": "", "NO_PROXY": ""})
    try:
        kubectl("create", "-f", "-", input=greeting("p1", namespace))
        operator.wait_for(r"greeted p1")
    finally:
        operator.stop()
    server = json.loads(kubeconfig.read_text())["clusters"][0]["cluster"]["server"]
    assert proxy.targets and set(proxy.targets) == {server.removeprefix("https://")}


@pytest.mark.parametrize("trust_env, no_proxy, proxied", [
    (False, "", False),  # as Kopf: the environment is ignored unless trusted
    (True, "", True),
    (True, "example.com,127.0.0.1", False),  # NO_PROXY exempts the server
])
def test_the_environments_proxy_only_when_trusted(crd: None, namespace: str, tmp_path: Path, proxy: ConnectProxy,
                                                  trust_env: bool, no_proxy: str, proxied: bool) -> None:
    script = write_script(tmp_path, GREETER.format(settings=f"settings.networking.trust_env = {trust_env}"))
    operator = OperatorProcess(["run", "-n", namespace, str(script)], cwd=tmp_path,
                               env={"HTTPS_PROXY": proxy.url, "NO_PROXY": no_proxy})
    try:
        kubectl("create", "-f", "-", input=greeting("p2", namespace))
        operator.wait_for(r"greeted p2")
    finally:
        operator.stop()
    assert bool(proxy.targets) == proxied


def test_a_stalled_server_times_out_and_is_retried_with_the_backoffs(tmp_path: Path) -> None:
    stalled = ConnectProxy(stall=True)
    kubeconfig = kubeconfig_with(tmp_path, server=f"https://127.0.0.1:{stalled.port}")
    script = write_script(tmp_path, GREETER.format(
        settings="settings.networking.request_timeout = 1.5; settings.networking.error_backoffs = [0.2]"))
    started = time.monotonic()
    operator = OperatorProcess(["run", "-A", str(script)], cwd=tmp_path, env={"KUBECONFIG": str(kubeconfig)})
    try:
        exit_code = operator.process.wait(timeout=60)
    finally:
        operator.stop()
        stalled.close()
    elapsed = time.monotonic() - started
    assert exit_code == 1
    assert "Request attempt #1/2 failed; will retry" in operator.output
    assert "Request attempt #2/2 failed; escalating" in operator.output
    assert "no response within 1.5 s (settings.networking.request_timeout)" in operator.output
    assert elapsed < 30  # two attempts of 1.5 s, not the default 5 minutes


def watch_requests(audit: AuditLog, namespace: str) -> list[dict[str, Any]]:
    return [r for r in audit.requests(agent=AGENT, namespace=namespace)
            if r["verb"] == "watch" and r["objectRef"].get("resource") == "greetings"]


def test_the_watch_client_timeout_reopens_the_stream_from_where_it_was(
        crd: None, namespace: str, tmp_path: Path) -> None:
    audit = AuditLog()
    script = write_script(tmp_path, GREETER.format(settings="settings.watching.client_timeout = 2"))
    operator = OperatorProcess(["run", "-n", namespace, str(script)], cwd=tmp_path)
    try:
        time.sleep(8)
        kubectl("create", "-f", "-", input=greeting("t1", namespace))
        operator.wait_for(r"greeted t1")
    finally:
        operator.stop()
    watches = watch_requests(audit, namespace)
    assert len(watches) >= 3, [w["requestURI"] for w in watches]
    lists = [r for r in audit.requests(agent=AGENT, namespace=namespace)
             if r["verb"] == "list" and r["objectRef"].get("resource") == "greetings"]
    assert len(lists) == 1  # re-opened from its version, not re-listed
    assert "resourceVersion=" in watches[-1]["requestURI"]


def test_initial_streaming_lists_in_the_watch_stream(crd: None, namespace: str, tmp_path: Path) -> None:
    kubectl("create", "-f", "-", input=greeting("before", namespace))
    audit = AuditLog()
    script = write_script(tmp_path, """
        import kopf

        @kopf.on.startup()
        def configure(settings, **_):
            settings.watching.initial_streaming = True

        @kopf.on.event('greetings')
        def seen(type, name, logger, **_):
            logger.info(f"event {type} {name}")
    """)
    operator = OperatorProcess(["run", "-n", namespace, str(script)], cwd=tmp_path)
    try:
        operator.wait_for(r"event None before")
        kubectl("create", "-f", "-", input=greeting("after", namespace))
        operator.wait_for(r"event ADDED after")
    finally:
        operator.stop()
    assert "event ADDED before" not in operator.output
    requests = [r for r in audit.requests(agent=AGENT, namespace=namespace)
                if r["objectRef"].get("resource") == "greetings"]
    assert [r["verb"] for r in requests if r["verb"] == "list"] == []
    assert "sendInitialEvents=true" in requests[0]["requestURI"]
    assert "resourceVersionMatch=NotOlderThan" in requests[0]["requestURI"]


def crd_requests(audit: AuditLog) -> list[str]:
    return [r["verb"] for r in audit.requests(agent=AGENT)
            if r.get("objectRef", {}).get("resource") == "customresourcedefinitions" and r["verb"] in ("list", "watch")]


@pytest.mark.parametrize("disabled", [False, True])
def test_scanning_disabled_leaves_the_crds_unwatched(
        crd: None, namespace: str, tmp_path: Path, disabled: bool) -> None:
    audit = AuditLog()
    script = write_script(tmp_path, GREETER.format(settings=f"settings.scanning.disabled = {disabled}"))
    operator = OperatorProcess(["run", "-n", namespace, str(script)], cwd=tmp_path)
    try:
        kubectl("create", "-f", "-", input=greeting("s1", namespace))
        operator.wait_for(r"greeted s1")
    finally:
        operator.stop()
    assert bool(crd_requests(audit)) == (not disabled)


def discovered_groups(audit: AuditLog) -> set[str]:
    """The API groups the operator asked for the resources of (`/apis/GROUP/VERSION`)."""
    paths = [r["requestURI"].split("?")[0] for r in audit.requests(agent=AGENT)
             if r["verb"] == "get" and not r.get("objectRef")]
    return {path.split("/")[2] for path in paths if path.startswith("/apis/") and path.count("/") == 3}


@pytest.mark.parametrize("selector, everything", [
    ("'greetings.demo.kopf.dev'", False),  # the group is named: only it (and the engine's own)
    ("'demo.kopf.dev', 'v1', 'greetings'", False),
    ("'greetings'", True),  # any group may have "greetings": all are asked, as in Kopf
])
def test_discovery_asks_only_for_the_groups_that_handlers_name(
        crd: None, namespace: str, tmp_path: Path, selector: str, everything: bool) -> None:
    audit = AuditLog()
    script = write_script(tmp_path, f"""
        import kopf

        @kopf.on.create({selector})
        def greet(name, logger, **_):
            logger.info(f"greeted {{name}}")
    """)
    operator = OperatorProcess(["run", "-n", namespace, str(script)], cwd=tmp_path)
    try:
        kubectl("create", "-f", "-", input=greeting("d1", namespace))
        operator.wait_for(r"greeted d1")
    finally:
        operator.stop()
    groups = discovered_groups(audit)
    assert {"demo.kopf.dev", "apiextensions.k8s.io"} <= groups, groups
    assert ("apps" in groups) == everything, groups


def test_expired_credentials_are_renewed_before_a_request(crd: None, namespace: str, tmp_path: Path) -> None:
    audit = AuditLog()
    script = write_script(tmp_path, """
        import dataclasses, datetime
        import kopf

        logins = []

        @kopf.on.login()
        def login(**kwargs):
            logins.append(1)
            info = kopf.login_with_kubeconfig(**kwargs)
            expiration = datetime.datetime.now(datetime.UTC) + datetime.timedelta(seconds=3)
            kwargs['logger'].info(f"login #{len(logins)}")
            return dataclasses.replace(info, expiration=expiration.replace(tzinfo=None))

        @kopf.on.create('greetings')
        def greet(name, logger, **_):
            logger.info(f"greeted {name}")
    """)
    operator = OperatorProcess(["run", "-n", namespace, str(script)], cwd=tmp_path)
    try:
        operator.wait_for(r"login #1")
        time.sleep(4)
        kubectl("create", "-f", "-", input=greeting("e1", namespace))
        operator.wait_for(r"greeted e1")
        operator.wait_for(r"login #2")  # at the first request after the expiration: the patch
        eventually(lambda: "kopf.zalando.org/last-handled-configuration"
                   in get("greeting", "e1", namespace)["metadata"].get("annotations", {}), what="the patch")
    finally:
        operator.stop()
    refused = [r for r in audit.requests(agent=AGENT) if r.get("responseStatus", {}).get("code") == 401]
    assert refused == []  # renewed ahead, not after a refusal


@pytest.fixture()
def refusing_events(tmp_path: Path, namespace: str) -> Iterator[list[str]]:
    """Refuse the first two Events created in the namespace."""
    seen: list[str] = []

    def decide(request: dict[str, Any]) -> tuple[bool, str]:
        seen.append(request["object"].get("reason", ""))
        return len(seen) > 2, "not yet"

    rule = {"apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE"], "resources": ["events"]}
    with validating_webhook(tmp_path, f"refuse-events-{namespace}", decide, rule=rule, namespace=namespace):
        # The configuration takes a moment to be in force: probe it with a dry-run.
        probe = json.dumps({"apiVersion": "v1", "kind": "Event", "metadata": {"generateName": "probe-"},
                            "involvedObject": {"kind": "Pod", "name": "x", "namespace": namespace},
                            "reason": "Probe", "message": "probe"})
        eventually(lambda: kubectl("create", "-n", namespace, "--dry-run=server", "-f", "-", input=probe,
                                   check=False) is not None and "Probe" in seen, what="the webhook in force")
        seen.clear()
        yield seen


def test_refused_event_posts_are_retried_with_their_backoffs(
        crd: None, namespace: str, tmp_path: Path, refusing_events: list[str]) -> None:
    script = write_script(tmp_path, """
        import kopf

        @kopf.on.create('greetings')
        def greet(body, **_):
            kopf.info(body, reason='Greeted', message='hello', backoffs=[0.3, 0.3, 0.3])
    """)
    operator = OperatorProcess(["run", "-n", namespace, str(script)], cwd=tmp_path)
    try:
        kubectl("create", "-f", "-", input=greeting("v1", namespace))
        found = eventually(lambda: events(namespace, "Greeted"), what="the Event after two refusals")
    finally:
        operator.stop()
    assert found[0]["message"] == "hello"
    assert refusing_events[:3] == ["Greeted"] * 3
    assert f"Request attempt #1/4 failed; will retry: POST /api/v1/namespaces/{namespace}/events" in operator.output
    assert "Failed to post an event" not in operator.output


def test_events_of_cluster_scoped_objects_go_to_the_logins_namespace(
        cluster: dict[str, str], namespace: str, tmp_path: Path) -> None:
    kubeconfig = kubeconfig_with(tmp_path, namespace=namespace)
    script = write_script(tmp_path, f"""
        import kopf

        @kopf.on.create('namespaces', labels={{'kopf-rs-events': '{namespace}'}})
        def seen(body, **_):
            kopf.info(body, reason='Noticed', message='a namespace')
    """)
    other = f"{namespace}-other"
    operator = OperatorProcess(["run", "-A", str(script)], cwd=tmp_path, env={"KUBECONFIG": str(kubeconfig)})
    try:
        apply({"apiVersion": "v1", "kind": "Namespace",
               "metadata": {"name": other, "labels": {"kopf-rs-events": namespace}}})
        found = eventually(lambda: events(namespace, "Noticed"), what="the Event in the login's namespace")
    finally:
        operator.stop()
        kubectl("delete", "namespace", other, "--wait=false", check=False)
    assert found[0]["involvedObject"]["kind"] == "Namespace"
    assert found[0]["involvedObject"]["name"] == other
    assert found[0]["involvedObject"]["namespace"] == namespace
