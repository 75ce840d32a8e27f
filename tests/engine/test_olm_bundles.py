"""`kopf olm generate`: OLM bundles of operators, checked by operator-framework's own validator
(`operator-verify manifests`, built by checks/run from the Go module proxy) and against what
`kopf rbac generate` says the handlers need; the CSV's Deployment taken by the API server
(`--dry-run=server`) and its pod run on kwok's node; its `kopf run` started as OLM starts it (its arguments and
environment, OLM's certificate, OLM's webhook configuration and CRD conversion as the bundle's
webhook definitions say): admission and conversion reviews answered. Kopf has no OLM bundles:
nothing to compare with side by side."""

from __future__ import annotations

import base64
import json
import shutil
import subprocess
from pathlib import Path
from typing import Any

import yaml
from support.cluster import EXAMPLES, apply, kopf_cli, kubectl, kubectl_json
from support.contacts import CRD as CONTACTS
from support.contacts import certificate, contact, conversion, create, read, read_ok
from support.kwok import pod_status
from support.network import free_port
from support.olm import failures, operator_verify
from support.operators import OperatorProcess, account_kubeconfig, eventually, refused, write_script
from support.webhooks import POLITE

OPERATING = EXAMPLES / "operating" / "operator.py"
CRD = EXAMPLES / "crd.yaml"


def generate(tmp_path: Path, *args: str) -> Path:
    output = tmp_path / "bundle"
    result = kopf_cli("olm", "generate", "--image", "example.com/greeter:1.0.0", "--output", str(output),
                      "--project", str(tmp_path / "pyproject.toml"), *args)
    assert result.returncode == 0, result.stderr
    return output


def csv_of(bundle: Path) -> dict[str, Any]:
    [path] = (bundle / "manifests").glob("*.clusterserviceversion.yaml")
    return yaml.safe_load(path.read_text())  # type: ignore[no-any-return]


def rbac_rules(*args: str) -> tuple[set[tuple[str, str, str]], set[tuple[str, str, str]]]:
    """What `kopf rbac generate` says, as (group, resource, verb): cluster-wide, and namespaced."""
    result = kopf_cli("rbac", "generate", *args)
    assert result.returncode == 0, result.stderr
    cluster, namespaced = set(), set()
    for document in yaml.safe_load_all(result.stdout):
        if document["kind"] in ("ClusterRole", "Role"):
            into = cluster if document["kind"] == "ClusterRole" else namespaced
            into |= {(rule["apiGroups"][0], rule["resources"][0], verb)
                     for rule in document["rules"] for verb in rule["verbs"]}
    return cluster, namespaced


def csv_rules(permissions: list[dict[str, Any]]) -> set[tuple[str, str, str]]:
    return {(rule["apiGroups"][0], rule["resources"][0], verb)
            for entry in permissions for rule in entry["rules"] for verb in rule["verbs"]}


PROJECT = """
[project]
name = "greeter-operator"
description = "Greets the greetings (an example of kopf-rs)."
keywords = ["greetings", "example"]
maintainers = [{name = "The Greeters", email = "greeters@example.com"}]
[project.urls]
Homepage = "https://example.com/greeter"
"""


