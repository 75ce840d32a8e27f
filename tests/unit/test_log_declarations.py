"""`@kopf.on.log` declarations: what is checked where the handler is declared (a pattern the core
cannot match, a bytes pattern, no containers), and what the core is given for each handler."""

import asyncio
import re

import kopf
import pytest
from kopf._running.calls import Bridge
from kopf._structures.references import Resource


def declare(**options):
    registry = kopf.OperatorRegistry()

    def fn(**_):
        pass

    kopf.on.log(registry=registry, **options)(fn)
    return registry._logging[0]


def spec_of(handler):
    registry = kopf.OperatorRegistry()
    registry._logging.append(handler)
    loop = asyncio.new_event_loop()
    try:
        bridge = Bridge(registry=registry, settings=kopf.OperatorSettings(), memo=kopf.Memo(),
                        ready=asyncio.Event(), loop=loop)
        return bridge.spec()['logging'][0]
    finally:
        loop.close()


def test_pods_of_the_core_api_by_default():
    handler = declare()
    pods = Resource('', 'v1', 'pods', namespaced=True)
    metrics = Resource('metrics.k8s.io', 'v1beta1', 'pods', namespaced=True)
    assert handler.selector.check(pods) and not handler.selector.check(metrics)
    assert handler.regex is None and handler.containers is None
    assert handler.errors is None  # the bridge's default for log handlers: ignored, not retried


def test_the_pattern_and_its_flags_go_to_the_core():
    handler = declare(regex=re.compile(r'accuracy is (\d+)%', re.IGNORECASE), container='main')
    spec = spec_of(handler)
    assert spec['regex'] == {'pattern': r'accuracy is (\d+)%', 'flags': int(re.IGNORECASE | re.UNICODE)}
    assert spec['containers'] == ['main']
    assert spec['selector'] is not None and spec['id'] == 'declare.<locals>.fn'
    assert declare(regex='x', container=['a', 'b']).containers == ('a', 'b')


@pytest.mark.parametrize('regex, error, message', [
    (r"(?=ahead)x", ValueError, r"(?s)regex=.\(\?=ahead\)x. cannot be matched by the engine .*look-around"),
    (r'(a)\1', ValueError, "cannot be matched by the engine"),
    (r'unclosed (', ValueError, "is not a valid pattern"),
    (re.compile(rb'bytes'), TypeError, "a text pattern"),
    (42, TypeError, "a string or a compiled pattern"),
])
def test_a_pattern_the_core_cannot_match_fails_where_declared(regex, error, message):
    with pytest.raises(error, match=message):
        declare(regex=regex)


@pytest.mark.parametrize('container', [[], [''], ['main', 3]])
def test_containers_are_named(container):
    with pytest.raises(ValueError, match="container= names one container or several"):
        declare(container=container)


def test_filters_are_checked_as_for_other_handlers():
    with pytest.raises(ValueError, match="`None` for label filters is not supported"):
        declare(labels={'app': None})
    with pytest.raises(TypeError, match="without a mandatory field"):
        declare(value='x')
