"""`kopf deploy generate`: a Helm chart from the operator's code, used as a user would. The real
`helm` (built from its Go module by checks/run: $KOPF_RS_HELM) lints it and installs it into the
control plane; the operator then runs as the chart's Deployment says (its arguments and
environment, on this machine, as its ServiceAccount: the plane's nodes run no containers) and
handles its objects; an upgrade changes what the values say; uninstalling leaves nothing."""

from __future__ import annotations

import base64
import json
import os
import shutil
import ssl
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

import pytest
import yaml
from support import certmanager, webhooks
from support.cluster import EXAMPLES, kopf_cli, kubectl, kubectl_json
from support.contacts import CRD as CONTACTS
from support.contacts import contact, conversion, create, read, read_ok
from support.metrics import scrape, value
from support.network import free_port
from support.operators import OperatorProcess, account_kubeconfig, eventually, refused

CHILDREN = EXAMPLES / "children" / "operator.py"
CRD = EXAMPLES / "crd.yaml"


def helm(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    program = os.environ.get("KOPF_RS_HELM")
    assert program, "$KOPF_RS_HELM names no helm (checks/run builds it)"
    result = subprocess.run([program, *args], capture_output=True, text=True, check=False, timeout=120)
    assert not check or result.returncode == 0, f"helm {' '.join(args)}: {result.stdout}{result.stderr}"
    return result


def generate(tmp_path: Path, *args: str) -> Path:
    chart = tmp_path / "chart"
    result = kopf_cli("deploy", "generate", "--output", str(chart), *args)
    assert result.returncode == 0, result.stderr
    return chart


def deployment(namespace: str, name: str) -> dict[str, Any]:
    found: dict[str, Any] = kubectl_json("get", "deployment", name, "-n", namespace)
    return found


def run_as_the_deployment_does(found: dict[str, Any], script: Path, tmp_path: Path,
                               env: dict[str, str], metrics: int = 0) -> OperatorProcess:
    """The Deployment's `kopf run` (the image's entrypoint) with its arguments and environment,
    the handlers' path in the image mapped to the script here, its probe on a free port, its
    metrics (the pod's 9090) on `metrics`."""
    [container] = found["spec"]["template"]["spec"]["containers"]
    args = [arg.replace(":8080/", f":{free_port()}/") for arg in container["args"]]
    args = [f"127.0.0.1:{metrics}" if arg == "0.0.0.0:9090" else arg for arg in args]
    args = [str(script) if arg.startswith("/operator/") else arg for arg in args]
    values = {item["name"]: item["value"] for item in container["env"] if "value" in item}
    pod = {"POD_ID": "lantern-pod", "POD_NAMESPACE": found["metadata"]["namespace"]}
    return OperatorProcess(["run", *args], cwd=tmp_path, env={**values, **pod, **env})


def test_a_generated_chart_installs_and_its_operator_runs_under_it(crd: None, namespace: str, tmp_path: Path) -> None:
    name = f"lantern-{namespace}"
    chart = generate(tmp_path, str(CHILDREN), "--image", "registry.example/lantern:1.2.0", "--crd", str(CRD),
                     "-n", namespace, "--standalone", "--lease", "lantern", "--name", name, "--metrics", "9090")
    assert helm("lint", str(chart)).stdout.endswith("1 chart(s) linted, 0 chart(s) failed\n")
    assert yaml.safe_load((chart / "Chart.yaml").read_text())["appVersion"] == "1.2.0"
    release = "lantern"
    helm("install", release, str(chart), "-n", namespace)
    try:
        found = deployment(namespace, name)
        pod = found["spec"]["template"]["spec"]
        [container] = pod["containers"]
        assert container["image"] == "registry.example/lantern:1.2.0"
        assert container["args"] == ["-n", namespace, "--standalone", "--lease", "lantern", "--liveness",
                                     "http://0.0.0.0:8080/healthz", "--metrics", "0.0.0.0:9090",
                                     "/operator/operator.py"]
        service = kubectl_json("get", "service", f"{name}-metrics", "-n", namespace)
        ports = [(p["name"], p["port"], p["targetPort"]) for p in service["spec"]["ports"]]
        assert ports == [("metrics", 9090, "metrics")]
        # The Lease is in the release's namespace (the pod's), here also the served one: two roles.
        roles = kubectl("get", "role", "-n", namespace, "-o", "name").split()
        assert sorted(roles) == [f"role.rbac.authorization.k8s.io/{name}",
                                 f"role.rbac.authorization.k8s.io/{name}-release"]
        assert pod["serviceAccountName"] == name and pod["securityContext"]["runAsNonRoot"] is True
        assert container["securityContext"]["readOnlyRootFilesystem"] is True
        assert found["spec"]["replicas"] == 1
        assert kubectl("get", "pdb", "-n", namespace, "-o", "name") == "", "no budget for one replica"

        # The operator as the Deployment runs it, as its ServiceAccount: the chart's roles suffice.
        script = tmp_path / "operator.py"
        shutil.copy(CHILDREN, script)
        kubeconfig = account_kubeconfig(name, tmp_path, namespace)
        port = free_port()
        operator = run_as_the_deployment_does(found, script, tmp_path, {"KUBECONFIG": str(kubeconfig)}, port)
        try:
            kubectl("apply", "-n", namespace, "-f", "-", input=json.dumps(
                {"apiVersion": "demo.kopf.dev/v1", "kind": "Greeting", "metadata": {"name": "lantern1"},
                 "spec": {"who": "Helm"}}))
            operator.wait_for(r"Handler 'light' succeeded", timeout=60)  # once it holds the Lease
            glow = eventually(lambda: kubectl_json("get", "configmap", "lantern1-glow", "-n", namespace),
                              what="the child ConfigMap")
            assert glow["data"]["message"].startswith("Hello, Helm!")
            assert value(scrape(port), "kopf_handler_calls_total", handler="light", outcome="success") == 1
        finally:
            operator.stop()
        assert not refused(operator.output), operator.output

        # The values: what the schema refuses fails the upgrade; what it takes is rolled out.
        wrong = helm("upgrade", release, str(chart), "-n", namespace, "--set", "replicas=two", check=False)
        assert wrong.returncode != 0 and "replicas" in wrong.stderr, wrong.stderr
        helm("upgrade", release, str(chart), "-n", namespace, "--set", "replicas=2", "--set", "logFormat=json",
             "--set-json", 'env=[{"name": "GREETERS_SIGNATURES", "value": "secrets"}]')
        found = deployment(namespace, name)
        [container] = found["spec"]["template"]["spec"]["containers"]
        assert found["spec"]["replicas"] == 2
        values = {item["name"]: item.get("value") for item in container["env"]}
        assert values["KOPF_RUN_LOG_FORMAT"] == "json" and values["GREETERS_SIGNATURES"] == "secrets"
        assert kubectl("get", "pdb", name, "-n", namespace, "-o", "jsonpath={.spec.minAvailable}") == "1"
    finally:
        helm("uninstall", release, "-n", namespace, "--wait")
    # What the release made is gone; its CRD stays (Helm never deletes the CRDs of crds/).
    left = kubectl("get", "deployment,serviceaccount,role,rolebinding,pdb", "-n", namespace, "-o", "name")
    assert name not in left, left
    assert kubectl("get", "clusterrole,clusterrolebinding", f"{name}-{namespace}", "--ignore-not-found",
                   "-o", "name") == ""
    assert kubectl("get", "crd", "greetings.demo.kopf.dev", "-o", "name").strip()


def test_the_served_namespaces_are_a_value(crd: None, namespace: str, tmp_path: Path) -> None:
    """Generated for one namespace, installed for another: the roles and `-n` follow the values."""
    name = f"moved-{namespace}"
    chart = generate(tmp_path, str(CHILDREN), "--image", "lantern:1", "-n", "generated-for", "--standalone",
                     "--name", name)
    assert yaml.safe_load((chart / "values.yaml").read_text())["namespaces"] == ["generated-for"]
    served = f"served-{uuid.uuid4().hex[:8]}"
    kubectl("create", "namespace", served)
    wrong = helm("install", "moved", str(chart), "-n", namespace, "--set-json", 'namespaces=["Not A Name"]',
                 check=False)
    assert wrong.returncode != 0 and "namespaces" in wrong.stderr, wrong.stderr
    helm("install", "moved", str(chart), "-n", namespace, "--set-json", f'namespaces=["{served}"]')
    try:
        found = deployment(namespace, name)
        [container] = found["spec"]["template"]["spec"]["containers"]
        assert container["args"][:2] == ["-n", served] and "generated-for" not in container["args"]
        role = kubectl("get", "role", name, "-n", served, "-o", "name").strip()
        assert role == f"role.rbac.authorization.k8s.io/{name}"
        assert kubectl("get", "role", name, "-n", namespace, "--ignore-not-found", "-o", "name") == ""

        script = tmp_path / "operator.py"
        shutil.copy(CHILDREN, script)
        kubeconfig = account_kubeconfig(name, tmp_path, namespace)
        operator = run_as_the_deployment_does(found, script, tmp_path, {"KUBECONFIG": str(kubeconfig)})
        try:
            kubectl("apply", "-n", served, "-f", "-", input=json.dumps(
                {"apiVersion": "demo.kopf.dev/v1", "kind": "Greeting", "metadata": {"name": "moved1"},
                 "spec": {"who": "values"}}))
            eventually(lambda: kubectl_json("get", "configmap", "moved1-glow", "-n", served), timeout=60,
                       what="the child ConfigMap in the values' namespace")
        finally:
            operator.stop()
        assert not refused(operator.output), operator.output
    finally:
        helm("uninstall", "moved", "-n", namespace)
        kubectl("delete", "namespace", served, "--wait=false", check=False)


def test_one_chart_installs_in_two_namespaces_side_by_side(crd: None, tmp_path: Path) -> None:
    """Two releases of one chart (as two teams would have): each its own cluster-wide role."""
    chart = generate(tmp_path, str(CHILDREN), "--image", "lantern:1", "-A", "--standalone", "--name", "twin")
    namespaces = [f"twin-{uuid.uuid4().hex[:8]}" for _ in range(2)]
    for namespace in namespaces:
        kubectl("create", "namespace", namespace)
    try:
        for namespace in namespaces:
            helm("install", "twin", str(chart), "-n", namespace)
        for namespace in namespaces:
            role = kubectl_json("get", "clusterrolebinding", f"twin-{namespace}")
            assert role["roleRef"]["name"] == f"twin-{namespace}"
            assert role["subjects"] == [{"kind": "ServiceAccount", "name": "twin", "namespace": namespace}]
    finally:
        for namespace in namespaces:
            helm("uninstall", "twin", "-n", namespace, check=False)
            kubectl("delete", "namespace", namespace, "--wait=false", check=False)
    left = kubectl("get", "clusterrole", "-o", "name")
    assert not [namespace for namespace in namespaces if f"twin-{namespace}" in left], left


def test_what_cannot_be_charted_is_refused_with_the_reason(crd: None, contacts: None, tmp_path: Path) -> None:
    conversions = tmp_path / "conversions.py"
    shutil.copy(EXAMPLES / "conversion" / "operator.py", conversions)
    refused_ = kopf_cli("deploy", "generate", "--output", str(tmp_path / "out"), "--image", "x:1", str(conversions))
    assert refused_.returncode != 0
    assert (f"The conversion handlers convert {CONTACTS}: give its CRD with --crd FILE" in refused_.stderr)
    unserved = tmp_path / "unserved.py"
    unserved.write_text("import kopf\n\n@kopf.on.validate('nothings.example.com')\ndef check(**_):\n    pass\n")
    refused_ = kopf_cli("deploy", "generate", "--output", str(tmp_path / "out"), "--image", "x:1", str(unserved))
    assert refused_.returncode != 0 and "serves no resource that the cluster serves" in refused_.stderr
    named = kopf_cli("deploy", "generate", "--output", str(tmp_path / "out"), "--image", "x:1", "--chart", "Bad_Name",
                     str(CHILDREN))
    assert named.returncode != 0 and "is not a name that Helm and Kubernetes take" in named.stderr
    assert not (tmp_path / "out").exists(), "nothing written for a refused chart"


@pytest.mark.parametrize("mode", [["-A", "--standalone", "--lease", "lantern"],
                                  ["-n", "ns1", "-n", "ns2", "--peering", "team"]])
def test_the_deployment_runs_with_the_options_given(crd: None, tmp_path: Path, mode: list[str]) -> None:
    chart = generate(tmp_path, str(CHILDREN), "--image", "lantern:1", "--name", "lantern-modes", *mode)
    rendered = helm("template", "r1", str(chart), "-n", "ops").stdout
    docs = [doc for doc in yaml.safe_load_all(rendered) if doc]
    [found] = [doc for doc in docs if doc["kind"] == "Deployment"]
    args = found["spec"]["template"]["spec"]["containers"][0]["args"]
    expected = ["--all-namespaces", "--standalone", "--lease", "lantern"] if mode[0] == "-A" else \
        ["-n", "ns1", "-n", "ns2", "--peering", "team"]
    assert args[:len(expected)] == expected
    assert "ServiceMonitor" not in rendered and "kind: Service\n" not in rendered, "no metrics: no Service"
    account = [doc for doc in docs if doc["kind"] == "ServiceAccount"]
    assert account[0]["metadata"]["namespace"] == "ops", "the account lives in the release's namespace"
    bindings = [doc for doc in docs if doc["kind"] in ("RoleBinding", "ClusterRoleBinding")]
    assert bindings and all(b["subjects"][0]["namespace"] == "ops" for b in bindings)


GREETER = """
import kopf

@kopf.on.create('greetings')
def greet(spec, **_):
    return {'message': f"Hello, {spec.get('who', 'world')}!"}
"""


def test_mounted_handlers_roll_out_when_they_change(crd: None, namespace: str, tmp_path: Path) -> None:
    name = f"mounted-{namespace}"
    script = tmp_path / "handlers.py"
    script.write_text(GREETER)
    args = ["--image", "kopf-rs:1", "--mount", "-n", namespace, "--standalone", "--name", name, str(script)]
    chart = generate(tmp_path, *args)
    assert helm("lint", str(chart)).returncode == 0
    helm("install", "mounted", str(chart), "-n", namespace)
    try:
        handlers = kubectl_json("get", "configmap", f"{name}-handlers", "-n", namespace)
        assert handlers["data"] == {"handlers.py": GREETER}
        found = deployment(namespace, name)
        pod = found["spec"]["template"]
        assert {"name": "handlers", "configMap": {"name": f"{name}-handlers", "defaultMode": 420}} \
            in pod["spec"]["volumes"]
        [container] = pod["spec"]["containers"]
        assert container["args"][-1] == "/operator/handlers.py"
        before = pod["metadata"]["annotations"]["checksum/handlers"]

        # The handler changed, the chart generated again: the upgrade rolls the pods out.
        changed = GREETER.replace("Hello", "Hello again")
        script.write_text(changed)
        generate(tmp_path, *args)
        helm("upgrade", "mounted", str(chart), "-n", namespace)
        handlers = kubectl_json("get", "configmap", f"{name}-handlers", "-n", namespace)
        assert handlers["data"] == {"handlers.py": changed}
        upgraded = deployment(namespace, name)
        assert upgraded["spec"]["template"]["metadata"]["annotations"]["checksum/handlers"] != before
        assert upgraded["metadata"]["generation"] == found["metadata"]["generation"] + 1, "a new template: a rollout"

        # The same chart again: nothing changes, nothing rolls out.
        generate(tmp_path, *args)
        helm("upgrade", "mounted", str(chart), "-n", namespace)
        assert deployment(namespace, name)["metadata"]["generation"] == upgraded["metadata"]["generation"]
    finally:
        helm("uninstall", "mounted", "-n", namespace, "--wait")


def test_a_service_monitor_is_rendered_when_the_values_ask_for_it(crd: None, tmp_path: Path) -> None:
    chart = generate(tmp_path, str(CHILDREN), "--image", "lantern:1", "--name", "lantern-monitored", "-A",
                     "--standalone", "--metrics", "9090")
    plain = helm("template", "r1", str(chart)).stdout
    assert "kind: ServiceMonitor" not in plain and "name: lantern-monitored-metrics" in plain
    docs = [doc for doc in yaml.safe_load_all(helm("template", "r1", str(chart), "--set", "serviceMonitor.enabled=true",
                                                   "--set", "serviceMonitor.interval=15s").stdout) if doc]
    [monitor] = [doc for doc in docs if doc["kind"] == "ServiceMonitor"]
    assert monitor["spec"]["endpoints"] == [{"port": "metrics", "path": "/metrics", "interval": "15s"}]
    wrong = helm("template", "r1", str(chart), "--set", "serviceMonitor.interval=soon", check=False)
    assert wrong.returncode != 0 and "interval" in wrong.stderr, wrong.stderr
    taken = kopf_cli("deploy", "generate", "--output", str(tmp_path / "out"), "--image", "x:1", "--metrics", "8080",
                     str(CHILDREN))
    assert taken.returncode != 0 and "is the liveness probe's port" in taken.stderr


def test_verify_names_what_the_code_needs_now_and_the_chart_lacks(crd: None, tmp_path: Path) -> None:
    script = tmp_path / "handlers.py"
    script.write_text(GREETER)
    kopf = Path(sys.executable).with_name("kopf")

    def cli(*args: str, cwd: Path = tmp_path) -> subprocess.CompletedProcess[str]:
        return subprocess.run([str(kopf), "deploy", *args], capture_output=True, text=True, cwd=cwd, check=False,
                              timeout=60)

    made = cli("generate", "handlers.py", "--image", "greeter:1", "-A", "--standalone", "--name", "verified")
    assert made.returncode == 0, made.stderr
    (tmp_path / "chart" / "templates" / "notes.yaml").write_text("# a template of the user's own\n")
    (tmp_path / "chart" / "values.yaml").write_text("image: greeter:2\nreplicas: 3\n")  # values are the user's
    same = cli("verify", "chart")
    assert same.returncode == 0, same.stdout + same.stderr
    assert "The chart in chart is what the code makes now." in same.stdout
    assert "templates/notes.yaml: not made by `kopf deploy generate`" in same.stderr

    # The handlers now read ConfigMaps: the chart's roles are behind the code.
    script.write_text(GREETER + "\n@kopf.on.event('configmaps')\ndef seen(**_):\n    pass\n")
    behind = cli("verify", "chart")
    assert behind.returncode == 1, behind.stdout + behind.stderr
    assert "templates/rbac.yaml: not what the code makes now:" in behind.stdout
    assert '+    resources: ["configmaps"]' in behind.stdout

    elsewhere = cli("verify", str(tmp_path / "chart"), cwd=tmp_path.parent)
    assert elsewhere.returncode != 0 and "run `kopf deploy verify` where `kopf deploy generate` ran" in elsewhere.stderr
    (tmp_path / "plain").mkdir()
    (tmp_path / "plain" / "Chart.yaml").write_text("apiVersion: v2\nname: plain\nversion: 1.0.0\n")
    plain = cli("verify", "plain")
    assert plain.returncode != 0 and "is not a chart of `kopf deploy generate`" in plain.stderr


def test_a_chart_generated_again_keeps_nothing_that_its_options_no_longer_make(crd: None, tmp_path: Path) -> None:
    script = tmp_path / "handlers.py"
    script.write_text(GREETER)
    chart = generate(tmp_path, str(script), "--image", "g:1", "-A", "--standalone", "--name", "again",
                     "--metrics", "9090", "--mount", "--crd", str(CRD))
    assert {"templates/metrics.yaml", "templates/handlers.yaml", "files/handlers.py",
            "crds/greetings.demo.kopf.dev.yaml"} <= {p.relative_to(chart).as_posix() for p in chart.rglob("*")}
    generate(tmp_path, str(script), "--image", "g:1", "-A", "--standalone", "--name", "again")
    left = {p.relative_to(chart).as_posix() for p in chart.rglob("*") if p.is_file()}
    assert left == {"Chart.yaml", "values.yaml", "values.schema.json", ".helmignore", "templates/rbac.yaml",
                    "templates/deployment.yaml", "templates/pdb.yaml"}
    assert helm("lint", str(chart)).returncode == 0


POLITE = webhooks.POLITE + """
@kopf.on.mutate('greetings', operations=['CREATE'])
def signed(patch, **_):
    patch.setdefault('metadata', {}).setdefault('labels', {})['signed'] = 'by-the-operator'
"""


def greeting(namespace: str, name: str, text: str) -> str:
    return json.dumps({"apiVersion": "demo.kopf.dev/v1", "kind": "Greeting",
                       "metadata": {"name": name, "namespace": namespace}, "spec": {"greeting": text}})


def served_certificate(port: int) -> bytes:
    """The certificate that the server on this machine's port presents, as DER."""
    return ssl.PEM_cert_to_DER_cert(ssl.get_server_certificate(("127.0.0.1", port), timeout=5))


def leaf(chain: bytes) -> bytes:
    """The first certificate of a PEM chain (the server's own), as DER."""
    end = "-----END CERTIFICATE-----"
    return ssl.PEM_cert_to_DER_cert(chain.decode().split(end)[0] + end + "\n")


def issued_certificate(namespace: str, name: str, tmp_path: Path) -> tuple[Path, dict[str, bytes]]:
    """cert-manager's certificate of the release's webhooks, once issued, in a folder as the
    kubelet mounts it; its data."""
    secret = f"{name}-webhooks-tls"
    eventually(lambda: kubectl("get", "secret", secret, "-n", namespace, "--ignore-not-found"), timeout=60,
               what="cert-manager's Secret of the server's certificate")
    certs = tmp_path / "webhooks"
    return certs, certmanager.mount(namespace, secret, certs)


def routed_here(namespace: str, name: str) -> None:
    """The release's webhook Service sent to this machine, where the operator listens, as
    kube-proxy would send it to the pod (the plane has none): the API server then calls
    https://localhost:PORT (the Service's port, free here) for the Service's name."""
    kubectl("patch", "service", f"{name}-webhooks", "-n", namespace, "--type=merge", "-p",
            json.dumps({"spec": {"type": "ExternalName", "externalName": "localhost"}}))


def test_a_webhook_operators_chart_is_served_with_cert_managers_certificate(
        crd: None, cert_manager: None, namespace: str, tmp_path: Path) -> None:
    script = tmp_path / "operator.py"
    script.write_text(POLITE)
    name = f"greeter-{namespace}"
    chart = generate(tmp_path, str(script), "--image", "registry.example/greeter:1.0.0", "--crd", str(CRD),
                     "-n", namespace, "--standalone", "--name", name)
    assert helm("lint", str(chart)).stdout.endswith("1 chart(s) linted, 0 chart(s) failed\n")
    wrong = helm("install", "greeter", str(chart), "-n", namespace, "--set", "webhooks.issuer.name=ca", check=False)
    assert wrong.returncode != 0 and "webhooks" in wrong.stderr, "an issuer without its kind is refused"
    port = free_port()  # (the Service's: see routed_here())
    helm("install", "greeter", str(chart), "-n", namespace, "--set", f"webhooks.port={port}")
    try:
        # cert-manager issues the server's certificate, signed by the chart's own CA...
        certs, issued = issued_certificate(namespace, name, tmp_path)
        assert issued["ca.crt"] != issued["tls.crt"], "signed by a CA, not self-signed"
        # ... and its cainjector puts that CA into both configurations.
        configured = kubectl_json("get", "validatingwebhookconfiguration", f"{name}-{namespace}")
        assert configured["webhooks"][0]["namespaceSelector"]["matchExpressions"] == [
            {"key": "kubernetes.io/metadata.name", "operator": "In", "values": [namespace]}], "the values' namespaces"
        for kind in ("validatingwebhookconfiguration", "mutatingwebhookconfiguration"):
            injected = eventually(lambda kind=kind: kubectl("get", kind, f"{name}-{namespace}", "-o",
                                                            "jsonpath={.webhooks[0].clientConfig.caBundle}"),
                                  what=f"the CA in the {kind}")
            assert base64.b64decode(injected) == issued["ca.crt"]
        routed_here(namespace, name)

        found = deployment(namespace, name)
        [container] = found["spec"]["template"]["spec"]["containers"]
        mounted = {mount["name"]: mount["mountPath"] for mount in container["volumeMounts"]}
        assert mounted["webhooks"] == "/etc/kopf/webhooks"
        kubeconfig = account_kubeconfig(name, tmp_path, namespace)
        env = {"KUBECONFIG": str(kubeconfig), "KOPF_CHART_CERTIFICATES": str(certs),
               "KOPF_CHART_WEBHOOK_PORT": str(port)}
        operator = run_as_the_deployment_does(found, script, tmp_path, env)
        try:
            operator.wait_for(rf"Serving the webhooks on port {port} with the chart's certificate from {certs}; the "
                              r"chart configures them .*; instead of settings.admission.server=.*WebhookAutoServer")
            # The API server calls the operator through the chart's Service, trusting the injected CA.
            refusal = eventually(lambda: "Greetings are polite here." in kubectl(
                "create", "-f", "-", input=greeting(namespace, "rude", "go away"), check=False),
                what="the webhook refuses", timeout=60)
            assert refusal
            kubectl("create", "-f", "-", input=greeting(namespace, "kind", "hello"))
            labels = kubectl_json("get", "greeting", "kind", "-n", namespace)["metadata"]["labels"]
            assert labels["signed"] == "by-the-operator"
            assert served_certificate(port) == leaf(issued["tls.crt"])

            # cert-manager renews the certificate (as `cmctl renew` asks it to); the kubelet updates
            # the files; the operator serves the new one, without a restart.
            kubectl("patch", "certificate", f"{name}-webhooks", "-n", namespace, "--subresource=status",
                    "--type=json", "-p", json.dumps([{"op": "add", "path": "/status/conditions/-", "value": {
                        "type": "Issuing", "status": "True", "reason": "ManuallyTriggered",
                        "message": "Renewed by the test", "lastTransitionTime": "2026-01-01T00:00:00Z"}}]))
            def remounted() -> dict[str, bytes] | None:
                data = certmanager.mount(namespace, f"{name}-webhooks-tls", certs)
                return data if data["tls.crt"] != issued["tls.crt"] else None
            renewed = eventually(remounted, what="the renewed certificate", timeout=60)
            assert renewed["ca.crt"] == issued["ca.crt"], "the CA stays: the configurations need no change"
            eventually(lambda: served_certificate(port) == leaf(renewed["tls.crt"]), timeout=30,
                       what="the renewed certificate served")
            assert operator.process.poll() is None
            assert "Greetings are polite here." in kubectl("create", "-f", "-", check=False,
                                                           input=greeting(namespace, "rude2", "go away"))
            # The operator configured nothing itself (the chart's RBAC grants no such rights).
            assert "greeter.example.com" not in kubectl("get", "validatingwebhookconfigurations", "-o", "name")
        finally:
            operator.stop()
        assert not refused(operator.output), operator.output
    finally:
        helm("uninstall", "greeter", "-n", namespace, "--wait")
    for kind in ("validatingwebhookconfiguration", "mutatingwebhookconfiguration"):
        assert kubectl("get", kind, f"{name}-{namespace}", "--ignore-not-found", "-o", "name") == ""
    left = kubectl("get", "service,certificate,issuer", "-n", namespace, "-o", "name")
    assert left == "", left
    # cert-manager's Secrets stay (it never deletes them by default), labelled as the release's.
    secrets = kubectl("get", "secret", "-n", namespace, "-l", "app.kubernetes.io/instance=greeter", "-o", "name")
    assert sorted(secrets.split()) == [f"secret/{name}-ca", f"secret/{name}-webhooks-tls"]


def test_a_release_is_verified_against_the_code(crd: None, namespace: str, tmp_path: Path) -> None:
    script = tmp_path / "handlers.py"
    script.write_text(GREETER)
    name = f"checked-{namespace}"
    chart = generate(tmp_path, "--image", "kopf-rs:1", "--mount", "-n", namespace, "--standalone", "--name", name,
                     str(script))
    helm("install", "checked", str(chart), "-n", namespace)
    try:
        same = kopf_cli("deploy", "verify", "--release", "checked", "-n", namespace)
        assert same.returncode == 0, same.stdout + same.stderr
        assert f"The release checked in {namespace} is what the code makes now." in same.stdout
        # The code goes on and the folder is generated again, but the release is not upgraded:
        # the folder passes, the release does not.
        script.write_text(GREETER.replace("Hello", "Hello again"))
        generate(tmp_path, "--image", "kopf-rs:1", "--mount", "-n", namespace, "--standalone", "--name", name,
                 str(script))
        assert kopf_cli("deploy", "verify", str(chart)).returncode == 0
        behind = kopf_cli("deploy", "verify", "--release", "checked", "-n", namespace)
        assert behind.returncode == 1, behind.stdout + behind.stderr
        assert "files/handlers.py: not what the code makes now:" in behind.stdout
        assert "templates/deployment.yaml: not what the code makes now:" in behind.stdout  # (the files' digest)
    finally:
        helm("uninstall", "checked", "-n", namespace)
    absent = kopf_cli("deploy", "verify", "--release", "checked", "-n", namespace)
    assert absent.returncode != 0
    assert f"No deployed release 'checked' in the namespace {namespace!r}" in absent.stderr
    both = kopf_cli("deploy", "verify", str(chart), "--release", "checked")
    assert both.returncode == 2 and "Give either a chart's folder or --release NAME." in both.stderr


def test_a_conversion_operators_chart_points_its_crd_at_the_release(cert_manager: None, namespace: str,
                                                                    tmp_path: Path) -> None:
    kubectl("delete", "crd", CONTACTS, "--ignore-not-found", "--timeout=60s")  # (the chart's to install)
    script = tmp_path / "operator.py"
    shutil.copy(EXAMPLES / "conversion" / "operator.py", script)
    kubectl("apply", "-f", str(EXAMPLES / "conversion" / "crd.yaml"))  # (for the discovery of its versions)
    kubectl("wait", "--for=condition=Established", f"crd/{CONTACTS}", "--timeout=30s")
    name = f"contacts-{namespace}"
    chart = generate(tmp_path, str(script), "--image", "contacts:1", "--crd", str(EXAMPLES / "conversion" / "crd.yaml"),
                     "-n", namespace, "--standalone", "--name", name)
    assert not (chart / "crds").exists(), "a converted CRD is a template: it names the release's Service"
    kubectl("delete", "crd", CONTACTS, "--timeout=60s")
    port = free_port()
    helm("install", "contacts", str(chart), "-n", namespace, "--set", f"webhooks.port={port}")
    try:
        certs, issued = issued_certificate(namespace, name, tmp_path)
        webhook = eventually(lambda: conversion().get("webhook", {}).get("clientConfig", {}).get("caBundle") and
                             conversion()["webhook"], what="the CA in the CRD's conversion")
        assert base64.b64decode(webhook["clientConfig"]["caBundle"]) == issued["ca.crt"]
        assert webhook["clientConfig"]["service"] == {"name": f"{name}-webhooks", "namespace": namespace,
                                                      "port": port, "path": f"/conversion/{CONTACTS}"}
        routed_here(namespace, name)
        kubeconfig = account_kubeconfig(name, tmp_path, namespace)
        env = {"KUBECONFIG": str(kubeconfig), "KOPF_CHART_CERTIFICATES": str(certs),
               "KOPF_CHART_WEBHOOK_PORT": str(port)}
        operator = run_as_the_deployment_does(deployment(namespace, name), script, tmp_path, env)
        try:
            operator.wait_for(r"the chart configures them .*; instead of .*settings.conversion.managed=True")
            create(contact("ada", namespace, name="Ada Lovelace"))  # stored as v1
            read_v2 = eventually(lambda: read("ada", namespace, "v2").returncode == 0
                                 and read_ok("ada", namespace, "v2"), what="the contact read as v2", timeout=60)
            assert read_v2["spec"] == {"first": "Ada", "last": "Lovelace"}
        finally:
            operator.stop()
        assert not refused(operator.output), operator.output
    finally:
        helm("uninstall", "contacts", "-n", namespace, "--wait")
        # Helm keeps the CRD (and its objects); it is the test's to delete.
        assert kubectl("get", "crd", CONTACTS, "--ignore-not-found", "-o", "name").strip()
        kubectl("delete", "crd", CONTACTS, "--ignore-not-found", "--wait=false")


def objects(text: str) -> list[dict[str, Any]]:
    """The YAML stream's objects, in an order of their own (Helm sorts by kind)."""
    return sorted((doc for doc in yaml.safe_load_all(text) if doc),
                  key=lambda doc: (doc["kind"], doc["metadata"].get("namespace", ""), doc["metadata"]["name"]))


def test_manifests_are_what_helm_renders(crd: None, namespace: str, tmp_path: Path) -> None:
    """`kopf deploy manifests` renders the charts without Helm: the same objects as `helm template`,
    with the generated values and with others in values.yaml; the API server takes them."""
    polite = tmp_path / "polite.py"
    polite.write_text(POLITE)
    variants = {
        "children": [str(CHILDREN), "-n", namespace, "--standalone", "--lease", "lantern", "--metrics", "9090",
                     "--crd", str(CRD)],
        "mounted": ["--mount", "-A", "--standalone", str(CHILDREN)],
        "webhooks": [str(polite), "-n", namespace, "-n", "elsewhere", "--standalone", "--crd", str(CRD)],
    }
    changed = {"replicas": 3, "logFormat": "json", "env": [{"name": "GREETERS", "value": "many"}],
               "serviceMonitor": {"enabled": True, "interval": "1m"}, "namespaces": [namespace, "third"],
               "webhooks": {"port": 8443, "issuer": {"name": "corporate", "kind": "ClusterIssuer"},
                            "duration": "24h", "renewBefore": "1h"}}
    for variant, args in variants.items():
        chart = generate(tmp_path / variant, "--image", "lantern:1", "--name", variant, *args)
        for edited in (False, True):
            if edited:
                values = yaml.safe_load((chart / "values.yaml").read_text())
                values.update({key: value for key, value in changed.items() if key in values})
                (chart / "values.yaml").write_text(yaml.safe_dump(values))
            ours = kopf_cli("deploy", "manifests", str(chart), "-n", namespace, "--release", "rel")
            assert ours.returncode == 0, ours.stderr
            helms = helm("template", "rel", str(chart), "-n", namespace, "--include-crds").stdout
            assert objects(ours.stdout) == objects(helms), f"{variant}, values edited: {edited}"
            if not edited:
                taken = kubectl("apply", "--dry-run=server", "-f", "-", input=json.dumps(
                    {"apiVersion": "v1", "kind": "List", "items": [
                        doc for doc in objects(ours.stdout) if not doc["apiVersion"].startswith("cert-manager.io/")]}))
                assert f"deployment.apps/{variant} created (server dry run)" in taken, taken
    # A template that the generator does not make is refused by name, not rendered wrongly.
    (chart / "templates" / "mine.yaml").write_text("kind: ConfigMap\ndata: {x: {{ .Values.image | upper }}}\n")
    refused_ = kopf_cli("deploy", "manifests", str(chart))
    assert refused_.returncode != 0
    assert "templates/mine.yaml: {{ ... upper }}: the generated charts use no function 'upper'" in refused_.stderr, \
        refused_.stderr
    # Values that the chart's schema refuses are refused here too, as Helm refuses them.
    values = yaml.safe_load((chart / "values.yaml").read_text())
    (chart / "values.yaml").write_text(yaml.safe_dump({**values, "replicas": "two"}))
    wrong = kopf_cli("deploy", "manifests", str(chart))
    assert wrong.returncode != 0 and "replicas: 'two' is not an integer" in wrong.stderr, wrong.stderr
    assert helm("template", "rel", str(chart), check=False).returncode != 0