def test_a_namespaced_operators_bundle_passes_operator_frameworks_validator(
        crd: None, namespace: str, tmp_path: Path) -> None:
    (tmp_path / "pyproject.toml").write_text(PROJECT)
    options = ("-n", namespace, "--standalone", "--name", "greeter")
    example = tmp_path / "hello.yaml"
    example.write_text(yaml.safe_dump(greeting(namespace, "hello", "Hello!")))
    bundle = generate(tmp_path, str(OPERATING), "--version", "1.2.3", "--crd", str(CRD), "--example", str(example),
                      *options)
    # The default validators: nothing at all (the CRD's objects have their example).
    findings = operator_verify(bundle)
    assert failures(findings) == [], findings
    assert not any("example annotation" in line for line in findings), findings
    assert json.loads(csv_of(bundle)["metadata"]["annotations"]["alm-examples"]) == [greeting(namespace, "hello",
                                                                                            "Hello!")]
    # OperatorHub's validator too: only the missing icon (and its own deprecation notice).
    hub = operator_verify(bundle, "--operatorhub_validate")
    assert failures(hub) == [], hub

    csv = csv_of(bundle)
    assert csv["metadata"]["name"] == "greeter-operator.v1.2.3"
    spec = csv["spec"]
    assert spec["version"] == "1.2.3" and spec["provider"] == {"name": "The Greeters"}
    assert {mode["type"]: mode["supported"] for mode in spec["installModes"]} == {
        "OwnNamespace": True, "SingleNamespace": True, "MultiNamespace": False, "AllNamespaces": True}
    assert spec["customresourcedefinitions"]["owned"][0]["name"] == "greetings.demo.kopf.dev"
    # The permissions are the rules of `kopf rbac generate` with the same options.
    cluster, namespaced = rbac_rules(str(OPERATING), *options)
    install = spec["install"]["spec"]
    assert csv_rules(install["clusterPermissions"]) == cluster
    assert csv_rules(install["permissions"]) == namespaced
    assert {entry["serviceAccountName"] for entry in [*install["permissions"], *install["clusterPermissions"]]} \
        == {"greeter"}
    # The Deployment: the image's `kopf run` with the options, the namespaces from OLM's OperatorGroup.
    [deployment] = install["deployments"]
    [container] = deployment["spec"]["template"]["spec"]["containers"]
    assert container["args"] == ["--standalone", "--liveness", "http://0.0.0.0:8080/healthz", "/operator/operator.py"]
    env = {item["name"]: item["valueFrom"]["fieldRef"]["fieldPath"] for item in container["env"]}
    assert env["KOPF_RUN_NAMESPACES"] == "metadata.annotations['olm.targetNamespaces']"
    assert (bundle / "manifests" / "greetings.demo.kopf.dev.crd.yaml").read_text() == CRD.read_text()
    annotations = yaml.safe_load((bundle / "metadata" / "annotations.yaml").read_text())["annotations"]
    assert annotations["operators.operatorframework.io.bundle.package.v1"] == "greeter-operator"
    assert "LABEL operators.operatorframework.io.bundle.mediatype.v1=registry+v1" in \
        (bundle / "bundle.Dockerfile").read_text()

    # The API server takes the Deployment as it is.
    manifest = {"apiVersion": "apps/v1", "kind": "Deployment",
                "metadata": {"name": deployment["name"], "namespace": namespace}, "spec": deployment["spec"]}
    kubectl("apply", "--dry-run=server", "-f", "-", input=json.dumps(manifest))
    # Its pod (made here from the template, as the deployment controller would make it, with the
    # target namespaces that OLM annotates it with) is scheduled onto kwok's node and runs, under
    # the account that OLM creates for the permissions.
    template = deployment["spec"]["template"]
    apply([{"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "greeter", "namespace": namespace}},
           {"apiVersion": "v1", "kind": "Pod", "spec": template["spec"], "metadata": {
               **template["metadata"], "name": "greeter-operator-0", "namespace": namespace,
               "annotations": {"olm.targetNamespaces": namespace}}}])
    eventually(lambda: pod_status("greeter-operator-0", namespace).get("phase") == "Running",
               what="the operator's pod running")
    assert kubectl_json("get", "pod", "greeter-operator-0", "-n", namespace)["spec"]["nodeName"]


def test_a_cluster_wide_operator_is_installed_for_all_namespaces(crd: None, tmp_path: Path) -> None:
    # What an earlier bundle left there (a CRD since removed) is not kept.
    (tmp_path / "bundle" / "manifests").mkdir(parents=True)
    (tmp_path / "bundle" / "manifests" / "stale.crd.yaml").write_text(CRD.read_text().replace("greeting", "stale"))
    bundle = generate(tmp_path, str(OPERATING), "--version", "0.1.0", "--package", "greeter", "--crd", str(CRD),
                      "-A", "--standalone", "--previous-version", "0.0.9")
    assert failures(operator_verify(bundle)) == []
    assert not (bundle / "manifests" / "stale.crd.yaml").exists()
    spec = csv_of(bundle)["spec"]
    assert [mode["type"] for mode in spec["installModes"] if mode["supported"]] == ["AllNamespaces"]
    assert spec["replaces"] == "greeter.v0.0.9"
    cluster, _ = rbac_rules(str(OPERATING), "-A", "--standalone")
    assert csv_rules(spec["install"]["spec"]["clusterPermissions"]) == cluster
    [container] = spec["install"]["spec"]["deployments"][0]["spec"]["template"]["spec"]["containers"]
    assert "--all-namespaces" in container["args"]
    assert "KOPF_RUN_NAMESPACES" not in {item["name"] for item in container["env"]}


def test_what_cannot_make_a_bundle_is_refused_with_the_reason(crd: None, tmp_path: Path) -> None:
    def refused(*args: str) -> str:
        result = kopf_cli("olm", "generate", "--image", "x:1", "--package", "greeter", "--output",
                          str(tmp_path / "out"), "--project", str(tmp_path / "none.toml"), *args)
        assert result.returncode != 0
        return result.stderr

    assert "'1.0' is not a semantic version" in refused(str(OPERATING), "--version", "1.0", "--crd", str(CRD))
    stray = tmp_path / "stray.yaml"
    stray.write_text("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: x}\n")
    assert f"--example {stray}: v1, ConfigMap: not a kind and version of the bundle's CRDs" in refused(
        str(OPERATING), "--version", "1.0.0", "--crd", str(CRD), "--example", str(stray))
    converting = EXAMPLES / "conversion" / "operator.py"
    assert "conversion webhooks for all namespaces only" in refused(str(converting), "--version", "1.0.0",
                                                                    "-n", "default")
    lost = write_script(tmp_path, "import kopf\n\n@kopf.on.validate('nothings.nowhere.dev')\ndef check(**_): pass\n")
    assert "Webhook 'check' serves no resource that the cluster serves" in refused(str(lost), "--version", "1.0.0")
    no_name = kopf_cli("olm", "generate", "--image", "x:1", "--version", "1.0.0", "--project",
                       str(tmp_path / "none.toml"), str(OPERATING))
    assert no_name.returncode != 0 and "give --package NAME" in no_name.stderr


def test_a_crd_that_no_file_gives_is_read_from_the_cluster(crd: None, tmp_path: Path) -> None:
    bundle = generate(tmp_path, str(OPERATING), "--version", "1.0.0", "--package", "greeter", "-A", "--standalone")
    assert failures(operator_verify(bundle)) == []
    text = (bundle / "manifests" / "greetings.demo.kopf.dev.crd.yaml").read_text()
    assert text.startswith("# greetings.demo.kopf.dev as the cluster had it")
    bundled, applied = yaml.safe_load(text), yaml.safe_load(CRD.read_text())
    # Its definition only: no status, no server's records; the spec as applied (plus its defaults).
    assert set(bundled) == {"apiVersion", "kind", "metadata", "spec"}
    assert bundled["metadata"] == {"name": "greetings.demo.kopf.dev"}
    assert bundled["spec"]["names"]["kind"] == applied["spec"]["names"]["kind"]
    assert [v["name"] for v in bundled["spec"]["versions"]] == [v["name"] for v in applied["spec"]["versions"]]


VALIDATING = POLITE


def run_as_olm_does(bundle: Path, tmp_path: Path, script: Path, namespace: str | None,
                    env: dict[str, str] | None = None) -> tuple[OperatorProcess, int]:
    """The CSV's Deployment's `kopf run` as OLM starts it: its arguments and environment, OLM's
    certificate mounted (here, a folder given by $KOPF_OLM_CERTIFICATES), the target namespace
    from OLM's annotation; on free ports (the pod's own are taken by other tests); `env`: more
    (e.g. the account's credentials)."""
    [deployment] = csv_of(bundle)["spec"]["install"]["spec"]["deployments"]
    [container] = deployment["spec"]["template"]["spec"]["containers"]
    certs = tmp_path / "certs"
    certs.mkdir()
    cert, key = certificate(tmp_path, "olm")
    shutil.copy(cert, certs / "apiserver.crt")
    shutil.copy(key, certs / "apiserver.key")
    port, liveness = free_port(), free_port()
    args = [arg.replace(":8080/", f":{liveness}/") for arg in container["args"]]
    args = [str(script) if arg.startswith("/operator/") else arg for arg in args]
    env = {"KOPF_OLM_CERTIFICATES": str(certs), "POD_NAMESPACE": namespace or "default", **(env or {})}
    for item in container["env"]:
        if "value" in item:
            env[item["name"]] = item["value"]
        elif item["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.annotations['olm.targetNamespaces']":
            env[item["name"]] = namespace or ""
    if "KOPF_OLM_WEBHOOK_PORT" in env:  # (a bundle with webhooks)
        assert env["KOPF_OLM_WEBHOOK_PORT"] == "9443"
        env["KOPF_OLM_WEBHOOK_PORT"] = str(port)
    return OperatorProcess(["run", *args], cwd=tmp_path, env=env), port


def test_admission_handlers_are_served_as_olm_configures_them(crd: None, namespace: str, tmp_path: Path) -> None:
    (tmp_path / "pyproject.toml").write_text(PROJECT)
    script = write_script(tmp_path, VALIDATING)
    bundle = generate(tmp_path, str(script), "--version", "1.0.0", "--crd", str(CRD), "-n", namespace,
                      "--standalone", "--name", "greeter")
    assert failures(operator_verify(bundle)) == []
    spec = csv_of(bundle)["spec"]
    [webhook] = spec["webhookdefinitions"]
    assert webhook == {
        "type": "ValidatingAdmissionWebhook", "generateName": "polite.greeter-operator.kopf.dev",
        "deploymentName": "greeter-operator", "containerPort": 443, "targetPort": 9443, "webhookPath": "/polite",
        "rules": [{"apiGroups": ["demo.kopf.dev"], "apiVersions": ["v1"], "resources": ["greetings"],
                   "operations": ["CREATE"], "scope": "*"}],
        "sideEffects": "None", "failurePolicy": "Fail", "matchPolicy": "Equivalent", "timeoutSeconds": 30,
        "admissionReviewVersions": ["v1", "v1beta1"],
    }
    assert spec["install"]["spec"]["deployments"][0]["name"] == webhook["deploymentName"]
    # OLM writes the webhook configuration: the operator needs no rights for it.
    groups = {rule["apiGroups"][0] for kind in ("permissions", "clusterPermissions")
              for entry in spec["install"]["spec"].get(kind, []) for rule in entry["rules"]}
    assert "admissionregistration.k8s.io" not in groups

    operator, port = run_as_olm_does(bundle, tmp_path, script, namespace)
    name = f"olm-{namespace}"
    try:
        operator.wait_for(rf"Serving the webhooks on port {port} with OLM's certificate from .*; OLM configures "
                          r"them \(\$KOPF_OLM_WEBHOOK_PORT: a pod of an OLM bundle\); instead of "
                          r"settings.admission.server=<kopf.*WebhookAutoServer.*>, "
                          r"settings.admission.managed='greeter.example.com'\.")
        ca_bundle = base64.b64encode((tmp_path / "certs" / "apiserver.crt").read_bytes()).decode()
        # What OLM creates from the definition (its Service's address here: the operator's port).
        configuration = {key: value for key, value in webhook.items() if key not in (
            "type", "generateName", "deploymentName", "containerPort", "targetPort", "webhookPath")}
        apply({"apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingWebhookConfiguration",
               "metadata": {"name": name}, "webhooks": [{
                   **configuration, "name": webhook["generateName"],
                   "clientConfig": {"url": f"https://127.0.0.1:{port}{webhook['webhookPath']}", "caBundle": ca_bundle},
                   "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": namespace}}}]})

        def refused() -> str | None:
            result = subprocess.run(["kubectl", "create", "-f", "-"], input=json.dumps(greeting(namespace, "rude")),
                                    capture_output=True, text=True, timeout=30, check=False)
            return result.stderr if result.returncode != 0 else None
        assert "Greetings are polite here." in eventually(refused, what="the webhook refuses")
        kubectl("create", "-f", "-", input=json.dumps(greeting(namespace, "kind", "hello")))
        # The operator kept no configuration of its own (settings.admission.managed was OLM's).
        assert kubectl("get", "validatingwebhookconfigurations", "-o", "name").count("greeter.example.com") == 0
        # The liveness probe of the Deployment answers.
        probe = csv_of(bundle)["spec"]["install"]["spec"]["deployments"][0]["spec"]["template"]["spec"]
        assert probe["containers"][0]["livenessProbe"]["httpGet"]["path"] == "/healthz"
    finally:
        kubectl("delete", "validatingwebhookconfiguration", name, "--ignore-not-found")
        operator.stop()


