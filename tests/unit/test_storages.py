"""The storages' Python side: Kopf's formats for custom storages that call ``super()``,
and which storages the engine runs natively (described) or calls as Python (custom)."""

from __future__ import annotations

import json
from typing import Any

import kopf
import pytest
from kopf._structures import diffbase as _diffbase
from kopf._structures import progress as _progress


def test_annotation_keys_are_formed_and_hashed_as_kopf_does() -> None:
    storage = kopf.AnnotationsProgressStorage()
    assert list(storage.make_keys('create_fn')) == ['kopf.zalando.org/create_fn']
    assert list(storage.make_keys('create_fn/sub<1>')) == ['kopf.zalando.org/create_fn.sub_1_']
    long_key = 'a_very_long_handler_name_that_goes_on_and_on_and_on'
    assert list(storage.make_keys(long_key)) == [
        f'kopf.zalando.org/{long_key}',
        'kopf.zalando.org/a_very_long_handler_name_that_goes_on_a-2xD4dQ',
    ]
    assert list(storage.make_keys('x' * 70)) == [
        f"kopf.zalando.org/{'x' * 56}-j8bZbQ", f"kopf.zalando.org/{'x' * 39}-j8bZbQ"]
    v2_only = kopf.AnnotationsProgressStorage(v1=False)
    assert list(v2_only.make_keys(long_key)) == [f'kopf.zalando.org/{long_key}']
    rs = kopf.Body({'kind': 'ReplicaSet', 'metadata': {'ownerReferences': [{'kind': 'Deployment'}]}})
    assert list(storage.make_keys('h', body=rs)) == ['kopf.zalando.org/h-ofDRS']
    with pytest.raises(ValueError, match="needs a non-empty prefix"):
        kopf.AnnotationsProgressStorage(prefix='')


def test_progress_records_in_annotations() -> None:
    storage = kopf.AnnotationsProgressStorage(prefix='my-op.example.com')
    body = kopf.Body({'metadata': {'annotations': {}}})
    patch = kopf.Patch()
    record: Any = {'started': '2026-01-01T00:00:00.000000+00:00', 'stopped': None, 'retries': 1,
                   'success': False, 'failure': False, 'message': None}
    storage.store(key=kopf.HandlerId('h'), record=record, body=body, patch=patch)
    assert patch == {'metadata': {'annotations': {
        'my-op.example.com/h': '{"started":"2026-01-01T00:00:00.000000+00:00","retries":1,'
                               '"success":false,"failure":false}',
        'my-op.example.com/kopf-managed': 'yes',
    }}}
    stored = kopf.Body(json.loads(json.dumps(dict(patch))))
    assert storage.fetch(key=kopf.HandlerId('h'), body=stored) == {
        'started': '2026-01-01T00:00:00.000000+00:00', 'retries': 1, 'success': False, 'failure': False}
    purge = kopf.Patch()
    storage.purge(key=kopf.HandlerId('h'), body=stored, patch=purge)
    assert purge == {'metadata': {'annotations': {'my-op.example.com/h': None}}}
    essence = storage.clear(essence={'metadata': {'annotations': {'my-op.example.com/h': '{}'}}, 'spec': {}})
    assert essence == {'spec': {}}


