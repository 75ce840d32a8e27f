"""`kopf._structures.structs.LazyRaw`: a raw body converted from the core's one field at a time (the
core's side, `kopf._engine.CoreBody`, is replaced here by a source that counts what it
converts)."""

from __future__ import annotations

import copy
import gc
import logging
import pickle
import weakref
from typing import Any

import pytest
from kopf._logs.loggers import LocalObjectLogger, ObjectLogger, TerseObjectLogger
from kopf._structures.structs import Body, LazyRaw


class Source:
    """What `CoreBody` offers: keys, one field at a time (a fresh conversion each), identity."""

    def __init__(self, data: dict[str, Any]) -> None:
        self.data = data
        self.converted: list[str] = []
        self.identified = 0

    def keys(self) -> list[str]:
        return list(self.data)

    def item(self, key: str) -> Any:
        if key not in self.data:
            raise KeyError(key)
        self.converted.append(key)
        return copy.deepcopy(self.data[key])

    def identity(self) -> tuple[Any, ...]:
        self.identified += 1
        meta = self.data.get('metadata', {})
        return (self.data.get('apiVersion'), self.data.get('kind'),
                meta.get('name'), meta.get('uid'), meta.get('namespace'))


OBJECT = {'apiVersion': 'v1', 'kind': 'Thing', 'metadata': {'name': 'n', 'uid': 'u', 'labels': {'a': '1'}},
          'spec': {'x': [1, {'y': None}]}}


def test_fields_are_converted_once_when_first_read() -> None:
    source = Source(OBJECT)
    raw = LazyRaw(source)
    assert source.converted == []
    assert raw['spec'] is raw['spec']
    assert raw['spec'] == {'x': [1, {'y': None}]}
    assert source.converted == ['spec']
    assert list(raw) == ['apiVersion', 'kind', 'metadata', 'spec'] and len(raw) == 4
    assert 'metadata' in raw and 'status' not in raw and 5 not in raw
    assert source.converted == ['spec']  # keys and membership convert nothing


def test_absent_fields_are_key_errors_and_get_gives_defaults() -> None:
    raw = LazyRaw(Source(OBJECT))
    with pytest.raises(KeyError):
        raw['status']
    with pytest.raises(KeyError):
        raw[5]  # type: ignore[index]
    assert raw.get('status', 'none') == 'none'


def test_a_views_absent_key_is_named_as_kopf_names_it() -> None:
    """The first key absent on the way, as in Kopf 1.45.2: an object without labels gives
    KeyError('labels') for `labels['app']` (a handler's error message, kept in its progress)."""
    body = Body(LazyRaw(Source({'metadata': {'name': 'n'}, 'spec': {'x': None}})))
    with pytest.raises(KeyError) as e:
        body.metadata.labels['app']
    assert e.value.args == ('labels',)
    with pytest.raises(KeyError) as e:
        body.spec['absent']
    assert e.value.args == ('absent',)
    with pytest.raises(KeyError) as e:
        body.status['phase']
    assert e.value.args == ('status',)
    assert body.metadata.labels.get('app') is None and body.status.get('phase', 'none') == 'none'


def test_a_replaced_source_is_read_afresh_and_earlier_reads_stay() -> None:
    raw = LazyRaw(Source(OBJECT))
    old_spec = raw['spec']
    raw._replace(Source({**OBJECT, 'spec': {'x': 2}, 'status': {}}))
    assert raw['spec'] == {'x': 2}
    assert old_spec == {'x': [1, {'y': None}]}
    assert list(raw) == ['apiVersion', 'kind', 'metadata', 'spec', 'status']


def test_copies_pickles_and_comparisons_are_of_plain_dicts() -> None:
    raw = LazyRaw(Source(OBJECT))
    assert raw == OBJECT and dict(raw) == OBJECT
    assert type(copy.copy(raw)) is dict and copy.copy(raw) == OBJECT
    deep = copy.deepcopy(raw)
    assert type(deep) is dict and deep == OBJECT and deep['spec'] is not raw['spec']
    assert pickle.loads(pickle.dumps(raw)) == OBJECT
    body = Body(LazyRaw(Source(OBJECT)))
    assert pickle.loads(pickle.dumps(body)) == body == copy.deepcopy(body)
    assert repr(raw) == repr(OBJECT)


def test_views_and_loggers_read_only_what_they_need() -> None:
    source = Source(OBJECT)
    raw = LazyRaw(source)
    body = Body(raw)
    logger = ObjectLogger(body=raw, settings=None)
    assert logger.extra is not None
    assert logger.extra['k8s_ref'] == {'apiVersion': 'v1', 'kind': 'Thing', 'name': 'n', 'uid': 'u', 'namespace': None}
    assert source.converted == []
    assert body.spec['x'] == [1, {'y': None}] and dict(body.meta.labels) == {'a': '1'} and body.status == {}
    assert source.converted == ['spec', 'metadata']


