"""The call protocol, one contract across the boundary: `kopf._bridge.protocol`'s TypedDicts (which the
bridge is type-checked against) and the dicts that the core's own builders make and its reader
takes (`src/binding/hooks.rs`, `logs.rs`)."""

import json
import typing
from typing import Any

import pytest
from kopf import _engine
from kopf._bridge import protocol as _protocol


def keys(shape: Any) -> set[str]:
    return set(shape.__required_keys__ | shape.__optional_keys__)


SENT = {
    "Invocation": _protocol.Invocation,
    "ResourceInfo": _protocol.ResourceInfo,
    "PlanRequest": _protocol.PlanRequest,
    "ResourceSelection": _protocol.ResourceSelection,
    "ObjectRef": _protocol.ObjectRef,
    "ConversionRequest": _protocol.ConversionRequest,
}


@pytest.mark.parametrize("name", sorted(SENT))
def test_what_the_core_sends_has_the_keys_described(name: str) -> None:
    sample = _engine.protocol_samples()[name]
    assert set(sample) == keys(SENT[name])


@pytest.mark.parametrize("part, shape", [("daemon", _protocol.DaemonCall),
                                         ("admission", _protocol.AdmissionCall),
                                         ("log", _protocol.LogCall)])
def test_the_optional_parts_of_a_call_have_the_keys_described(part: str, shape: Any) -> None:
    invocation = _engine.protocol_samples()["Invocation"]
    assert set(invocation[part]) == keys(shape)


def test_the_nested_shapes_are_the_ones_described() -> None:
    samples = _engine.protocol_samples()
    assert set(samples["PlanRequest"]["call"]) == keys(_protocol.Invocation)
    assert set(samples["Invocation"]["resource"]) == keys(_protocol.ResourceInfo)
    for resource in samples["ResourceSelection"]["resources"]:
        assert set(resource) == keys(_protocol.ResourceInfo)


# A value for every key of an answer, none of them the default: each must reach the core.
ANSWER: dict[str, Any] = {
    "final": True,
    "delay": 1.5,
    "result": {"message": "done"},
    "exception": "boom",
    "failure": "permanent",
    "error_type": "PermanentError",
    "subrefs": ["parent/child"],
    "patch": {"status": {"field": 1}},
    "cancelled": True,
    "indexed": {"key1": "value1", "key2": "value2"},
    "warnings": ["careful"],
    "rejection": ("admission", "refused", 418),
    "said": ("Handler 'h' succeeded.", True),
    "requeue": 5.0,
    "related": [("ns1", "owner1"), (None, "owner2")],
}
# What the core took, as `_engine.invoked_as_read()` tells it (the index's pairs: counted).
TAKEN = {**ANSWER, "indexed": 2, "rejection": ["admission", "refused", 418], "said": ["Handler 'h' succeeded.", True],
         "related": [["ns1", "owner1"], [None, "owner2"]]}


def test_the_kinds_of_handlers_are_the_cores() -> None:
    assert list(typing.get_args(_protocol.HandlerKind)) == _engine.protocol_samples()["HandlerKind"]


def test_every_key_of_an_answer_is_described() -> None:
    assert set(ANSWER) == keys(_protocol.Invoked)


def test_every_key_of_an_answer_reaches_the_core() -> None:
    assert json.loads(_engine.invoked_as_read(ANSWER)) == TAKEN


def test_an_answer_with_a_key_the_core_does_not_read_is_refused() -> None:
    with pytest.raises(ValueError, match="'exceptions'"):
        _engine.invoked_as_read({"final": True, "exceptions": "misspelt"})


def test_an_answer_of_none_is_a_success_with_nothing_to_keep() -> None:
    taken = json.loads(_engine.invoked_as_read(None))
    assert taken["final"] is True
    assert taken["exception"] is None and taken["patch"] is None


def test_a_conversions_answer_reaches_the_core_either_way() -> None:
    assert keys(_protocol.ConversionAnswer) == {"converted", "error"}
    objects = [{"apiVersion": "kopf.dev/v2", "kind": "KopfExample"}]
    assert json.loads(_engine.converted_as_read({"converted": json.dumps(objects)})) == {"converted": objects}
    assert json.loads(_engine.converted_as_read({"error": "why"})) == {"error": "why"}
    with pytest.raises(ValueError, match='"convertedObjects"'):
        _engine.converted_as_read({"convertedObjects": []})


def test_a_conversion_requests_objects_carry_their_steps() -> None:
    sample = _engine.protocol_samples()["ConversionRequest"]
    assert set(sample["resource"]) == keys(_protocol.ResourceInfo)
    [(obj, steps)] = sample["objects"]
    assert obj["kind"] == "KopfExample" and steps == [0, 1]
