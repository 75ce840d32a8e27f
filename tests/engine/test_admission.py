"""Admission webhooks (`@kopf.on.validate`, `@kopf.on.mutate`) on the real control plane:
the operator's server (a certificate generated in the core) called by the apiserver through
the webhook configurations that the operator manages; rejections with the handler's message
and code, warnings, mutations in the stored object, dry runs, the status subresource, the
requesting user; bad requests answered with HTTP errors while the server goes on."""

from __future__ import annotations

import base64
import json
import ssl
import subprocess
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from support.cluster import kubectl, kubectl_json
from support.metrics import scrape, value
from support.network import free_port
from support.operators import OperatorProcess, get, write_script

HANDLERS = """
import kopf

@kopf.on.startup()
def configure(settings, **_):
    settings.admission.server = kopf.WebhookServer(cadump='ca.pem', port=0)
    settings.admission.managed = MANAGED

@kopf.on.validate('greetings', labels={'admitted': 'yes'})
def check(spec, dryrun, userinfo, warnings, **_):
    warnings.append(f"asked by {userinfo['username']}, dry run: {dryrun}")
    if spec.get('mood') == 'grumpy':
        raise kopf.AdmissionError("No grumpy greetings, please.", code=418)

@kopf.on.validate('greetings', labels={'admitted': 'yes'}, subresource='status')
def check_status(status, subresource, **_):
    if status.get('mood') == 'grumpy':
        raise kopf.AdmissionError(f"No grumpy {subresource}.")

@kopf.on.mutate('greetings', labels={'admitted': 'yes'}, operations=['CREATE'], persistent=True)
def stamp(patch, memo, **_):
    patch.spec['stamp'] = 'stamped'
    patch.metadata.setdefault('labels', {})['mutated'] = 'yes'
"""


@pytest.fixture()
def managed(namespace: str) -> Iterator[str]:
    name = f"{namespace}.kopf.dev"
    yield name
    kubectl("delete", "validatingwebhookconfigurations,mutatingwebhookconfigurations", name, "--ignore-not-found")


def operator(tmp_path: Path, namespace: str, managed: str, source: str = HANDLERS,
             options: tuple[str, ...] = ()) -> OperatorProcess:
    script = write_script(tmp_path, f"MANAGED = {managed!r}\n" + source)
    process = OperatorProcess(["run", "-n", namespace, "--standalone", "--verbose", *options, str(script)],
                              cwd=tmp_path)
    process.wait_for(r"Reconfiguring the mutating webhook", timeout=30)
    return process


def greeting(name: str, namespace: str, **spec: Any) -> str:
    return json.dumps({"apiVersion": "demo.kopf.dev/v1", "kind": "Greeting",
                       "metadata": {"name": name, "namespace": namespace, "labels": {"admitted": "yes"}},
                       "spec": spec})


def create(manifest: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["kubectl", "create", "-f", "-", *args], input=manifest, capture_output=True,
                          text=True, timeout=30, check=False)


def test_requests_are_admitted_rejected_and_mutated(crd: None, namespace: str, managed: str,
                                                    tmp_path: Path) -> None:
    port = free_port()
    process = operator(tmp_path, namespace, managed, options=("--metrics", f"127.0.0.1:{port}"))
    try:
        refused = create(greeting("grumpy", namespace, mood="grumpy"))
        assert refused.returncode != 0
        assert 'denied the request: No grumpy greetings, please.' in refused.stderr, refused.stderr
        me = kubectl("auth", "whoami", "-o", "jsonpath={.status.userInfo.username}")
        assert f"Warning: asked by {me}, dry run: False" in refused.stderr, refused.stderr

        dry = create(greeting("dry", namespace, mood="happy"), "--dry-run=server")
        assert dry.returncode == 0, dry.stderr
        assert "dry run: True" in dry.stderr
        assert not kubectl("get", "greetings", "-n", namespace, "-o", "name")

        created = create(greeting("happy", namespace, mood="happy"))
        assert created.returncode == 0, created.stderr
        body = get("greeting", "happy", namespace)
        assert body["spec"] == {"mood": "happy", "stamp": "stamped"}
        assert body["metadata"]["labels"] == {"admitted": "yes", "mutated": "yes"}

        status = subprocess.run(
            ["kubectl", "patch", "greeting", "happy", "-n", namespace, "--subresource=status", "--type=merge",
             "-p", json.dumps({"status": {"mood": "grumpy"}})], capture_output=True, text=True, check=False)
        assert status.returncode != 0
        assert "denied the request: No grumpy status." in status.stderr, status.stderr
        assert "Webhook 'check_status' failed permanently: No grumpy status." in process.output

        # The reviews in the metrics: by webhook and outcome (an AdmissionError is permanent).
        samples = scrape(port)
        reviews = "kopf_admission_requests_total"
        assert value(samples, reviews, handler="check", kind="admission", outcome="permanent") == 1
        assert value(samples, reviews, handler="check", outcome="success") == 2  # dry, happy
        assert value(samples, reviews, handler="check_status", outcome="permanent") == 1
        assert value(samples, reviews, handler="stamp", outcome="success") >= 2
        assert value(samples, "kopf_handler_calls_total", kind="admission") == 0
    finally:
        process.stop()


