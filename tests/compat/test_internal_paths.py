"""Kopf's internal module paths that real operators import: each provided path with Kopf's
names, its helpers giving what PyPI's Kopf 1.45.2 gives for the same inputs, an embedded
operator built from them on the real cluster, and a clear error for the paths not provided."""

from __future__ import annotations

import importlib
import json
import subprocess
import textwrap
import threading
import uuid
from pathlib import Path
from typing import Any

import kopf
import pytest
from support.cluster import apply, kubectl, kubectl_json
from support.operators import eventually

PROVIDED = {
    "kopf._cogs.structs.bodies": ["Body", "RawBody", "Meta", "Spec", "Status", "RawEvent",
                                  "build_object_reference", "build_owner_reference"],
    "kopf._cogs.structs.dicts": ["parse_field", "resolve", "resolve_obj", "ensure", "remove", "cherrypick",
                                 "walk", "MappingView", "MutableMappingView"],
    "kopf._cogs.structs.patches": ["Patch"],
    "kopf._cogs.structs.ephemera": ["AnyMemo", "Memo", "Store", "Index", "Indices"],
    "kopf._cogs.structs.diffs": ["Diff", "DiffItem", "DiffOperation", "DiffScope", "diff", "diff_iter",
                                 "reduce", "reduce_iter", "EMPTY"],
    "kopf._cogs.structs.credentials": ["ConnectionInfo", "LoginError"],
    "kopf._cogs.configs.configuration": ["OperatorSettings", "WatchingSettings", "PersistenceSettings",
                                         "PostingSettings", "PeeringSettings", "ExecutionSettings"],
    "kopf._cogs.helpers.loaders": ["preload"],
    "kopf._core.actions.loggers": ["configure", "LogFormat", "ObjectLogger", "LocalObjectLogger",
                                    "TerseObjectLogger"],
    "kopf._core.actions.lifecycles": ["asap", "one_by_one", "all_at_once", "get_default_lifecycle"],
    "kopf._core.engines.posting": ["event", "info", "warn", "exception"],
    "kopf._kits.hierarchies": ["adopt", "label", "harmonize_naming", "adjust_namespace",
                               "append_owner_reference", "remove_owner_reference"],
    "kopf._core.intents.registries": ["OperatorRegistry", "SmartOperatorRegistry", "get_default_registry",
                                      "set_default_registry"],
}


@pytest.mark.parametrize("path", sorted(PROVIDED))
def test_provided_paths_have_kopfs_names(path: str) -> None:
    module = importlib.import_module(path)
    missing = [name for name in PROVIDED[path] if not hasattr(module, name)]
    assert not missing


def test_they_are_the_public_objects() -> None:
    from kopf._cogs.configs import configuration
    from kopf._cogs.structs import bodies, patches
    from kopf._core.engines import posting
    from kopf._core.intents import registries
    assert bodies.Body is kopf.Body and patches.Patch is kopf.Patch
    assert configuration.OperatorSettings is kopf.OperatorSettings
    assert posting.info is kopf.info and registries.get_default_registry is kopf.get_default_registry


@pytest.mark.parametrize("path, alternative", [
    ("kopf._core.reactor.running", "use kopf.operator(), kopf.run()"),
    ("kopf._core.reactor.subhandling", "use kopf.execute()"),
    ("kopf._kits.runner", "use kopf.testing.KopfRunner"),
    ("kopf._cogs.aiokits.aiotasks", "use the public API of `kopf`"),
])
def test_other_paths_fail_with_the_public_alternative(path: str, alternative: str) -> None:
    with pytest.raises(ModuleNotFoundError) as error:
        importlib.import_module(path)
    assert f"{path} is Kopf's internal module, which this engine (kopf-rs) does not provide" in str(error.value)
    assert alternative in str(error.value)


