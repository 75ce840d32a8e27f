"""`kopf olm verify` against operator-framework's own validator (`operator-verify manifests`, built by
checks/run from the Go module proxy): both find a generated bundle valid, and both refuse the same
bundles broken on purpose, each for the same reason."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import kopf
import pytest
import yaml
from kopf._operating import olm as _olm
from kopf._operating.rbac import planning as _rbac
from kopf._operating.rbac import rules
from support.olm import failures, operator_verify

EXAMPLES = Path(__file__).parents[2] / "examples"
GREETINGS = kopf.Resource('demo.kopf.dev', 'v1', 'greetings', kind='Greeting', singular='greeting',
                          namespaced=True, subresources=frozenset({'status'}))


def written(tmp_path: Path) -> Path:
    """A bundle as `kopf olm generate` writes it, of a change handler of greetings."""
    registry = kopf.OperatorRegistry()
    kopf.on.create('greetings', registry=registry)(lambda **_: None)
    plan = _rbac.plan(registry=registry, resources=[GREETINGS], namespaces=['ns1'], clusterwide=False,
                      standalone=True, peering_name='default', lease_name=None, lease_namespace='ns1',
                      account='greeter', account_namespace='ns1')
    package, _ = _olm.package_of(name='greeter', project=None, icon=None)
    options = _olm.Options(image='example.com/greeter:1.0.0', version='1.0.0', channel='alpha',
                           output=tmp_path / 'bundle', crds=[EXAMPLES / 'crd.yaml'], previous_version=None,
                           package=package, entries=['/operator/handlers.py'], run_options=['--standalone'])
    files = _olm.bundle(plan, options, clusterwide=False, crds=[_olm.read_crd(EXAMPLES / 'crd.yaml')])
    for relative, text in files.items():
        (options.output / relative).parent.mkdir(parents=True, exist_ok=True)
        (options.output / relative).write_text(text)
    return options.output


def edit_csv(bundle: Path, change: Callable[[dict[str, Any]], None]) -> None:
    [path] = (bundle / "manifests").glob("*.clusterserviceversion.yaml")
    csv = yaml.safe_load(path.read_text())
    change(csv)
    path.write_text(yaml.safe_dump(csv, sort_keys=False))


def test_a_generated_bundle_is_valid_for_both(tmp_path: Path) -> None:
    bundle = written(tmp_path)
    errors, warnings = _olm.verify(bundle)
    assert errors == []
    assert warnings == ["greeter.clusterserviceversion.yaml: demo.kopf.dev/v1, Kind=Greeting: provided API should "
                        "have an example annotation (alm-examples)"]
    assert failures(operator_verify(bundle)) == []


def without_the_crd(bundle: Path) -> None:
    (bundle / "manifests" / "greetings.demo.kopf.dev.crd.yaml").unlink()


def with_a_bad_version(bundle: Path) -> None:
    edit_csv(bundle, lambda csv: csv["spec"].update(version="one"))


def with_no_install_mode(bundle: Path) -> None:
    edit_csv(bundle, lambda csv: [mode.update(supported=False) for mode in csv["spec"]["installModes"]])


def with_an_unowned_crd(bundle: Path) -> None:
    edit_csv(bundle, lambda csv: csv["spec"]["customresourcedefinitions"].update(owned=[]))


def with_a_bad_name(bundle: Path) -> None:
    edit_csv(bundle, lambda csv: csv["metadata"].update(name="Greeter_Operator.v1.0.0"))


def with_duplicate_install_modes(bundle: Path) -> None:
    edit_csv(bundle, lambda csv: csv["spec"]["installModes"].append({"type": "AllNamespaces", "supported": True}))


def with_a_conversion_in_one_namespace(bundle: Path) -> None:
    edit_csv(bundle, lambda csv: csv["spec"].update(webhookdefinitions=[{
        "type": "ConversionWebhook", "generateName": "greetings.greeter.kopf.dev", "deploymentName": "greeter",
        "containerPort": 443, "targetPort": 9443, "webhookPath": "/conversion/greetings.demo.kopf.dev",
        "conversionCRDs": ["greetings.demo.kopf.dev"], "sideEffects": "None", "admissionReviewVersions": ["v1"]}]))


@pytest.mark.parametrize("breaking, ours, theirs", [
    (without_the_crd, "the owned CRD greetings.demo.kopf.dev (v1, Greeting) is not in the bundle",
     "not found in bundle"),
    (with_a_bad_version, "spec.version 'one' is not a semantic version", "0one"),
    (with_no_install_mode, "spec.installModes: none is supported", "none of InstallModeTypes are supported"),
    (with_an_unowned_crd, "Kind=Greeting is in the bundle but not owned by the CSV", "not defined in CSV"),
    (with_a_bad_name, "metadata.name 'Greeter_Operator.v1.0.0' is not a DNS-1123 subdomain", "metadata.name"),
    (with_a_conversion_in_one_namespace, "only AllNamespaces InstallModeType is supported when conversionCRDs",
     "only AllNamespaces InstallModeType is supported when conversionCRDs"),
])
def test_a_broken_bundle_is_refused_by_both_for_the_same_reason(
        tmp_path: Path, breaking: Callable[[Path], None], ours: str, theirs: str) -> None:
    bundle = written(tmp_path)
    breaking(bundle)
    errors, _ = _olm.verify(bundle)
    assert any(ours in error for error in errors), errors
    found = failures(operator_verify(bundle))
    assert any(theirs in line for line in found), found


def test_ours_is_stricter_where_olm_would_fail_later(tmp_path: Path) -> None:
    """A version that is not quite semantic (`1.0`: operator-verify reads it tolerantly, OLM's
    catalogs order versions strictly) and a repeated install mode (it keeps the last one
    silently): refused here, passed there."""
    bundle = written(tmp_path)
    edit_csv(bundle, lambda csv: csv["spec"].update(version="1.0"))
    with_duplicate_install_modes(bundle)
    errors, _ = _olm.verify(bundle)
    assert any("spec.version '1.0' is not a semantic version" in error for error in errors), errors
    assert any("spec.installModes: duplicates" in error for error in errors), errors
    assert failures(operator_verify(bundle)) == []


def test_an_owned_version_that_the_crd_does_not_serve_is_refused(tmp_path: Path) -> None:
    """OLM keeps such a CSV pending (its requirement, the owned API, is never available);
    operator-verify passes it."""
    bundle = written(tmp_path)
    path = bundle / "manifests" / "greetings.demo.kopf.dev.crd.yaml"
    crd = yaml.safe_load(path.read_text())
    crd["spec"]["versions"][0]["served"] = False
    path.write_text(yaml.safe_dump(crd, sort_keys=False))
    errors, _ = _olm.verify(bundle)
    assert errors == ["greeter.clusterserviceversion.yaml: the owned CRD greetings.demo.kopf.dev's version v1 is "
                      "not served (served: false in greetings.demo.kopf.dev.crd.yaml): OLM keeps the CSV pending"]
    assert failures(operator_verify(bundle)) == []


def test_webhook_definitions_are_checked_as_olm_installs_them(tmp_path: Path) -> None:
    """What operator-verify does not check but OLM refuses at install: the deployment named, the
    webhook's fields, the converted CRD in the bundle."""
    bundle = written(tmp_path)
    edit_csv(bundle, lambda csv: csv["spec"].update(webhookdefinitions=[
        {"type": "ValidatingAdmissionWebhook", "generateName": "check.greeter", "deploymentName": "other",
         "containerPort": 70000, "sideEffects": "Some", "admissionReviewVersions": []},
        {"type": "ConversionWebhook", "generateName": "c.greeter.kopf.dev", "deploymentName": "greeter",
         "sideEffects": "None", "admissionReviewVersions": ["v1"], "conversionCRDs": ["absent.demo.kopf.dev"]},
        {"type": "Ignoring", "generateName": "x.greeter.kopf.dev", "deploymentName": "greeter",
         "sideEffects": "None", "admissionReviewVersions": ["v1"]},
    ]))
    errors, _ = _olm.verify(bundle)
    first, second, third = (f"greeter.clusterserviceversion.yaml: spec.webhookdefinitions[{at}]" for at in range(3))
    assert errors == [
        f"{first}: generateName 'check.greeter' is not a DNS name of three labels or more",
        f"{first}: deploymentName 'other' is not a deployment of spec.install",
        f"{first}: containerPort 70000 is not a port",
        f"{first}: sideEffects is neither None nor NoneOnDryRun",
        f"{first}: no admissionReviewVersions",
        f"{second}: only AllNamespaces InstallModeType is supported when conversionCRDs is present",
        f"{second}: conversionCRDs not in the bundle: absent.demo.kopf.dev",
        f"{third}: type 'Ignoring' is not one of ValidatingAdmissionWebhook, MutatingAdmissionWebhook, "
        "ConversionWebhook",
    ]


