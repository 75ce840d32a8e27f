"""`@kopf.on.convert` declarations (what is refused where the handler is declared, what the core
is given), and the objects of a review through their chains of steps on the Python side: the
`patch` kwarg and returned fields, sync and async steps, failures with their reasons."""

import asyncio
import json
import logging

import kopf
import pytest
from kopf._running.calls import Bridge
from kopf._structures.references import Resource

CONTACTS = Resource('demo.kopf.dev', 'v2', 'contacts', kind='Contact', namespaced=True)


def declare(*args, registry=None, **options):
    registry = registry if registry is not None else kopf.OperatorRegistry()

    def fn(**_):
        pass

    kopf.on.convert(*args, registry=registry, **options)(fn)
    return registry._conversions[-1]


def test_a_step_names_its_resource_without_a_version_and_its_two_versions():
    handler = declare('contacts.demo.kopf.dev', source='v1', target='v2beta1')
    assert (handler.source, handler.target, handler.id) == ('v1', 'v2beta1', 'declare.<locals>.fn')
    assert handler.selector.check(Resource('demo.kopf.dev', 'v2', 'contacts', preferred=True))
    assert declare('demo.kopf.dev', 'contacts', source='v2', target='v1').selector.group == 'demo.kopf.dev'


@pytest.mark.parametrize('args, options, error, match', [
    (('demo.kopf.dev/v1', 'contacts'), {}, TypeError, "names no version"),
    (('contacts.v1.demo.kopf.dev',), {}, TypeError, "names no version"),
    ((kopf.EVERYTHING,), {}, TypeError, "not a marker"),
    (('contacts.demo.kopf.dev',), {'target': 'v1'}, ValueError, "source= and target= are both 'v1'"),
    (('contacts.demo.kopf.dev',), {'target': 'V2'}, ValueError, "target= is a version"),
    (('contacts.demo.kopf.dev',), {'target': ''}, ValueError, "target= is a version"),
])
def test_what_cannot_be_served_is_refused_at_the_declaration(args, options, error, match):
    with pytest.raises(error, match=match):
        declare(*args, **{'source': 'v1', 'target': 'v2', **options})


def test_a_second_step_between_the_same_versions_is_refused():
    registry = kopf.OperatorRegistry()
    declare('contacts.demo.kopf.dev', source='v1', target='v2', registry=registry)
    declare('contacts.demo.kopf.dev', source='v2', target='v1', registry=registry)
    with pytest.raises(ValueError, match="already converts .* from v1 to v2"):
        declare('contacts.demo.kopf.dev', source='v1', target='v2', registry=registry)


def bridge(registry):
    loop = asyncio.new_event_loop()
    return loop, Bridge(registry=registry, settings=kopf.OperatorSettings(), memo=kopf.Memo(),
                        ready=asyncio.Event(), loop=loop)


def test_the_core_is_given_each_step_with_its_resource():
    registry = kopf.OperatorRegistry()
    declare('contacts.demo.kopf.dev', source='v1', target='v2', registry=registry, id='split')
    loop, made = bridge(registry)
    try:
        spec = made.spec()['conversions']
    finally:
        loop.close()
    assert spec == [{'index': 0, 'id': 'split', 'source': 'v1', 'target': 'v2',
                     'selector': registry._conversions[0].selector.for_engine()}]


def contact(called, version='v1', **spec):
    return {'apiVersion': f'demo.kopf.dev/{version}', 'kind': 'Contact',
            'metadata': {'name': called, 'namespace': 'ns', 'uid': f'uid-{called}', 'labels': {'a': 'b'}},
            'spec': spec}


def convert(registry, objects):
    loop, made = bridge(registry)
    try:
        return loop.run_until_complete(made.converting.convert({'resource': {}, 'objects': objects}, CONTACTS))
    finally:
        loop.close()


def chained_registry():
    registry = kopf.OperatorRegistry()

    @kopf.on.convert('contacts.demo.kopf.dev', source='v1', target='v2', registry=registry, id='split')
    def split(spec, patch, source, target, body, **_):
        assert (source, target, body['apiVersion']) == ('v1', 'v2', 'demo.kopf.dev/v1')
        if spec['name'] == 'fail':
            raise kopf.PermanentError("no name to split")
        first, _, last = spec['name'].partition(' ')
        patch.spec['name'] = None
        patch.spec['first'], patch.spec['last'] = first, last

    @kopf.on.convert('contacts.demo.kopf.dev', source='v2', target='v3', registry=registry)
    async def shout(spec, body, **_):
        assert body['apiVersion'] == 'demo.kopf.dev/v2', "a step sees the previous one's version"
        return {'spec': {'first': spec['first'].upper(), 'last': spec['last'].upper()},
                'metadata': {'labels': {'shouted': 'yes'}}}

    @kopf.on.convert('contacts.demo.kopf.dev', source='v3', target='v1', registry=registry, id='wrong')
    def wrong(**_):
        return ['not', 'a', 'dict']

    return registry


def test_objects_go_through_their_chains_of_sync_and_async_steps():
    answer = convert(chained_registry(), [(contact('ada', name='Ada Lovelace'), [0, 1]),
                                          (contact('alan', name='Alan Turing'), [0])])
    first, second = json.loads(answer['converted'])
    assert first['apiVersion'] == 'demo.kopf.dev/v3'
    assert first['spec'] == {'first': 'ADA', 'last': 'LOVELACE'}
    assert first['metadata'] == {'name': 'ada', 'namespace': 'ns', 'uid': 'uid-ada', 'labels': {'shouted': 'yes'}}
    assert second['apiVersion'] == 'demo.kopf.dev/v2' and second['spec'] == {'first': 'Alan', 'last': 'Turing'}


def test_only_sync_steps_run_in_the_executor_at_once():
    answer = convert(chained_registry(), [(contact('a', name='A B'), [0]), (contact('c', name='C D'), [0])])
    assert [obj['spec']['first'] for obj in json.loads(answer['converted'])] == ['A', 'C']


def test_a_failure_says_which_object_which_step_and_why(caplog):
    caplog.set_level(logging.ERROR)
    answer = convert(chained_registry(), [(contact('ok', name='A B'), [0]), (contact('bad', name='fail'), [0, 1])])
    assert answer == {'error': "Conversion handler 'split' failed to convert Contact ns/bad from v1 to v2: "
                               "no name to split"}
    answer = convert(chained_registry(), [(contact('odd', 'v3', first='X', last='Y'), [2])])
    assert "Conversion handler 'wrong' failed to convert Contact ns/odd from v3 to v1: it returned list" \
        in answer['error']