# The same calls in both engines; each result as JSON (tuples as lists, objects as reprs).
HELPERS = r"""
import json, sys
from kopf._cogs.structs import dicts, diffs

def run():
    body = {'spec': {'a': {'b': 1}, 'l': [1, 2]}, 'status': None}
    out = {}
    out['resolve'] = dicts.resolve(body, 'spec.a.b')
    out['resolve_default'] = dicts.resolve(body, 'spec.x.y', 'dflt')
    out['resolve_nonmapping'] = dicts.resolve(body, 'spec.l.x', 'dflt')
    for field in ('spec.x', 'spec.l.x'):
        try:
            dicts.resolve(body, field)
        except Exception as e:
            out[f'resolve_error {field}'] = type(e).__name__
    out['parse_field'] = [dicts.parse_field('a.b'), dicts.parse_field(['a', 'b']), dicts.parse_field(None)]
    d = {}
    dicts.ensure(d, 'x.y.z', 1)
    dicts.ensure(d, ['x', 'w'], 2)
    out['ensure'] = d
    dicts.remove(d, 'x.y.z')
    out['remove_prunes'] = d
    dicts.remove(d, 'absent.field')
    out['remove_absent'] = d
    dst = {'keep': 1}
    dicts.cherrypick(body, dst, ['spec.a', 'spec.absent', 'status'], picker=lambda v: ('picked', v))
    out['cherrypick'] = dst
    out['walk'] = list(dicts.walk([{'a': 1}, [{'b': {'c': 2}}, None], 3], nested=['b', 'x']))
    view = dicts.MappingView(body, 'spec.a')
    out['view'] = [dict(view), len(view), 'b' in view]
    patch = {}
    dicts.MutableMappingView(patch, 'status.sub')['k'] = 'v'
    out['mutable_view'] = patch
    old = {'spec': {'a': 1, 'b': {'c': 2}, 'gone': 0}, 'meta': 1}
    new = {'spec': {'a': 2, 'b': {'c': 3, 'd': 4}, 'new': [1]}, 'meta': 1}
    out['diff'] = sorted(map(list, diffs.diff(old, new)))
    out['diff_left'] = sorted(map(list, diffs.diff(old, new, scope=diffs.DiffScope.LEFT)))
    out['diff_right'] = sorted(map(list, diffs.diff(old, new, scope=diffs.DiffScope.RIGHT)))
    out['diff_none'] = [list(diffs.diff(None, {'a': 1})), list(diffs.diff({'a': 1}, None)), list(diffs.EMPTY)]
    whole = diffs.diff(old, new)
    out['reduce'] = sorted(map(list, diffs.reduce(whole, ('spec', 'b'))))
    out['reduce_deeper'] = sorted(map(list, diffs.reduce(diffs.diff({'x': None}, {'x': {'y': {'z': 1}}}), ('x', 'y'))))
    out['diff_repr'] = [str(op) for op, *_ in diffs.diff({'a': 1}, {'a': 2})]
    return out

print(json.dumps(run(), default=repr, sort_keys=True))
"""


def helpers_in(python: str, tmp_path: Path) -> Any:
    script = tmp_path / f"helpers-{uuid.uuid4().hex[:6]}.py"
    script.write_text(HELPERS)
    result = subprocess.run([python, str(script)], capture_output=True, text=True, check=True)
    return json.loads(result.stdout)


def test_helpers_give_what_kopfs_give(reference_kopf: Path, tmp_path: Path) -> None:
    import sys
    ours = helpers_in(sys.executable, tmp_path)
    kopfs = helpers_in(str(reference_kopf.with_name("python")), tmp_path)
    assert ours == kopfs


def test_walking_over_text_is_not_endless() -> None:
    """Kopf 1.45.2's `walk()` recurses without end into a string among the objects (a string
    is iterable, and so is each of its characters); ours yields it as an object."""
    from kopf._cogs.structs import dicts
    assert list(dicts.walk(["text", {"a": 1}])) == ["text", {"a": 1}]


EMBEDDED = """
from typing import Any
from kopf._cogs.structs import bodies
from kopf._core.engines import posting

import kopf

@kopf.on.create('greetings')
def created(body: bodies.Body, patch: kopf.Patch, **_: Any) -> None:
    posting.info(body, reason='Embedded', message='handled by an embedded operator')
    patch.status['embedded'] = bodies.build_object_reference(body)['name']
"""


def test_an_embedded_operator_from_kopfs_paths(crd: None, namespace: str, tmp_path: Path) -> None:
    """As an application embeds Kopf: load the handlers, configure logging, run the operator
    in a thread until a stop flag, with the modules' paths that Kopf has."""
    from kopf._cogs.helpers import loaders
    from kopf._core.actions import loggers
    from kopf._core.intents import registries

    script = tmp_path / "embedded.py"
    script.write_text(textwrap.dedent(EMBEDDED))
    registry = registries.SmartOperatorRegistry()
    previous = registries.get_default_registry()
    registries.set_default_registry(registry)
    try:
        loaders.preload(paths=[str(script)], modules=[])
    finally:
        registries.set_default_registry(previous)
    assert [h.id for h in registry._changing] == ["created"]
    loggers.configure(verbose=True)

    ready, stop = threading.Event(), threading.Event()
    thread = threading.Thread(target=kopf.run, kwargs=dict(
        registry=registry, standalone=True, namespaces=[namespace], ready_flag=ready, stop_flag=stop))
    thread.start()
    try:
        assert ready.wait(30), "the operator started"
        apply({"apiVersion": "demo.kopf.dev/v1", "kind": "Greeting",
               "metadata": {"name": "embedded", "namespace": namespace}, "spec": {}})
        eventually(lambda: kubectl_json("get", "greeting", "embedded", "-n", namespace)
                   .get("status", {}).get("embedded") == "embedded", what="the handler's patch")
        events = eventually(lambda: [e for e in kubectl_json("get", "events", "-n", namespace)["items"]
                                     if e["reason"] == "Embedded"], what="the posted event")
        assert events[0]["message"] == "handled by an embedded operator"
    finally:
        stop.set()
        thread.join(30)
    assert not thread.is_alive(), "the operator stopped on the flag"
    kubectl("delete", "greeting", "embedded", "-n", namespace, "--wait=false")
