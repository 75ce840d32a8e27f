"""`settings.watching.*_selectors`: keyed as the decorators name resources, joined as Kopf joins them."""

from __future__ import annotations

import kopf
import pytest
from kopf._structures.references import Resource, Selector
from kopf._structures.selectors import SelectorMapping, server_selectors

GREETINGS = Resource("demo.kopf.dev", "v1", "greetings", kind="Greeting", singular="greeting",
                     shortcuts=frozenset({"gr"}), categories=frozenset({"all"}), namespaced=True)
OLD_GREETINGS = Resource("demo.kopf.dev", "v1beta1", "greetings", kind="Greeting", preferred=False)
PODS = Resource("", "v1", "pods", kind="Pod", singular="pod", namespaced=True)
EVENTS = Resource("", "v1", "events", kind="Event", singular="event", namespaced=True)


def test_keys_as_the_decorators_write_them() -> None:
    mapping: SelectorMapping[str] = SelectorMapping()
    mapping["greetings.demo.kopf.dev"] = "a"
    assert mapping["demo.kopf.dev", "greetings"] == "a"  # the same selector, written otherwise
    mapping["demo.kopf.dev", "v1", "gr"] = "c"
    mapping[kopf.EVERYTHING] = "d"
    mapping[lambda resource: resource.plural == "pods"] = "e"
    mapping[Selector(group="demo.kopf.dev", kind="Greeting")] = "f"
    assert len(mapping) == 5 and all(isinstance(key, Selector) for key in mapping)
    assert ("demo.kopf.dev", "greetings") in mapping
    assert mapping.collect(GREETINGS) == ["a", "c", "d", "f"]
    assert mapping.collect(PODS) == ["d", "e"]
    assert mapping.collect(EVENTS) == []  # never in EVERYTHING, nor for callables
    assert mapping.collect(OLD_GREETINGS) == []  # not the preferred version, none named
    del mapping["greetings.demo.kopf.dev"]
    assert "greetings.demo.kopf.dev" not in mapping
    with pytest.raises(TypeError, match="Unsupported selector type"):
        mapping[3.14] = "x"  # type: ignore[index]


def test_joined_as_kopf_joins_them() -> None:
    labels: SelectorMapping[str] = SelectorMapping({Selector("greetings"): "tier", Selector("gr"): "team=a"})
    labels[kopf.EVERYTHING] = "tier"  # a duplicate: once
    fields: SelectorMapping[str] = SelectorMapping({Selector("pods"): "spec.nodeName=n1"})
    shards: SelectorMapping[str] = SelectorMapping({Selector("greetings"): "first", Selector(kopf.EVERYTHING): "next"})
    assert server_selectors(labels, fields, shards, GREETINGS) == {"label": "team=a,tier", "field": None,
                                                                   "shard": "first"}
    assert server_selectors(labels, fields, shards, PODS) == {"label": "tier", "field": "spec.nodeName=n1",
                                                              "shard": "next"}


def test_settings_have_them_empty_by_default() -> None:
    settings = kopf.OperatorSettings()
    assert not settings.watching.label_selectors and not settings.watching.shard_selectors
    assert settings.for_engine()["watching"]["selecting"] is False
    settings.watching.field_selectors["pods"] = "status.phase=Running"
    assert settings.for_engine()["watching"]["selecting"] is True
    assert settings.for_engine()["peering"]["sharded"] is False
    settings.watching.shard_selectors["pods"] = "shardRange(object.metadata.uid, '0x0', '0x8')"
    assert settings.for_engine()["peering"]["sharded"] is True
