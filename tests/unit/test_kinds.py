"""The kinds of resource handlers are one row each (`kopf._running.kinds`): every kind the
protocol names has its row, each row's registry list exists, and the bridge's spec names every
kind's handlers as the core reads them."""

from __future__ import annotations

import typing

import kopf
import pytest
from kopf._bridge import protocol
from kopf._running import kinds
from kopf._running.calls import Bridge


def test_every_kind_of_the_protocol_has_one_row() -> None:
    assert [kind.name for kind in kinds.KINDS] == list(typing.get_args(protocol.HandlerKind))


@pytest.mark.parametrize("kind", kinds.KINDS, ids=lambda kind: kind.name)
def test_each_rows_registry_list_exists(kind: kinds.Kind) -> None:
    assert kind.handlers(kopf.OperatorRegistry()) == []


def test_the_spec_has_each_kinds_handlers_at_their_positions() -> None:
    registry = kopf.OperatorRegistry()
    kopf.on.event('greetings', registry=registry)(lambda **_: None)
    kopf.on.reconcile('kopfexamples', registry=registry, finalizer=True, id='r')(lambda **_: None)
    bridge = Bridge(registry=registry, settings=kopf.OperatorSettings(), memo=None,
                    ready=None, loop=None)  # type: ignore[arg-type]
    spec = bridge.spec()
    assert set(spec) == {kind.spec for kind in kinds.KINDS} | {'conversions'}
    [reconciling] = spec['reconciling']
    assert reconciling['index'] == 0 and reconciling['id'] == 'r' and reconciling['finalizer'] is True
    assert spec['watching'][0]['index'] == 0 and spec['changing'] == []