def test_managed_configurations_follow_the_handlers(crd: None, namespace: str, managed: str,
                                                    tmp_path: Path) -> None:
    process = operator(tmp_path, namespace, managed)
    try:
        validating = kubectl_json("get", "validatingwebhookconfiguration", managed, "-o", "json")
        mutating = kubectl_json("get", "mutatingwebhookconfiguration", managed, "-o", "json")
        hooks = {hook["name"]: hook for hook in validating["webhooks"]}
        assert sorted(hooks) == sorted([f"check.{managed}", f"check-status.{managed}"])
        check = hooks[f"check.{managed}"]
        assert check["rules"] == [{"apiGroups": ["demo.kopf.dev"], "apiVersions": ["v1"],
                                   "resources": ["greetings"], "operations": ["*"], "scope": "*"}]
        assert check["objectSelector"] == {"matchExpressions": [
            {"key": "admitted", "operator": "In", "values": ["yes"]}]}
        assert check["failurePolicy"] == "Fail" and check["sideEffects"] == "None"
        assert check["clientConfig"]["url"].endswith("/check")
        assert hooks[f"check-status.{managed}"]["rules"][0]["resources"] == ["greetings/status"]
        ca = base64.b64decode(check["clientConfig"]["caBundle"])
        assert ca == (tmp_path / "ca.pem").read_bytes()  # cadump= writes the CA it reports
        [stamp] = mutating["webhooks"]
        assert stamp["name"] == f"stamp.{managed}"
        assert stamp["rules"][0]["operations"] == ["CREATE"]
    finally:
        assert process.stop() == 0
    assert "Cleaning up the admission webhook" in process.output
    validating = kubectl_json("get", "validatingwebhookconfiguration", managed, "-o", "json")
    mutating = kubectl_json("get", "mutatingwebhookconfiguration", managed, "-o", "json")
    assert validating.get("webhooks", []) == []
    assert [hook["name"] for hook in mutating["webhooks"]] == [f"stamp.{managed}"]  # persistent

    # Another operator with other handlers: the configurations follow.
    fewer = HANDLERS.split("@kopf.on.validate('greetings', labels={'admitted': 'yes'}, subresource=")[0]
    process = operator(tmp_path, namespace, managed, source=fewer)
    try:
        validating = kubectl_json("get", "validatingwebhookconfiguration", managed, "-o", "json")
        assert [hook["name"] for hook in validating["webhooks"]] == [f"check.{managed}"]
    finally:
        process.stop()


def post(url: str, data: bytes, ca: Path) -> tuple[int, str]:
    context = ssl.create_default_context(cafile=str(ca))
    request = urllib.request.Request(url, data=data, method="POST")
    try:
        with urllib.request.urlopen(request, context=context, timeout=10) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()


