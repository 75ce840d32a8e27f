"""What a related function (`@kopf.related`) may return as its owners, as the core gets them:
(namespace, name) pairs, once each; anything else is the function's error, said with what it
returned."""

from __future__ import annotations

import logging
from typing import Any

import kopf
import pytest
from kopf._handling.execution import Outcome
from kopf._running.calls import Bridge, _owners_named


@pytest.mark.parametrize("result, owners", [
    (None, []),
    ([], []),
    ("app1", [("ns", "app1")]),
    (["app1", "app2", "app1"], [("ns", "app1"), ("ns", "app2")]),
    ({"name": "app1"}, [("ns", "app1")]),
    ({"name": "app1", "namespace": "other"}, [("other", "app1")]),
    ({"name": "node1", "namespace": None}, [(None, "node1")]),
    ({"metadata": {"name": "app1", "namespace": "other"}, "spec": {}}, [("other", "app1")]),
    (kopf.Body({"metadata": {"name": "app1", "namespace": "ns"}}), [("ns", "app1")]),
    ((name for name in ["a", "b"]), [("ns", "a"), ("ns", "b")]),
    ({"app1"}, [("ns", "app1")]),
])
def test_the_owners_named(result: Any, owners: list[tuple[str | None, str]]) -> None:
    assert _owners_named(result, "ns") == owners


def test_a_cluster_scoped_objects_names_have_no_namespace() -> None:
    assert _owners_named("app1", None) == [(None, "app1")]


@pytest.mark.parametrize("result", [42, b"app1", True, [42], [""], [{"namespace": "ns"}], [{"name": 5}],
                                    [{"name": "a", "namespace": 5}], [["ns", "app1"]]])
def test_anything_else_is_refused_with_what_it_was(result: Any) -> None:
    with pytest.raises(TypeError, match="but .*each owner is|but a related function returns its owners"):
        _owners_named(result, "ns")


@pytest.mark.parametrize("outcome, related", [
    (Outcome(final=True, result="app1"), [("ns", "app1")]),
    (Outcome(final=True, result=None), []),
    (Outcome(final=True, ignored=True), None),  # failed, ignored: the owners named before stay
    (Outcome(final=True, exception=RuntimeError("boom")), None),
    (Outcome(final=True, result=42), None),  # refused: the function's error
])
def test_the_core_is_told_owners_only_after_a_success(outcome: Outcome, related: Any) -> None:
    call: Any = {'kind': 'relating'}
    answer = Bridge._answer(call, outcome, kopf.Patch(), {'namespace': 'ns', 'logger': logging.getLogger('t')},
                            handler="Related function 'f'")
    assert answer is not None and answer.get('related') == related
    assert 'result' not in answer
