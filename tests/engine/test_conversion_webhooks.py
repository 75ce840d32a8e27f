"""CRD version conversion (`@kopf.on.convert`) on the real control plane: the example's Contact
(examples/conversion: one `name` in v1, `first` and `last` in v2), its CRD's `spec.conversion`
pointed at the operator's webhook server by the operator; objects written in one version and
read in the other (one by one and as a list of 100), failures shown by kubectl with the
handler's message, what a conversion may not change refused, versions without a way between
them refused at start, the webhook following the server's certificate (and set again when
changed by others), and a storage-version migration. Kopf has no conversion webhooks: nothing
to compare with side by side."""

from __future__ import annotations

import base64
import json
import shutil
import subprocess
from pathlib import Path

from support.cluster import EXAMPLES, kubectl, kubectl_json
from support.contacts import CRD, RECONFIGURED, certificate, contact, conversion, create, read, read_ok
from support.metrics import scrape, value
from support.network import free_port
from support.operators import OperatorProcess, eventually, write_script


def example(tmp_path: Path, namespace: str, *options: str) -> OperatorProcess:
    script = tmp_path / "operator.py"
    shutil.copy(EXAMPLES / "conversion" / "operator.py", script)
    process = OperatorProcess(["run", "-n", namespace, "--standalone", "--verbose", *options, str(script)],
                              cwd=tmp_path)
    process.wait_for(RECONFIGURED)
    return process


def test_objects_are_written_and_read_in_either_version(contacts: None, namespace: str, tmp_path: Path) -> None:
    port = free_port()
    operator = example(tmp_path, namespace, "--metrics", f"127.0.0.1:{port}")
    try:
        webhook = conversion()
        assert webhook["strategy"] == "Webhook"
        assert webhook["webhook"]["conversionReviewVersions"] == ["v1"]
        assert webhook["webhook"]["clientConfig"]["url"].endswith(f"/conversion/{CRD}")
        assert webhook["webhook"]["clientConfig"]["caBundle"]

        # Written as v1 (stored as it is), read as v2; written as v2, stored and read as v1.
        create(contact("ada", namespace, name="Ada Lovelace", email="ada@example.com"),
               contact("alan", namespace, "v2", first="Alan", last="Turing"))
        ada = read_ok("ada", namespace, "v2")
        assert ada["apiVersion"] == "demo.kopf.dev/v2"
        assert ada["spec"] == {"first": "Ada", "last": "Lovelace", "email": "ada@example.com"}
        assert ada["metadata"]["name"] == "ada" and ada["metadata"]["uid"]
        alan = read_ok("alan", namespace, "v1")
        assert alan["apiVersion"] == "demo.kopf.dev/v1" and alan["spec"] == {"name": "Alan Turing"}
        assert read_ok("alan", namespace, "v2")["spec"] == {"first": "Alan", "last": "Turing"}

        # A list: all objects that need converting come in one review.
        create(*[contact(f"c{i:03}", namespace, name=f"First{i} Last{i}") for i in range(100)])
        listed = kubectl_json("get", "contacts.v2.demo.kopf.dev", "-n", namespace)["items"]
        assert len(listed) == 102
        assert all(item["apiVersion"] == "demo.kopf.dev/v2" for item in listed)
        by_name = {item["metadata"]["name"]: item["spec"] for item in listed}
        assert by_name["c042"] == {"first": "First42", "last": "Last42"}

        metrics = scrape(port)
        converted = value(metrics, "kopf_conversions_total", resource="contacts.v2.demo.kopf.dev", outcome="success")
        assert converted >= 101, metrics
        assert value(metrics, "kopf_conversion_duration_seconds_count") >= 2, metrics
    finally:
        operator.stop()
    assert "Traceback" not in operator.output


