"""`kopf olm generate`: OLM bundles of operators, checked by operator-framework's own validator
(`operator-verify manifests`, built by tests/run from the Go module proxy) and against what
`kopf rbac generate` says the handlers need; the CSV's Deployment taken by the API server
(`--dry-run=server`). Kopf has no OLM bundles: nothing to compare with side by side."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import yaml
from conftest import EXAMPLES, kopf_cli, kubectl
from olm import failures, operator_verify
from operators import write_script

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


def test_a_namespaced_operators_bundle_passes_operator_frameworks_validator(crd: None, tmp_path: Path) -> None:
    (tmp_path / "pyproject.toml").write_text(PROJECT)
    options = ("-n", "default", "--standalone", "--name", "greeter")
    bundle = generate(tmp_path, str(OPERATING), "--version", "1.2.3", "--crd", str(CRD), *options)
    # The default validators: nothing but the missing example of the CRD's objects.
    findings = operator_verify(bundle)
    assert failures(findings) == [], findings
    assert all("example annotation" in line for line in findings), findings
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
                "metadata": {"name": deployment["name"], "namespace": "default"}, "spec": deployment["spec"]}
    kubectl("apply", "--dry-run=server", "-f", "-", input=json.dumps(manifest))


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

    assert "no --crd file defines: greetings.demo.kopf.dev" in refused(str(OPERATING), "--version", "1.0.0", "-A")
    assert "'1.0' is not a semantic version" in refused(str(OPERATING), "--version", "1.0", "--crd", str(CRD))
    hooks = write_script(tmp_path, "import kopf\n\n@kopf.on.validate('greetings')\ndef check(**_): pass\n")
    assert "cannot serve webhooks yet (Webhook 'check')" in refused(str(hooks), "--version", "1.0.0",
                                                                      "--crd", str(CRD))
    no_name = kopf_cli("olm", "generate", "--image", "x:1", "--version", "1.0.0", "--project",
                       str(tmp_path / "none.toml"), str(OPERATING))
    assert no_name.returncode != 0 and "give --package NAME" in no_name.stderr