def test_bad_requests_get_http_errors_and_the_server_goes_on(crd: None, namespace: str, managed: str,
                                                            tmp_path: Path) -> None:
    process = operator(tmp_path, namespace, managed)
    try:
        validating = kubectl_json("get", "validatingwebhookconfiguration", managed, "-o", "json")
        url = validating["webhooks"][0]["clientConfig"]["url"]
        ca = tmp_path / "ca.pem"  # the server's certificate verifies against the dumped CA
        assert post(url, b"{not json", ca)[0] == 400
        assert post(url, b'{"request": {}}', ca) == (400, "The admission request names no resource.")
        unknown = {"request": {"uid": "1", "resource": {"group": "x", "version": "v1", "resource": "y"}}}
        status, text = post(url, json.dumps(unknown).encode(), ca)
        assert status == 404 and "The specified resource has no handlers" in text
        review = {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {
            "uid": "u-2", "operation": "CREATE", "userInfo": {"username": "tester"},
            "resource": {"group": "demo.kopf.dev", "version": "v1", "resource": "greetings"},
            "object": json.loads(greeting("x", namespace, mood="grumpy"))}}
        status, text = post(url, json.dumps(review).encode(), ca)
        assert status == 200
        answer = json.loads(text)["response"]
        assert answer["uid"] == "u-2" and answer["allowed"] is False
        assert answer["status"] == {"message": "No grumpy greetings, please.", "code": 418}
        assert answer["warnings"] == ["asked by tester, dry run: False"]
        assert process.process.poll() is None
    finally:
        process.stop()


def test_admission_handlers_without_a_server_fail_at_start(crd: None, namespace: str, tmp_path: Path) -> None:
    script = write_script(tmp_path, """
        import kopf

        @kopf.on.validate('greetings')
        def check(**_):
            pass
    """)
    process = OperatorProcess(["run", "-n", namespace, "--standalone", str(script)], cwd=tmp_path)
    code = process.process.wait(timeout=30)
    process.stop()
    assert code != 0
    assert "no admission server/tunnel is configured in `settings.admission.server`" in process.output



def make_certificate(directory: Path, password: str | None = None) -> tuple[Path, Path]:
    """A self-signed certificate for localhost by `openssl` (the key encrypted if a password)."""
    cert, key = directory / "cert.pem", directory / "key.pem"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2",
                    "-subj", "/CN=localhost", "-addext", "subjectAltName=DNS:localhost,IP:127.0.0.1",
                    "-keyout", str(key), "-out", str(cert)], check=True, capture_output=True)
    if password is not None:
        plain = key.rename(directory / "plain.pem")
        subprocess.run(["openssl", "pkcs8", "-topk8", "-v2", "aes-256-cbc", "-in", str(plain),
                        "-out", str(key), "-passout", f"pass:{password}"], check=True, capture_output=True)
        plain.unlink()
    return cert, key


OWN_CERTIFICATE = """
import kopf

@kopf.on.startup()
def configure(settings, **_):
    settings.admission.server = kopf.WebhookServer(certfile='cert.pem', pkeyfile='key.pem', password=PASSWORD)
    settings.admission.managed = MANAGED

@kopf.on.validate('greetings', labels={'admitted': 'yes', 'tier': kopf.PRESENT}, operations=['UPDATE'],
                  side_effects=True, ignore_failures=True)
def check(spec, **_):
    if spec.get('mood') == 'grumpy':
        raise kopf.AdmissionError("No grumpy greetings, please.", code=418)

@kopf.on.mutate('greetings', subresource='*', id='stamp/it', persistent=True)
def stamp(patch, **_):
    pass
"""


def configurations(managed: str) -> dict[str, list[dict[str, Any]]]:
    """The managed webhooks, without what differs between two servers (port, CA)."""
    found = {}
    for kind in ("validatingwebhookconfiguration", "mutatingwebhookconfiguration"):
        hooks = kubectl_json("get", kind, managed, "-o", "json").get("webhooks", [])
        for hook in hooks:
            hook["clientConfig"]["url"] = hook["clientConfig"]["url"].rsplit(":", 1)[-1].split("/", 1)[-1]
            hook["clientConfig"].pop("caBundle")
        found[kind] = hooks
    return found