def test_the_identity_is_read_once_per_source() -> None:
    source = Source(OBJECT)
    raw = LazyRaw(source)
    assert raw.identity() == raw.identity() == ('v1', 'Thing', 'n', 'u', None)
    ObjectLogger(body=raw, settings=None)
    assert source.identified == 1 and source.converted == []
    raw._replace(Source({**OBJECT, 'metadata': {'name': 'renamed'}}))
    assert raw.identity() == ('v1', 'Thing', 'renamed', None, None)


def test_a_replaced_source_is_not_kept_for_its_identity() -> None:
    # A timer's body is replaced when its object changes; its first body, asked for its
    # identity once (for the kwargs), must not stay alive with it.
    first = Source(OBJECT)
    raw = LazyRaw(first)
    assert raw.identity() == ('v1', 'Thing', 'n', 'u', None)
    gone = weakref.ref(first)
    del first
    raw._replace(Source({**OBJECT, 'spec': {'x': 2}}))
    gc.collect()
    assert gone() is None
    assert raw.identity() == ('v1', 'Thing', 'n', 'u', None)


def test_labels_and_annotations_views_are_the_same_each_time_and_live() -> None:
    raw: dict[str, Any] = {'metadata': {'name': 'n'}}
    body = Body(raw)
    labels, annotations = body.meta.labels, body.meta.annotations
    assert body.meta.labels is labels and body.metadata.annotations is annotations
    assert dict(labels) == {} and dict(annotations) == {}
    raw['metadata']['labels'] = {'a': '1'}
    raw['metadata']['annotations'] = {'b': '2'}
    assert dict(labels) == {'a': '1'} and dict(annotations) == {'b': '2'}
    assert body.spec == {} and body.status == {}
    raw['spec'] = {'x': 1}
    assert body.spec == {'x': 1} and body.spec is body.spec


@pytest.mark.parametrize('raw', [{'metadata': {'name': 'n'}}, LazyRaw(Source(OBJECT))], ids=['dict', 'lazy'])
def test_a_body_made_with_its_views_is_a_body_made_plainly(raw: Any) -> None:
    # A handler call's kwargs hold all views, made at once (`Body._with_views`).
    plain, made = Body(raw), Body._with_views(raw)
    assert type(made) is Body and dict(made) == dict(plain)
    for view in ('spec', 'meta', 'status'):
        assert type(getattr(made, view)) is type(getattr(plain, view))
        assert dict(getattr(made, view)) == dict(getattr(plain, view))
        assert getattr(made, view) is getattr(made, view)
    assert made.metadata is made.meta and made.meta.name == plain.meta.name
    for view in ('labels', 'annotations'):
        assert type(getattr(made.meta, view)) is type(getattr(plain.meta, view))
        assert getattr(made.meta, view) is getattr(made.meta, view)
        assert dict(getattr(made.meta, view)) == dict(getattr(plain.meta, view))


def test_a_body_made_with_its_views_stays_live() -> None:
    raw: dict[str, Any] = {'metadata': {'name': 'n'}}
    body = Body._with_views(raw)
    labels, spec = body.meta.labels, body.spec
    raw['metadata']['labels'] = {'a': '1'}
    raw['spec'] = {'x': 1}
    assert dict(labels) == {'a': '1'} and dict(spec) == {'x': 1}
    body.meta.anything = 'set'  # a script's own attribute, as on Kopf's views
    assert body.meta.anything == 'set'


@pytest.mark.parametrize('cls', [ObjectLogger, LocalObjectLogger, TerseObjectLogger])
def test_a_logger_made_from_a_reference_is_the_logger_made_from_a_body(cls: type[ObjectLogger]) -> None:
    raw = LazyRaw(Source({**OBJECT, 'metadata': {**OBJECT['metadata'], 'namespace': 'ns'}}))
    plain = cls(body=raw, settings='settings')
    fields = ('apiVersion', 'kind', 'name', 'uid', 'namespace')
    made = cls._made(dict(zip(fields, raw.identity(), strict=True)), 'settings')
    assert type(made) is cls and made.logger is plain.logger
    assert made.extra == plain.extra
    assert list(made.extra or {}) == list(plain.extra or {})  # the same order of fields too
    assert made.isEnabledFor(logging.INFO) == plain.isEnabledFor(logging.INFO)