def test_status_storages_and_their_cleaning() -> None:
    storage = kopf.StatusProgressStorage(name='op')
    assert storage.field == ('status', 'op', 'progress')
    patch = kopf.Patch()
    storage.store(key=kopf.HandlerId('h'), record={'retries': 2}, body=kopf.Body({}), patch=patch)
    assert patch == {'status': {'op': {'progress': {'h': {'retries': 2}}}}}
    assert storage.clear(essence={'status': {'op': {'progress': {}}}, 'spec': {}}) == {'spec': {}}

    diffbase = kopf.StatusDiffBaseStorage(ignored_fields=['spec.skip'])
    body = kopf.Body({'kind': 'X', 'metadata': {'name': 'n', 'labels': {'l': '1'}},
                      'spec': {'a': 1, 'skip': 2}, 'status': {'kopf': {'last-handled-configuration': '{}'}}})
    essence = diffbase.build(body=body, extra_fields=['status.kopf'])
    assert essence == {'spec': {'a': 1}, 'metadata': {'labels': {'l': '1'}}}
    patch = kopf.Patch()
    diffbase.store(body=body, patch=patch, essence=essence)
    assert patch == {'status': {'kopf': {'last-handled-configuration':
                                         '{"spec":{"a":1},"metadata":{"labels":{"l":"1"}}}'}}}
    assert diffbase.fetch(body=body) == {}


def test_the_default_diff_base_leaves_out_kopf_based_operators_annotations() -> None:
    body = kopf.Body({'metadata': {'annotations': {
        'a': '1', 'kubectl.kubernetes.io/last-applied-configuration': '{}',
        'kopf.zalando.org/last-handled-configuration': '{}', 'other.op/kopf-managed': 'yes', 'other.op/x': 'y',
    }}, 'spec': {'s': 1}})
    storage = kopf.AnnotationsDiffBaseStorage()
    essence = storage.build(body=body)
    assert essence == {'spec': {'s': 1}, 'metadata': {'annotations': {'a': '1'}}}
    patch = kopf.Patch()
    storage.store(body=body, patch=patch, essence={'spec': {'field': 'välue'}})
    assert patch['metadata']['annotations']['kopf.zalando.org/last-handled-configuration'] == \
        '{"spec":{"field":"v\\u00e4lue"}}\n'


class Overriding(kopf.AnnotationsProgressStorage):
    def fetch(self, *, key: kopf.HandlerId, body: kopf.Body) -> Any:
        return super().fetch(key=key, body=body)


class Configured(kopf.AnnotationsProgressStorage):
    def __init__(self) -> None:
        super().__init__(prefix='configured.example.com')


def test_built_in_storages_are_described_for_the_engine_and_custom_ones_listed() -> None:
    customs: list[Any] = []
    assert _progress.for_engine(kopf.SmartProgressStorage(), customs) == {'kind': 'multi', 'storages': [
        {'kind': 'annotations', 'prefix': 'kopf.zalando.org', 'verbose': False, 'touch_key': 'touch-dummy',
         'v1': True},
        {'kind': 'status', 'field': ['status', 'kopf', 'progress'], 'touch_field': ['status', 'kopf', 'dummy'],
         'writable': False},
    ]}
    assert _progress.for_engine(Configured(), customs)['prefix'] == 'configured.example.com'
    overriding = Overriding()
    multi = kopf.MultiProgressStorage([kopf.StatusProgressStorage(), overriding])
    assert _progress.for_engine(multi, customs) == {'kind': 'multi', 'storages': [
        {'kind': 'status', 'field': ['status', 'kopf', 'progress'], 'touch_field': ['status', 'kopf', 'dummy'],
         'writable': True},
        {'kind': 'custom', 'index': 0},
    ]}
    assert customs == [overriding]
    assert _diffbase.for_engine(kopf.MultiDiffBaseStorage([kopf.AnnotationsDiffBaseStorage(
        prefix='p.example.com', ignored_fields=['spec.x'])]), customs) == {
        'kind': 'multi', 'ignored_fields': [], 'storages': [
            {'kind': 'annotations', 'prefix': 'p.example.com', 'key': 'last-handled-configuration', 'v1': True,
             'ignored_fields': [['spec', 'x']]}]}
    settings = kopf.OperatorSettings()
    settings.persistence.diffbase_storage = kopf.StatusDiffBaseStorage(name='op')
    engine = settings.for_engine(customs)
    assert engine['persistence']['diffbase_storage'] == {
        'kind': 'status', 'field': ['status', 'op', 'last-handled-configuration'], 'ignored_fields': []}
