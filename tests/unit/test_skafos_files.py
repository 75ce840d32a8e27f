"""What skafos reads before it watches: the CRD file (Skafos' v1beta1 files and today's v1)
and the leader election's names (Skafos' ConfigMap name from the pod's host name)."""

import os
from pathlib import Path

import pytest
from skafos.event_listener import EventListener
from skafos.stream_watch import StreamWatch, _crd_spec, _election

V1BETA1 = """
apiVersion: apiextensions.k8s.io/v1beta1
kind: CustomResourceDefinition
metadata: {name: superpods.crds.example.com}
spec:
  group: crds.example.com
  names: {kind: SuperPod, plural: superpods, singular: superpod}
  scope: Namespaced
  version: v1
"""

V1 = """
# a comment, then two documents: the CRD is found among them
apiVersion: v1
kind: Namespace
metadata: {name: x}
---
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata: {name: things.example.com}
spec:
  group: example.com
  names: {kind: Thing, plural: things}
  scope: Cluster
  versions:
    - {name: v1alpha1, served: true, storage: false}
    - {name: v1, served: true, storage: true}
"""


def written(tmp_path: Path, text: str) -> str:
    path = tmp_path / "crd.yaml"
    path.write_text(text)
    return str(path)


def test_skafos_v1beta1_crd_files_are_read(tmp_path: Path) -> None:
    spec = _crd_spec(written(tmp_path, V1BETA1))
    assert (spec['group'], spec['version'], spec['plural'], spec['kind'], spec['namespaced']) == \
        ('crds.example.com', 'v1', 'superpods', 'SuperPod', True)


def test_v1_crd_files_give_their_storage_version_and_scope(tmp_path: Path) -> None:
    spec = _crd_spec(written(tmp_path, V1))
    assert (spec['group'], spec['version'], spec['plural'], spec['namespaced']) == \
        ('example.com', 'v1', 'things', False)
    assert spec['crd']['metadata']['name'] == 'things.example.com'


@pytest.mark.parametrize('text, message', [
    ("apiVersion: v1\nkind: Namespace\n", "has no CustomResourceDefinition"),
    ("kind: CustomResourceDefinition\nspec: {group: g}\n", "has no spec.version(s), spec.names.plural"),
    ("kind: [unclosed\n", "cannot read the CRD file"),
])
def test_bad_crd_files_are_refused_clearly(tmp_path: Path, text: str, message: str) -> None:
    with pytest.raises(ValueError, match=message.replace('(', r'\(').replace(')', r'\)')):
        _crd_spec(written(tmp_path, text))


def test_a_missing_crd_file_is_refused_clearly(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="cannot read the CRD file .*nowhere.yaml"):
        _crd_spec(str(tmp_path / "nowhere.yaml"))


def test_the_election_configmap_is_named_as_skafos_names_it(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv('HOSTNAME', 'my-operator-5d9f8c7b-x2x4z')
    assert _election('ops', 'things') == {'namespace': 'ops', 'name': 'my-operator-le',
                                          'identity': 'my-operator-5d9f8c7b-x2x4z'}
    monkeypatch.setenv('HOSTNAME', 'laptop')  # not a Deployment's pod: named after the resource
    assert _election('ops', 'things')['name'] == 'things-le'
    monkeypatch.delenv('HOSTNAME')
    assert _election('ops', 'things')['identity'].endswith(f"-{os.getpid()}")


def test_targets_given_as_dicts_are_refused_at_once() -> None:
    with pytest.raises(TypeError, match="must be the path to a CRD file"):
        StreamWatch({'method': lambda api: api.list_namespace}, [])


def test_listeners_without_an_event_have_nothing_yet() -> None:
    listener = EventListener()
    assert (listener.event, listener.metadata, listener.get_name()) == (None, None, 'EventListener')
    event = {'type': 'MODIFIED', 'object': {'metadata': {'name': 'x'}}}
    assert listener.process(event, {}) is True
    assert listener.metadata == {'name': 'x'}