STEPS = """
import kopf

@kopf.on.startup()
def configure(settings, **_):
    settings.admission.server = kopf.WebhookServer(addr='127.0.0.1', host='127.0.0.1')
    settings.conversion.managed = True

@kopf.on.convert('demo.kopf.dev', 'contacts', source='v1', target='v2')
def split(spec, patch, **_):
    if spec['name'] == 'rename me':
        return {'metadata': {'name': 'renamed'}}
    if spec['name'] == 'fail':
        raise ValueError("cannot split this one")
    first, _, last = spec['name'].partition(' ')
    patch.spec['name'] = None
    patch.spec['first'] = first
    patch.spec['last'] = last
    patch.metadata.setdefault('labels', {})['split'] = 'yes'

@kopf.on.convert('contacts.demo.kopf.dev', source='v2', target='v1')
async def join(spec, source, target, **_):
    return {'spec': {'name': f"{spec['first']} {spec['last']}"},
            'metadata': {'annotations': {'converted': f'{source}-{target}'}}}
"""


def test_failures_and_forbidden_changes_are_shown_with_their_reasons(
        contacts: None, namespace: str, tmp_path: Path) -> None:
    operator = OperatorProcess(["run", "-n", namespace, "--standalone", str(write_script(tmp_path, STEPS))],
                               cwd=tmp_path)
    try:
        operator.wait_for(RECONFIGURED)
        create(contact("grace", namespace, name="Grace Hopper"), contact("failing", namespace, name="fail"),
               contact("renaming", namespace, name="rename me"),
               contact("linus", namespace, "v2", first="Linus", last="Torvalds"))
        # The `patch` kwarg (a sync step), labels changed; an async step's returned fields.
        grace = read_ok("grace", namespace, "v2")
        assert grace["spec"] == {"first": "Grace", "last": "Hopper"}
        assert grace["metadata"]["labels"] == {"split": "yes"}
        linus = read_ok("linus", namespace, "v1")
        assert linus["spec"] == {"name": "Linus Torvalds"}
        assert linus["metadata"]["annotations"] == {"converted": "v2-v1"}

        failing = read("failing", namespace, "v2")
        assert failing.returncode != 0
        assert (f"Conversion handler 'split' failed to convert Contact {namespace}/failing from v1 to v2: "
                "cannot split this one") in failing.stderr, failing.stderr
        renaming = read("renaming", namespace, "v2")
        assert renaming.returncode != 0
        assert (f'The conversion of Contact {namespace}/renaming changed metadata.name (from "renaming" to '
                '"renamed"): a conversion may change only the labels and annotations') in renaming.stderr, \
            renaming.stderr
        # A list with a failing object fails as a whole, with the same reason.
        listing = subprocess.run(["kubectl", "get", "contacts.v2.demo.kopf.dev", "-n", namespace],
                                 capture_output=True, text=True, timeout=30, check=False)
        assert listing.returncode != 0 and "cannot split this one" in listing.stderr, listing.stderr
        # The operator goes on: the others still convert.
        assert read_ok("grace", namespace, "v2")["spec"]["first"] == "Grace"
        operator.wait_for(r"ValueError: cannot split this one")  # the traceback in the operator's log
    finally:
        operator.stop()


def test_an_operator_stopped_while_its_crd_settles_exits_at_once(contacts: None, namespace: str,
                                                                 tmp_path: Path) -> None:
    """A stop that comes while the core waits for the CRD to point at the webhook (the watchers
    wait for that) is not lost: the operator exits at once, not after the exit timeout."""
    operator = example(tmp_path, namespace)  # returns as the CRD is being pointed at it
    code = operator.stop(timeout=20)
    assert code == 0, operator.output


def test_versions_without_a_way_between_them_stop_the_operator(contacts: None, namespace: str,
                                                               tmp_path: Path) -> None:
    one_way = STEPS.split("@kopf.on.convert('contacts.demo.kopf.dev', source='v2'")[0]
    operator = OperatorProcess(["run", "-n", namespace, "--standalone", str(write_script(tmp_path, one_way))],
                               cwd=tmp_path)
    code = operator.process.wait(timeout=60)
    operator.stop()
    assert code != 0, operator.output
    assert ("The conversion handlers of contacts.demo.kopf.dev lead nowhere from v2 to v1: every served "
            "version (v1, v2) must lead to every other one") in operator.output, operator.output
    assert conversion().get("strategy") == "None", "nothing was pointed at an operator that did not start"


