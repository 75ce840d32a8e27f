"""`kopf.set_condition()`: status.conditions as Kubernetes keeps them, through the handler's patch."""

from __future__ import annotations

import re
from typing import Any

import kopf
import pytest

BODY: dict[str, Any] = {
    'metadata': {'name': 'n1', 'generation': 3},
    'status': {'conditions': [
        {'type': 'Ready', 'status': 'False', 'lastTransitionTime': '2026-01-01T00:00:00Z', 'reason': 'Starting'},
        {'type': 'Degraded', 'status': 'False', 'lastTransitionTime': '2026-01-02T00:00:00Z'},
    ]},
}
NOW = re.compile(r'\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ')


def test_a_new_status_replaces_the_condition_and_its_time() -> None:
    patch = kopf.Patch()
    condition = kopf.set_condition(patch, 'Ready', True, reason='Deployed', message='All up.', body=BODY)
    assert NOW.fullmatch(condition['lastTransitionTime']) and condition['lastTransitionTime'] != '2026-01-01T00:00:00Z'
    assert condition == {'type': 'Ready', 'status': 'True', 'lastTransitionTime': condition['lastTransitionTime'],
                         'reason': 'Deployed', 'message': 'All up.', 'observedGeneration': 3}
    assert patch['status']['conditions'] == [condition, BODY['status']['conditions'][1]]  # the others kept, in order


def test_the_same_status_keeps_its_time_and_a_new_type_is_added() -> None:
    patch = kopf.Patch()
    kopf.set_condition(patch, 'Degraded', False, reason='Fine', body=BODY)
    kopf.set_condition(patch, 'Progressing', None, body=BODY)  # builds on the patch's list
    ready, degraded, progressing = patch['status']['conditions']
    assert ready == BODY['status']['conditions'][0]
    assert degraded['lastTransitionTime'] == '2026-01-02T00:00:00Z' and degraded['reason'] == 'Fine'
    assert progressing['type'] == 'Progressing' and progressing['status'] == 'Unknown'


@pytest.mark.parametrize('args, kwargs, error', [
    (('', True), {}, "A condition's type is a CamelCase name"),
    (('Ready', 'yes'), {}, "A condition's status is True, False or None"),
    (('Ready', True), {'reason': 'not deployed'}, "A condition's reason is a CamelCase word"),
])
def test_what_the_api_would_refuse_fails_at_once(args: tuple[Any, ...], kwargs: dict[str, Any], error: str) -> None:
    with pytest.raises(ValueError, match=error):
        kopf.set_condition(kopf.Patch(), *args, body=BODY, **kwargs)


def test_outside_of_a_handler_the_body_is_needed() -> None:
    with pytest.raises(TypeError, match=r"needs body= outside of a handler"):
        kopf.set_condition(kopf.Patch(), 'Ready', True)