def greeting(namespace: str, called: str, text: str = "go away") -> dict[str, Any]:
    return {"apiVersion": "demo.kopf.dev/v1", "kind": "Greeting", "metadata": {"name": called, "namespace": namespace},
            "spec": {"greeting": text}}


def test_conversions_are_served_as_olm_configures_them(contacts: None, namespace: str, tmp_path: Path) -> None:
    script = tmp_path / "operator.py"
    shutil.copy(EXAMPLES / "conversion" / "operator.py", script)
    # The CRD from the cluster (no --crd): the example's, unpointed.
    bundle = generate(tmp_path, str(script), "--version", "2.0.0", "--package", "contacts", "-A", "--standalone")
    assert failures(operator_verify(bundle)) == []
    spec = csv_of(bundle)["spec"]
    assert spec["webhookdefinitions"] == [{
        "type": "ConversionWebhook", "generateName": f"{CONTACTS}.contacts.kopf.dev", "deploymentName": "contacts",
        "containerPort": 443, "targetPort": 9443, "webhookPath": f"/conversion/{CONTACTS}",
        "conversionCRDs": [CONTACTS], "sideEffects": "None", "admissionReviewVersions": ["v1"],
    }]
    assert [mode["type"] for mode in spec["installModes"] if mode["supported"]] == ["AllNamespaces"]
    assert (bundle / "manifests" / f"{CONTACTS}.crd.yaml").exists()
    # The operator reads the CRDs' versions, and writes none (OLM points them at the webhook).
    crd_rules = {verb for entry in spec["install"]["spec"]["clusterPermissions"] for rule in entry["rules"]
                 if rule["resources"] == ["customresourcedefinitions"] for verb in rule["verbs"]}
    assert "patch" not in crd_rules and "get" in crd_rules

    operator, port = run_as_olm_does(bundle, tmp_path, script, None)
    try:
        operator.wait_for(r"OLM configures them .*; instead of .*settings.conversion.managed=True")
        ca_bundle = base64.b64encode((tmp_path / "certs" / "apiserver.crt").read_bytes()).decode()
        # What OLM writes into the CRD from the definition.
        kubectl("patch", "crd", CONTACTS, "--type=merge", "-p", json.dumps({"spec": {"conversion": {
            "strategy": "Webhook", "webhook": {"conversionReviewVersions": ["v1"], "clientConfig": {
                "url": f"https://127.0.0.1:{port}{spec['webhookdefinitions'][0]['webhookPath']}",
                "caBundle": ca_bundle}}}}}))
        create(contact("ada", namespace, name="Ada Lovelace"))  # stored as v1: no conversion yet
        read_v2 = eventually(lambda: read("ada", namespace, "v2").returncode == 0 and read_ok("ada", namespace, "v2"),
                             what="the contact read as v2")
        assert read_v2["spec"] == {"first": "Ada", "last": "Lovelace"}
        assert conversion()["webhook"]["clientConfig"]["url"].startswith("https://127.0.0.1:"), "left as OLM set it"
    finally:
        operator.stop()