CERTIFIED = """
import kopf

@kopf.on.startup()
def configure(settings, **_):
    settings.admission.server = kopf.WebhookServer(addr='127.0.0.1', host='127.0.0.1', certfile='server.pem',
                                                   pkeyfile='server.key', file_check_interval=0.5)
    settings.conversion.managed = True
    settings.conversion.cleanup = CLEANUP
""" + STEPS.split("settings.conversion.managed = True\n")[1]


def test_the_crds_conversion_follows_the_server_and_is_kept(contacts: None, namespace: str, tmp_path: Path) -> None:
    first, first_key = certificate(tmp_path, "first")
    second, second_key = certificate(tmp_path, "second")
    shutil.copy(first, tmp_path / "server.pem")
    shutil.copy(first_key, tmp_path / "server.key")
    script = write_script(tmp_path, CERTIFIED.replace("CLEANUP", "False"))
    operator = OperatorProcess(["run", "-n", namespace, "--standalone", str(script)], cwd=tmp_path)
    try:
        operator.wait_for(RECONFIGURED)
        bundle = base64.b64encode(first.read_bytes()).decode()
        assert conversion()["webhook"]["clientConfig"]["caBundle"] == bundle
        create(contact("grace", namespace, name="Grace Hopper"))
        assert read_ok("grace", namespace, "v2")["spec"]["first"] == "Grace"

        # A renewed certificate (as a mounted secret changes): the server restarts with it, and
        # the CRD is pointed at it with the new bundle; reads go on.
        shutil.copy(second, tmp_path / "server.pem")
        shutil.copy(second_key, tmp_path / "server.key")
        bundle = base64.b64encode(second.read_bytes()).decode()
        eventually(lambda: conversion()["webhook"]["clientConfig"]["caBundle"] == bundle, timeout=30,
                   what="the CRD's bundle is the new certificate")
        eventually(lambda: read("grace", namespace, "v2").returncode == 0, timeout=30,
                   what="reads through the restarted server")

        # Taken away by somebody: set again.
        unset = {"spec": {"conversion": {"strategy": "None", "webhook": None}}}
        kubectl("patch", "crd", CRD, "--type=merge", "-p", json.dumps(unset))
        eventually(lambda: conversion().get("strategy") == "Webhook", timeout=30, what="the webhook set again")
    finally:
        operator.stop()
    # On exit it stays (settings.conversion.cleanup is off): the objects stay readable as v2
    # while the next operator starts.
    assert conversion()["strategy"] == "Webhook"


def test_a_storage_version_migration(contacts: None, namespace: str, tmp_path: Path) -> None:
    script = write_script(tmp_path, STEPS.replace("settings.conversion.managed = True",
                                                  "settings.conversion.managed = True\n"
                                                  "    settings.conversion.cleanup = True"))
    operator = OperatorProcess(["run", "-n", namespace, "--standalone", str(script)], cwd=tmp_path)
    try:
        operator.wait_for(RECONFIGURED)
        create(*[contact(f"c{i}", namespace, name=f"First{i} Last{i}") for i in range(5)])
        # v2 becomes the stored version; every object is written again (read and replaced as it
        # is): the API server stores it in v2, converted by the operator.
        kubectl("patch", "crd", CRD, "--type=json", "-p", json.dumps([
            {"op": "replace", "path": "/spec/versions/0/storage", "value": False},
            {"op": "replace", "path": "/spec/versions/1/storage", "value": True}]))
        eventually(lambda: "v2" in kubectl_json("get", "crd", CRD)["status"]["storedVersions"], timeout=30,
                   what="v2 stored")
        listed = kubectl("get", "contacts.v2.demo.kopf.dev", "-n", namespace, "-o", "json")
        kubectl("replace", "-f", "-", input=listed)
        kubectl("patch", "crd", CRD, "--subresource=status", "--type=merge",
                "-p", '{"status": {"storedVersions": ["v2"]}}')
    finally:
        operator.stop()
    # With the cleanup asked for, the webhook is gone on exit (strategy None: versions only
    # relabelled): the objects now read as v2 by themselves, so they are stored in v2.
    eventually(lambda: conversion().get("strategy") == "None", timeout=30, what="the webhook cleaned up")
    stored = kubectl_json("get", "contacts.v2.demo.kopf.dev", "-n", namespace)["items"]
    assert sorted(item["spec"]["first"] for item in stored) == [f"First{i}" for i in range(5)]
    assert all("name" not in item["spec"] for item in stored)