def test_configurations_as_kopf_writes_them_with_the_operators_own_certificate(
        crd: None, namespace: str, managed: str, tmp_path: Path, reference_kopf: Path) -> None:
    written = {}
    for engine, kopf, password in (("kopf", reference_kopf, None), ("ours", None, "s3cret")):
        workdir = tmp_path / engine
        workdir.mkdir()
        make_certificate(workdir, password)
        script = write_script(workdir, f"MANAGED = {managed!r}\nPASSWORD = {password!r}\n" + OWN_CERTIFICATE)
        process = OperatorProcess(["run", "-n", namespace, "--standalone", "--verbose", str(script)],
                                  cwd=workdir, kopf=kopf)
        try:
            process.wait_for(r"Reconfiguring the mutating webhook", timeout=60)
            written[engine] = configurations(managed)
            if engine == "ours":  # the apiserver trusts it, and the handler rejects through it
                manifest = json.loads(greeting("g", namespace, mood="happy"))
                manifest["metadata"]["labels"]["tier"] = "web"
                assert create(json.dumps(manifest)).returncode == 0
                refused = subprocess.run(
                    ["kubectl", "patch", "greeting", "g", "-n", namespace, "--type=merge",
                     "-p", json.dumps({"spec": {"mood": "grumpy"}})], capture_output=True, text=True)
                assert "denied the request: No grumpy greetings, please." in refused.stderr, refused.stderr
        finally:
            process.stop()
        kubectl("delete", "validatingwebhookconfigurations,mutatingwebhookconfigurations", managed)
    assert written["ours"] == written["kopf"]


CUSTOM_SERVER = """
import asyncio, json, kopf

class Custom:
    async def __call__(self, fn):
        review = {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {
            "uid": "u-3", "operation": "CREATE", "userInfo": {"username": "custom"},
            "resource": {"group": "demo.kopf.dev", "version": "v1", "resource": "greetings"},
            "object": {"metadata": {"name": "x", "labels": {"admitted": "yes"}}, "spec": {"mood": "grumpy"}}}}
        response = await fn(review, webhook='check', headers={'X-Test': 'yes'},
                            sslpeer={'subject': [[['commonName', 'peer']]]})
        print("custom answer:", json.dumps(response["response"], sort_keys=True), flush=True)
        try:
            await fn({"request": {"resource": {"group": "x", "version": "v1", "resource": "y"}}})
        except Exception as e:
            print(f"custom error: {type(e).__name__}: {e}", flush=True)
        yield {"url": "https://example.invalid/hooks"}
        await asyncio.Event().wait()

@kopf.on.startup()
def configure(settings, **_):
    settings.admission.server = Custom()

@kopf.on.validate('greetings')
def check(spec, headers, sslpeer, warnings, **_):
    warnings.append(f"{headers.get('X-Test')} {sslpeer['subject'][0][0][1]}")
    if spec.get('mood') == 'grumpy':
        raise kopf.AdmissionError("No grumpy greetings, please.", code=418)
"""


def test_a_custom_server_calls_the_webhookfn(crd: None, namespace: str, tmp_path: Path) -> None:
    script = write_script(tmp_path, CUSTOM_SERVER)
    process = OperatorProcess(["run", "-n", namespace, "--standalone", str(script)], cwd=tmp_path)
    try:
        output = process.wait_for(r"custom error:", timeout=30)
    finally:
        process.stop()
    answer = json.loads(output.split("custom answer: ", 1)[1].splitlines()[0])
    assert answer == {"allowed": False, "uid": "u-3", "warnings": ["yes peer"],
                      "status": {"code": 418, "message": "No grumpy greetings, please."}}
    assert "custom error: UnknownResourceError: The specified resource has no handlers" in output


def test_a_configured_server_runs_without_admission_handlers(crd: None, namespace: str, managed: str,
                                                             tmp_path: Path) -> None:
    source = HANDLERS.split("@kopf.on.validate(")[0] + """
@kopf.on.event('greetings')
def watch(**_):
    pass
"""
    process = operator(tmp_path, namespace, managed, source=source)  # as Kopf: served and managed
    try:
        for kind in ("validatingwebhookconfiguration", "mutatingwebhookconfiguration"):
            assert kubectl_json("get", kind, managed, "-o", "json").get("webhooks", []) == []
        assert (tmp_path / "ca.pem").exists()
    finally:
        assert process.stop() == 0
