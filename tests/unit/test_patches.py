"""kopf.Patch's functions (`fns`) and JSON-patches, as Kopf's handlers and webhooks use them."""

from __future__ import annotations

from typing import Any

import kopf
import pytest


def add_finalizer(body: dict[str, Any]) -> None:
    body.setdefault('metadata', {}).setdefault('finalizers', []).append('x/y')


def test_an_empty_patch_with_functions_is_not_empty() -> None:
    patch = kopf.Patch(fns=[add_finalizer])
    assert patch and patch.fns == [add_finalizer] and dict(patch) == {}
    assert repr(patch) == f"Patch(fns={[add_finalizer]!r})"
    patch.clear()
    assert not patch and repr(patch) == "Patch()"


def test_functions_are_kept_when_copied() -> None:
    patch = kopf.Patch({'spec': {'a': 1}}, fns=[add_finalizer])
    copied = kopf.Patch(patch)
    assert copied.fns == [add_finalizer] and copied == {'spec': {'a': 1}}


def test_json_patch_of_the_merge_patch_and_the_functions() -> None:
    body = {'metadata': {'name': 'n', 'labels': {'a': '1'}}, 'spec': {'x': 1, 'gone': 2}}
    patch = kopf.Patch(body=kopf.Body(body), fns=[add_finalizer])
    patch.spec['x'] = 10
    patch.spec['gone'] = None
    patch.spec['absent'] = None  # deleting what is not there: no operation
    patch.metadata.labels['a'] = '1'  # setting what is there: no operation
    patch.metadata.labels['b/c'] = '2'
    ops = patch.as_json_patch()
    assert sorted(ops, key=lambda op: op['path']) == [
        {'op': 'add', 'path': '/metadata/finalizers', 'value': ['x/y']},
        {'op': 'add', 'path': '/metadata/labels/b~1c', 'value': '2'},
        {'op': 'remove', 'path': '/spec/gone'},
        {'op': 'replace', 'path': '/spec/x', 'value': 10},
    ]
    assert body == {'metadata': {'name': 'n', 'labels': {'a': '1'}}, 'spec': {'x': 1, 'gone': 2}}  # untouched


def test_json_patch_needs_a_body() -> None:
    assert kopf.Patch().as_json_patch() == []
    with pytest.raises(ValueError, match="original body"):
        kopf.Patch({'spec': {'a': 1}}).as_json_patch()
    assert kopf.Patch({'spec': {'a': 1}}).as_json_patch({'spec': {}}) == [
        {'op': 'add', 'path': '/spec/a', 'value': 1}]


def test_the_engine_gets_the_functions_folded_into_the_merge_patch() -> None:
    body = kopf.Body({'metadata': {'name': 'n', 'finalizers': ['a/b']}, 'spec': {'x': 1}})
    patch = kopf.Patch(body=body)
    patch.spec['y'] = 2
    patch.fns.append(add_finalizer)
    patch.fns.append(lambda b: b['spec'].pop('x'))
    assert patch._as_merge_patch() == {'metadata': {'finalizers': ['a/b', 'x/y']}, 'spec': {'x': None, 'y': 2}}
    plain = kopf.Patch({'spec': {'y': 2}})
    assert plain._as_merge_patch() == {'spec': {'y': 2}}