CUSTOM = """
import asyncio, json, logging
import kopf

async def custom_server(fn):
    # A custom server passes every review it receives to the operator's webhookfn: here one.
    review = {'apiVersion': 'apiextensions.k8s.io/v1', 'kind': 'ConversionReview',
              'request': {'uid': 'r-1', 'desiredAPIVersion': 'demo.kopf.dev/v2', 'objects': [
                  {'apiVersion': 'demo.kopf.dev/v1', 'kind': 'Contact',
                   'metadata': {'name': 'ada', 'namespace': 'ns', 'uid': 'u-1'}, 'spec': {'name': 'Ada Lovelace'}}]}}
    answer = await fn(review, webhook='conversion/contacts.demo.kopf.dev')
    logging.getLogger('custom').info(f"ANSWER {json.dumps(answer, sort_keys=True)}")
    yield {'url': 'https://127.0.0.1:9/unused'}
    await asyncio.Event().wait()

@kopf.on.startup()
def configure(settings, **_):
    settings.admission.server = custom_server
""" + STEPS.split("settings.conversion.managed = True\n")[1]


def test_a_custom_server_passes_conversion_reviews_to_the_webhookfn(contacts: None, namespace: str,
                                                                     tmp_path: Path) -> None:
    operator = OperatorProcess(["run", "-n", namespace, "--standalone", str(write_script(tmp_path, CUSTOM))],
                               cwd=tmp_path)
    try:
        output = operator.wait_for(r"ANSWER ")
    finally:
        operator.stop()
    answer = json.loads(output.split("ANSWER ", 1)[1].splitlines()[0])
    assert answer["kind"] == "ConversionReview" and answer["response"]["uid"] == "r-1"
    assert answer["response"]["result"] == {"status": "Success"}
    [ada] = answer["response"]["convertedObjects"]
    assert ada["apiVersion"] == "demo.kopf.dev/v2" and ada["spec"] == {"first": "Ada", "last": "Lovelace"}
    assert conversion().get("strategy") == "None", "not managed: the CRD is left alone"


HANDLING = """

@kopf.on.create('contacts.demo.kopf.dev')
def created(spec, logger, **_):
    logger.info(f"CREATED {spec.get('first')} {spec.get('last')}")
"""


def test_the_operators_own_handlers_wait_for_the_webhook(contacts: None, namespace: str, tmp_path: Path) -> None:
    """Its handlers read v2 (the preferred version) and patch the objects: before the CRD
    points at the webhook, the API server would convert them by strategy `None` (relabelled,
    `name` pruned by v2's schema, and lost from the stored object by the handler's patch)."""
    create(contact("ada", namespace, name="Ada Lovelace"))
    script = tmp_path / "operator.py"
    script.write_text((EXAMPLES / "conversion" / "operator.py").read_text() + HANDLING)
    operator = OperatorProcess(["run", "-n", namespace, "--standalone", str(script)], cwd=tmp_path)
    try:
        output = operator.wait_for(r"Creation is processed")
    finally:
        operator.stop()
    assert output.index("Waiting for the conversion webhooks of contacts.demo.kopf.dev") < output.index("CREATED")
    assert "CREATED Ada Lovelace" in output
    assert read_ok("ada", namespace, "v1")["spec"] == {"name": "Ada Lovelace"}, "nothing lost"
    # Its last writes on exit are converted too: the server stops after the core.
    assert "conversion webhook for" not in operator.output, operator.output


def test_a_cleanup_without_managing_is_refused(contacts: None, namespace: str, tmp_path: Path) -> None:
    script = write_script(tmp_path, STEPS.replace("settings.conversion.managed = True",
                                                  "settings.conversion.cleanup = True"))
    operator = OperatorProcess(["run", "-n", namespace, "--standalone", str(script)], cwd=tmp_path)
    code = operator.process.wait(timeout=60)
    operator.stop()
    assert code != 0
    assert "settings.conversion.cleanup cleans up only what the operator manages" in operator.output, \
        operator.output