def test_the_command_prints_what_it_finds_and_fails_on_errors(tmp_path: Path) -> None:
    bundle = written(tmp_path)
    def kopf_olm_verify() -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "kopf", "olm", "verify", str(bundle)], capture_output=True,
                              text=True, timeout=60, check=False)
    good = kopf_olm_verify()
    assert good.returncode == 0, good.stderr
    assert "Warning: greeter.clusterserviceversion.yaml: demo.kopf.dev/v1, Kind=Greeting" in good.stdout
    assert f"The bundle in {bundle} is valid (1 warnings)." in good.stdout
    without_the_crd(bundle)
    bad = kopf_olm_verify()
    assert bad.returncode == 1
    assert "Error: greeter.clusterserviceversion.yaml: the owned CRD greetings.demo.kopf.dev" in bad.stdout


def test_the_bundles_crds_are_the_custom_resources_served_not_kubernetes_nor_peering() -> None:
    plan = rules.Plan(account='greeter', account_namespace='ns1')
    for group, resource in [('kopf.dev', 'kopfexamples'), ('kopf.dev', 'kopfexamples/status'),
                            ('kopf.dev', 'clusterkopfpeerings'), ('zalando.org', 'kopfpeerings'),
                            ('coordination.k8s.io', 'leases'), ('networking.k8s.io', 'networkpolicies'),
                            ('', 'pods'), ('apps', 'deployments'), ('demo.kopf.dev', 'greetings')]:
        plan.need(group, resource, [None], ['list'], 'a test')
    assert _olm.served_crds(plan) == ['greetings.demo.kopf.dev', 'kopfexamples.kopf.dev']
