"""`@kopf.on.reconcile` and `kopf.Requeue` as declared: what is refused at once, with a message
that says why (a requeue of no time, reconcile and change handlers for one resource, a backoff
that is no number)."""

from __future__ import annotations

import math

import kopf
import pytest


@pytest.mark.parametrize("after", [0, -1, -0.5, math.inf, math.nan])
def test_a_requeue_needs_a_finite_wait_above_zero(after: float) -> None:
    with pytest.raises(ValueError, match=r"kopf.Requeue\(after=.*\): the seconds must be a finite number above zero"):
        kopf.Requeue(after=after)


@pytest.mark.parametrize("after", [True, "5", None])
def test_a_requeue_needs_a_number(after: object) -> None:
    with pytest.raises(TypeError, match="takes seconds as a number"):
        kopf.Requeue(after=after)  # type: ignore[arg-type]


def test_a_requeue_keeps_its_wait_in_seconds() -> None:
    assert kopf.Requeue(after=5).after == 5.0 and kopf.Requeue(5) == kopf.Requeue(after=5.0)
    assert repr(kopf.Requeue(after=2.5)) == "kopf.Requeue(after=2.5)"


def test_a_reconcile_handler_after_a_change_handler_of_the_resource_is_refused() -> None:
    registry = kopf.OperatorRegistry()
    kopf.on.update('kopfexamples', registry=registry)(lambda **_: None)
    with pytest.raises(TypeError, match="cannot serve the same resource"):
        kopf.on.reconcile('kopfexamples', registry=registry)(lambda **_: None)


def test_a_change_handler_after_a_reconcile_handler_of_the_resource_is_refused() -> None:
    registry = kopf.OperatorRegistry()
    kopf.on.reconcile('kopfexamples', registry=registry)(lambda **_: None)
    with pytest.raises(TypeError, match="cannot serve the same resource"):
        kopf.on.create('kopfexamples', registry=registry)(lambda **_: None)


def test_reconcile_handlers_of_other_resources_than_the_change_handlers_are_fine() -> None:
    registry = kopf.OperatorRegistry()
    kopf.on.create('kopfexamples', registry=registry)(lambda **_: None)
    kopf.on.reconcile('greetings', registry=registry)(lambda **_: None)
    kopf.on.event('kopfexamples', registry=registry)(lambda **_: None)
    assert len(registry._reconciling) == 1 and len(registry._changing) == 1


def test_a_reconcile_handler_takes_no_backoff_of_its_own() -> None:
    with pytest.raises(TypeError, match="backoff"):
        kopf.on.reconcile('kopfexamples', backoff=5)  # type: ignore[call-arg]


@pytest.mark.parametrize("value", [-1, math.nan, math.inf, "1", True])
def test_a_reconcile_backoff_that_is_no_number_of_seconds_fails_at_start(value: object) -> None:
    settings = kopf.OperatorSettings()
    settings.reconciling.backoff_base = value  # type: ignore[assignment]
    with pytest.raises(ValueError, match=r"settings.reconciling.backoff_base: .* is not a finite number"):
        settings.for_engine()


def test_the_reconcile_backoff_reaches_the_core_as_numbers() -> None:
    settings = kopf.OperatorSettings()
    settings.reconciling.backoff_cap = 30
    assert settings.for_engine()['reconciling'] == {'backoff_base': 0.005, 'backoff_cap': 30.0,
                                                    'backoff_jitter': 0.1, 'retry_rate': 10.0,
                                                    'retry_burst': 100.0}


def test_owned_resources_are_named_as_handlers_resources_are() -> None:
    registry = kopf.OperatorRegistry()
    kopf.on.reconcile('greetings', owns=['configmaps', ('apps', 'v1', 'deployments')], registry=registry)(
        lambda **_: None)
    [handler] = registry._reconciling
    owns = handler.reconciling_for_engine()['owns']
    assert [(o['any_name'], o['group'], o['plural']) for o in owns] == [('configmaps', None, None),
                                                                       ('deployments', 'apps', None)]


@pytest.mark.parametrize("owns", ['configmaps', [lambda resource: True], [()], [('a', 'b', 'c', 'd')], 5])
def test_owned_resources_that_name_none_are_refused(owns: object) -> None:
    with pytest.raises(TypeError, match="owns="):
        kopf.on.reconcile('greetings', owns=owns)  # type: ignore[arg-type]


def test_a_related_function_names_its_owners_resource_as_handlers_name_theirs() -> None:
    registry = kopf.OperatorRegistry()
    kopf.related('configmaps', owners=('demo.kopf.dev', 'v1', 'greetings'), labels={'app': kopf.PRESENT},
                 registry=registry)(lambda **_: None)
    [handler] = registry._relating
    described = handler.relating_for_engine()
    assert (described['owners']['group'], described['owners']['any_name']) == ('demo.kopf.dev', 'greetings')
    assert described['selector']['any_name'] == 'configmaps' and described['labels'] == [['app', {'kind': 'present'}]]


@pytest.mark.parametrize("owners", [None, [('greetings',)], 5, ()])
def test_a_related_function_without_a_resource_of_owners_is_refused(owners: object) -> None:
    with pytest.raises(TypeError, match="owners="):
        kopf.related('configmaps', owners=owners)


def test_a_related_function_needs_its_owners() -> None:
    with pytest.raises(TypeError, match="owners"):
        kopf.related('configmaps')  # type: ignore[call-arg]