def test_a_crd_of_another_operator_is_required_not_bundled(crd: None, contacts: None, tmp_path: Path) -> None:
    script = write_script(tmp_path, """
        import kopf

        @kopf.on.create('greetings')
        def greet(**_): pass

        @kopf.on.event('contacts.demo.kopf.dev')
        def seen(**_): pass
    """)
    bundle = generate(tmp_path, str(script), "--version", "1.0.0", "--package", "greeter", "-A", "--standalone",
                      "--crd", str(CRD), "--required-crd", CONTACTS)
    assert failures(operator_verify(bundle)) == []
    definitions = csv_of(bundle)["spec"]["customresourcedefinitions"]
    assert [entry["name"] for entry in definitions["owned"]] == ["greetings.demo.kopf.dev"]
    [required] = definitions["required"]
    assert (required["name"], required["kind"]) == (CONTACTS, "Contact")
    assert required["version"] in ("v1", "v2")
    assert not (bundle / "manifests" / f"{CONTACTS}.crd.yaml").exists()
    both = kopf_cli("olm", "generate", "--image", "x:1", "--package", "greeter", "--version", "1.0.0", "-A",
                    "--output", str(tmp_path / "both"), "--project", str(tmp_path / "none.toml"), str(script),
                    "--crd", str(CRD), "--required-crd", "greetings.demo.kopf.dev")
    assert both.returncode != 0 and "a --crd file gives it too" in both.stderr


