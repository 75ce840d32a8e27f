"""Kopf's small public types as operators use them (no cluster needed): resources compared
and iterated as Kopf's, their URLs, deprecated settings, custom aiohttp sessions refused."""

from __future__ import annotations

import asyncio
import warnings

import kopf
import pytest
from kopf._handling.activities import authenticate
from kopf._structures.errors import LoginError


def test_resources_are_the_same_by_group_version_and_plural() -> None:
    pods = kopf.Resource('', 'v1', 'pods', kind='Pod', namespaced=True)
    assert pods == kopf.Resource('', 'v1', 'pods') and hash(pods) == hash(kopf.Resource('', 'v1', 'pods'))
    assert pods != kopf.Resource('', 'v2', 'pods')
    assert list(pods) == ['', 'v1', 'pods'] and repr(pods) == 'pods.v1'
    assert repr(kopf.Resource('kopf.dev', 'v1', 'kopfexamples/status')) == 'kopfexamples.v1.kopf.dev/status'


def test_resource_urls_as_kopf_builds_them() -> None:
    pods = kopf.Resource('', 'v1', 'pods', namespaced=True)
    assert pods.get_url() == '/api/v1/pods'
    assert pods.get_url(namespace='ns', name='p', subresource='status') == '/api/v1/namespaces/ns/pods/p/status'
    assert pods.get_url(server='https://k8s/', namespace='ns', params={'watch': 'true'}) == \
        'https://k8s/api/v1/namespaces/ns/pods?watch=true'
    nodes = kopf.Resource('', 'v1', 'nodes', namespaced=False)
    assert nodes.get_url(name='n1') == '/api/v1/nodes/n1'
    with pytest.raises(ValueError):
        nodes.get_url(namespace='ns')
    with pytest.raises(ValueError):
        pods.get_url(name='p')
    with pytest.raises(ValueError):
        pods.get_url(subresource='status')
    assert kopf.Resource('apps', 'v1', 'deployments', namespaced=True).get_url(namespace='x') == \
        '/apis/apps/v1/namespaces/x/deployments'


def test_the_batch_window_is_deprecated_as_in_kopf() -> None:
    settings = kopf.OperatorSettings()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter('always')
        settings.queueing.batch_window = 0.5
        assert settings.queueing.batch_window == 0.5
    message = "Time-based event batching was removed. Please stop configuring it."
    assert [str(w.message) for w in caught] == [message] * 2


def test_a_custom_aiohttp_session_is_refused_with_what_to_return() -> None:
    closed = []

    class Session:
        async def close(self) -> None:
            closed.append(True)

    registry = kopf.OperatorRegistry()

    @kopf.on.login(registry=registry)
    def custom(**_: object) -> kopf.AiohttpSession:
        return kopf.AiohttpSession(aiohttp_session=Session(), server='https://k8s')

    with pytest.raises(LoginError, match="returned a kopf.AiohttpSession.*Return a kopf.ConnectionInfo"):
        asyncio.run(authenticate(registry=registry, settings=kopf.OperatorSettings(), memo=kopf.Memo(), indices={}))
    assert closed == [True]
