"""Pure functions of the Python package: toolkits, selectors, structures (no cluster)."""

from __future__ import annotations

import kopf
import pytest
from kopf._structures.references import Selector

OWNER = {"apiVersion": "demo.kopf.dev/v1", "kind": "Greeting",
         "metadata": {"name": "parent", "namespace": "ns1", "uid": "uid-1", "labels": {"app": "x"}}}


def test_adopt_sets_owner_name_namespace_labels() -> None:
    child: dict = {"kind": "Pod", "spec": {"template": {"metadata": {}}}}
    kopf.adopt(child, owner=OWNER, nested="spec.template")
    assert child["metadata"] == {
        "ownerReferences": [{"controller": True, "blockOwnerDeletion": True, "apiVersion": "demo.kopf.dev/v1",
                             "kind": "Greeting", "name": "parent", "uid": "uid-1"}],
        "generateName": "parent-", "namespace": "ns1", "labels": {"app": "x"},
    }
    assert child["spec"]["template"]["metadata"]["labels"] == {"app": "x"}
    kopf.adopt(child, owner=OWNER)  # idempotent
    assert len(child["metadata"]["ownerReferences"]) == 1


def test_naming_and_namespaces_respect_existing_values() -> None:
    child = {"metadata": {"name": "fixed", "namespace": "other"}}
    kopf.harmonize_naming(child, name="parent")
    kopf.adjust_namespace(child, namespace="ns1")
    assert child["metadata"] == {"name": "fixed", "namespace": "other"}
    kopf.harmonize_naming(child, name="parent", forced=True, strict=True)
    kopf.adjust_namespace(child, namespace="ns1", forced=True)
    assert child["metadata"] == {"name": "parent", "namespace": "ns1"}


def test_labels_and_owner_references_on_lists() -> None:
    children = [{"metadata": {"labels": {"app": "keep"}}}, {}]
    kopf.label(children, {"app": "new", "tier": "web"})
    assert [c["metadata"]["labels"] for c in children] == [{"app": "keep", "tier": "web"},
                                                          {"app": "new", "tier": "web"}]
    kopf.append_owner_reference(children, owner=OWNER)
    kopf.remove_owner_reference(children, owner=OWNER)
    assert [c["metadata"]["ownerReferences"] for c in children] == [[], []]


def test_toolkits_need_an_owner_outside_handlers() -> None:
    with pytest.raises(LookupError):
        kopf.adopt({})


def test_kubernetes_client_models() -> None:
    client = pytest.importorskip("kubernetes.client")
    pod = client.V1Pod()
    kopf.adopt(pod, owner=OWNER)
    assert pod.metadata.owner_references[0].uid == "uid-1"
    assert pod.metadata.generate_name == "parent-"
    assert pod.metadata.namespace == "ns1"
    assert pod.metadata.labels == {"app": "x"}


@pytest.mark.parametrize("args, expected", [
    (("kopfexamples",), {"any_name": "kopfexamples"}),
    (("kopfexamples.kopf.dev",), {"any_name": "kopfexamples", "group": "kopf.dev"}),
    (("kopfexamples.v1.kopf.dev",), {"any_name": "kopfexamples", "version": "v1", "group": "kopf.dev"}),
    (("kopf.dev", "kopfexamples"), {"any_name": "kopfexamples", "group": "kopf.dev"}),
    (("kopf.dev/v1", "kopfexamples"), {"any_name": "kopfexamples", "group": "kopf.dev", "version": "v1"}),
    (("v1", "pods"), {"any_name": "pods", "group": "", "version": "v1"}),
    (("kopf.dev", "v1", "kopfexamples"), {"any_name": "kopfexamples", "group": "kopf.dev", "version": "v1"}),
])
def test_selectors_parse_like_kopf(args: tuple, expected: dict) -> None:
    selector = Selector(*args)
    for key, value in expected.items():
        assert getattr(selector, key) == value


def test_selectors_reject_ambiguity() -> None:
    with pytest.raises(TypeError):
        Selector("pods", kind="Pod")
    with pytest.raises(TypeError):
        Selector()


def test_patch_and_body_views() -> None:
    raw = {"metadata": {"name": "n", "labels": {"a": "b"}}, "spec": {"x": 1}}
    body = kopf.Body(raw)
    assert body.meta.name == "n" and body.spec["x"] == 1 and dict(body.status) == {}
    raw["status"] = {"late": True}
    assert body.status["late"] is True  # views are live
    patch = kopf.Patch()
    patch.status["phase"] = "Done"
    patch.meta.labels["l"] = None
    assert patch == {"status": {"phase": "Done"}, "metadata": {"labels": {"l": None}}}


def test_memo_attributes() -> None:
    memo = kopf.Memo(a=1)
    memo.b = 2
    assert memo == {"a": 1, "b": 2} and memo.a == 1
    with pytest.raises(AttributeError):
        _ = memo.missing


def test_connection_info_for_the_engine() -> None:
    import base64
    pem = "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n"
    info = kopf.ConnectionInfo(server="https://h:6443", ca_data=base64.b64encode(pem.encode()).decode(),
                               token="t0ken")
    assert info.for_engine()["ca_data"] == pem  # kubeconfigs keep it base64-encoded; the core wants PEM
    assert info.for_engine()["token"] == "t0ken"
    rotating = info.for_engine(token_path="/var/run/secrets/kubernetes.io/serviceaccount/token")
    assert rotating["token"] is None and rotating["token_path"].endswith("/token")
    with pytest.raises(ValueError):
        kopf.ConnectionInfo(server="https://h", ca_path="/ca", ca_data="x")