CHILDREN = EXAMPLES / "children" / "operator.py"


def test_an_operator_with_children_runs_with_the_csvs_permissions(crd: None, namespace: str, tmp_path: Path) -> None:
    """Its handlers' own requests (a child ConfigMap, a Secret read) are in the CSV: OLM grants
    exactly them, and the operator started as OLM starts it handles its objects with them."""
    (tmp_path / "pyproject.toml").write_text(PROJECT.replace("greeter-operator", "lantern-operator"))
    bundle = generate(tmp_path, str(CHILDREN), "--version", "1.0.0", "--crd", str(CRD), "-n", namespace,
                      "--standalone", "--name", "lantern")
    assert failures(operator_verify(bundle)) == []
    install = csv_of(bundle)["spec"]["install"]["spec"]
    namespaced = csv_rules(install["permissions"])
    assert {("", "configmaps", "create"), ("", "configmaps", "patch"), ("", "secrets", "get")} <= namespaced
    # What OLM creates for the CSV in the target namespace: the account, and exactly its rules.
    account = f"lantern-{namespace}"
    roles: list[dict[str, Any]] = [{"apiVersion": "v1", "kind": "ServiceAccount",
                                    "metadata": {"name": account, "namespace": namespace}}]
    subject = [{"kind": "ServiceAccount", "name": account, "namespace": namespace}]
    for entry in install["permissions"]:
        roles += [{"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
                   "metadata": {"name": account, "namespace": namespace}, "rules": entry["rules"]},
                  {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
                   "metadata": {"name": account, "namespace": namespace}, "subjects": subject,
                   "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": account}}]
    for entry in install.get("clusterPermissions", []):
        roles += [{"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
                   "metadata": {"name": account}, "rules": entry["rules"]},
                  {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
                   "metadata": {"name": account}, "subjects": subject,
                   "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": account}}]
    apply(roles)
    try:
        script = tmp_path / "operator.py"
        shutil.copy(CHILDREN, script)
        operator, _ = run_as_olm_does(bundle, tmp_path, script, namespace,
                                      env={"KUBECONFIG": str(account_kubeconfig(account, tmp_path, namespace))})
        try:
            create(greeting(namespace, "lantern1", "hi"))
            operator.wait_for(r"Handler 'light' succeeded")
            glow = eventually(lambda: kubectl_json("get", "configmap", "lantern1-glow", "-n", namespace),
                              what="the child ConfigMap")
            assert glow["data"]["message"].startswith("Hello, ")
        finally:
            operator.stop()
        assert not refused(operator.output), operator.output
    finally:
        kubectl("delete", "clusterrole,clusterrolebinding", account, "--ignore-not-found")
