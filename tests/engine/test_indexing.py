"""In-memory indices (`@kopf.index`) on the real control plane: objects entering, changing
and leaving an index (by deletion, or by no longer matching its filters); handlers that
start only once the objects existing at the start are indexed; indices of a cluster-scoped
resource beside a namespaced one; index functions' errors, logged as PyPI's Kopf logs them."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
from support.cluster import apply, kopf_cli, kubectl
from support.operators import OperatorProcess, eventually, get, write_script


def greeting(name: str, namespace: str, labels: dict[str, str] | None = None, **spec: Any) -> dict[str, Any]:
    return {"apiVersion": "demo.kopf.dev/v1", "kind": "Greeting",
            "metadata": {"name": name, "namespace": namespace, "labels": labels or {}}, "spec": spec}


def run(tmp_path: Path, namespace: str, source: str, *args: str, kopf: Path | None = None) -> OperatorProcess:
    """`kopf run` of this source: on the namespace, standalone, unless `args` say otherwise."""
    script = write_script(tmp_path, source)
    options = args or ("-n", namespace, "--standalone")
    return OperatorProcess(["run", *options, "--verbose", str(script)], cwd=tmp_path, kopf=kopf)


# A reporter object's timer writes the index, as a handler reads it, into its status.
REPORTING = """
import kopf

@kopf.index('greetings', labels={'indexed': 'yes'}, field='spec.group', value=kopf.PRESENT)
def by_group(name, spec, **_):
    return {spec.get('group'): name}

@kopf.timer('greetings', labels={'role': 'reporter'}, interval=0.3)
def report(by_group: kopf.Index, patch, **_):
    assert isinstance(by_group, kopf.Index)
    # A list, not a dict: a merge-patch replaces it whole (keys that left the index are gone).
    patch.status['index'] = sorted([key, sorted(store)] for key, store in by_group.items())
    patch.status['count'] = len(by_group)
"""


def reported(namespace: str) -> Any:
    pairs = get("greeting", "reporter", namespace).get("status", {}).get("index")
    return dict(pairs) if pairs is not None else None


def wait_reported(namespace: str, expected: dict[str, list[str]]) -> None:
    eventually(lambda: reported(namespace) == expected or None, timeout=20,
               what=f"the index to be {expected} (last: {reported(namespace)})")


def test_objects_enter_change_and_leave_the_index(crd: None, namespace: str, tmp_path: Path) -> None:
    operator = run(tmp_path, namespace, REPORTING)
    try:
        apply(greeting("reporter", namespace, labels={"role": "reporter"}))
        apply([greeting(name, namespace, labels={"indexed": "yes"}, group=group)
               for name, group in (("a", "x"), ("b", "x"), ("c", "y"))])
        apply(greeting("no-group", namespace, labels={"indexed": "yes"}))  # out of the field's filter
        wait_reported(namespace, {"x": ["a", "b"], "y": ["c"]})

        apply(greeting("c", namespace, labels={"indexed": "yes"}, group="x"))  # its key changes
        wait_reported(namespace, {"x": ["a", "b", "c"]})

        kubectl("label", "greeting", "b", "-n", namespace, "indexed=no", "--overwrite")  # out of the filter
        wait_reported(namespace, {"x": ["a", "c"]})

        kubectl("delete", "greeting", "a", "-n", namespace)
        wait_reported(namespace, {"x": ["c"]})

        kubectl("label", "greeting", "b", "-n", namespace, "indexed=yes", "--overwrite")  # back in
        wait_reported(namespace, {"x": ["b", "c"]})
    finally:
        assert operator.stop() == 0
    assert "Traceback" not in operator.output


def test_changes_while_paused_are_indexed_on_resuming(peering: str, namespace: str, tmp_path: Path) -> None:
    operator = run(tmp_path, namespace, REPORTING, "-n", namespace, "--peering", peering)
    try:
        apply(greeting("reporter", namespace, labels={"role": "reporter"}))
        apply([greeting(name, namespace, labels={"indexed": "yes"}, group="x") for name in ("a", "b", "c")])
        wait_reported(namespace, {"x": ["a", "b", "c"]})

        frozen = kopf_cli("freeze", "-n", namespace, "--peering", peering, "--lifetime", "600", "--id", "ops")
        assert frozen.returncode == 0, frozen.stderr
        operator.wait_for(r"Pausing operations in favour of")
        kubectl("delete", "greeting", "a", "-n", namespace)  # unseen: the watch is stopped
        apply(greeting("b", namespace, labels={"indexed": "yes"}, group="y"))
        apply(greeting("d", namespace, labels={"indexed": "yes"}, group="y"))
        resumed = kopf_cli("resume", "-n", namespace, "--peering", peering, "--id", "ops")
        assert resumed.returncode == 0, resumed.stderr
        wait_reported(namespace, {"x": ["c"], "y": ["b", "d"]})
    finally:
        assert operator.stop() == 0


WAITING = """
import time
import kopf

@kopf.index('greetings')
def by_name(name, **_):
    time.sleep(0.2)  # slow: without the wait, the first handlers would see a partial index
    return {name: True}

@kopf.on.resume('greetings')
@kopf.on.create('greetings')
def seen(by_name: kopf.Index, name, logger, **_):
    logger.info(f"SEEN {len(by_name)} FROM {name}")
"""


@pytest.mark.parametrize("engine", ["kopf", "ours"])
def test_handlers_start_once_the_existing_objects_are_indexed(crd: None, namespace: str, tmp_path: Path,
                                                              reference_kopf: Path, engine: str) -> None:
    names = [f"g{i}" for i in range(5)]
    apply([greeting(name, namespace) for name in names])
    operator = run(tmp_path, namespace, WAITING, kopf=reference_kopf if engine == "kopf" else None)
    try:
        output = operator.wait_for(r"SEEN \d+ FROM", count=len(names))
    finally:
        assert operator.stop() == 0
    assert re.findall(r"SEEN (\d+) FROM", output) == ["5"] * len(names)


TWO_RESOURCES = """
import kopf

@kopf.index('namespaces')
def namespace_teams(name, labels, **_):
    return {name: labels.get('team')}

@kopf.index('greetings')
async def greeting_names(namespace, name, **_):
    return {namespace: name}

@kopf.on.create('greetings')
def create(namespace, namespace_teams: kopf.Index, greeting_names: kopf.Index, patch, **_):
    patch.status['team'] = list(namespace_teams.get(namespace, []))
    patch.status['neighbours'] = sorted(greeting_names.get(namespace, []))
"""


def test_a_cluster_scoped_index_beside_a_namespaced_one(crd: None, namespace: str, tmp_path: Path) -> None:
    kubectl("label", "namespace", namespace, "team=blue")
    apply(greeting("first", namespace))
    operator = run(tmp_path, namespace, TWO_RESOURCES, "--all-namespaces", "--standalone")
    try:
        apply(greeting("second", namespace))
        second = eventually(lambda: get("greeting", "second", namespace).get("status", {}).get("team"),
                            timeout=20, what="the second greeting's status")
        status = get("greeting", "second", namespace)["status"]
        # Each object has its own worker: the first one's write may land after the second's.
        eventually(lambda: get("greeting", "first", namespace).get("status", {}).get("team"),
                   timeout=20, what="the first greeting's status")
        first = get("greeting", "first", namespace)["status"]
    finally:
        assert operator.stop() == 0
    assert second == ["blue"]
    assert status["neighbours"] == ["first", "second"]
    assert first["team"] == ["blue"]  # existing at the start: handled after the namespaces were indexed


FAILING = """
import kopf

@kopf.index('greetings')
def by_mood(name, spec, **_):
    if spec.get('mood') == 'bad':
        raise ValueError(f"cannot index {name}")
    return {spec.get('mood'): name}

@kopf.index('greetings', errors=kopf.ErrorsMode.PERMANENT)
def strict(name, spec, **_):
    if spec.get('mood') == 'bad':
        raise kopf.PermanentError("no bad moods")
    return name
"""


@pytest.mark.parametrize("engine", ["kopf", "ours"])
def test_errors_are_logged_as_kopf_logs_them(crd: None, namespace: str, tmp_path: Path, reference_kopf: Path,
                                             engine: str) -> None:
    operator = run(tmp_path, namespace, FAILING, kopf=reference_kopf if engine == "kopf" else None)
    try:
        apply(greeting("sad", namespace, mood="bad"))
        output = operator.wait_for(r"Indexer 'strict' failed permanently")
        output = operator.wait_for(r"Indexer 'by_mood' failed with an exception and will ignore it")
    finally:
        assert operator.stop() == 0
    assert f"[{namespace}/sad] Indexer 'by_mood' failed with an exception and will ignore it: cannot index sad\n" \
        in output
    assert f"[{namespace}/sad] Indexer 'strict' failed permanently: no bad moods\n" in output
    assert "ValueError: cannot index sad" in output  # with the traceback


TYPES = """
import kopf

class Marker:  # the operator's own class: kept as an object, found by an equal one
    def __init__(self, name):
        self.name = name
    def __eq__(self, other):
        return isinstance(other, Marker) and other.name == self.name
    def __hash__(self):
        return hash(self.name)

@kopf.index('greetings', labels={'indexed': 'yes'})
def rich(name, namespace, spec, body, **_):
    return {(namespace, name): {'spec': dict(spec), 'float': 1.5, 'flag': True, 'nothing': None,
                                'bytes': b'x', 'frozen': frozenset({1}), 'list': [1, (2, 3)]},
            Marker(name): body, 'spec': spec, 1.5: Marker(name)}

@kopf.index('greetings', labels={'indexed': 'yes'})
def plain(name, **_):
    return name  # not a dict: under the key None

@kopf.on.create('greetings', labels={'role': 'checker'})
def check(rich: kopf.Index, plain: kopf.Index, namespace, patch, **_):
    [value] = rich[(namespace, 'a')]
    [body] = rich[Marker('a')]
    try:
        rich[['unhashable']]
    except TypeError:
        unhashable = True
    else:
        unhashable = False
    patch.status['checks'] = {
        'tuple key': value == {'spec': {'group': 'x'}, 'float': 1.5, 'flag': True, 'nothing': None,
                               'bytes': b'x', 'frozen': frozenset({1}), 'list': [1, (2, 3)]},
        'body view': isinstance(body, kopf.Body) and body.spec['group'] == 'x' and body.meta.name == 'a',
        'spec views': len(rich['spec']) == 2 and all(isinstance(s, kopf.Spec) for s in rich['spec']),
        'objects': Marker('b') in rich[1.5] and len(rich[1.5]) == 2,
        'plain under None': sorted(plain[None]) == ['a', 'b'] and list(plain) == [None],
        'missing key': (namespace, 'zzz') not in rich and rich.get((namespace, 'zzz')) is None,
        'unhashable': unhashable,
        'repr': repr(plain) in ("{None: ['a', 'b']}", "{None: ['b', 'a']}"),
    }
"""


def test_values_come_back_as_they_were_indexed(crd: None, namespace: str, tmp_path: Path) -> None:
    apply([greeting(name, namespace, labels={"indexed": "yes"}, group="x") for name in ("a", "b")])
    operator = run(tmp_path, namespace, TYPES)
    try:
        apply(greeting("checker", namespace, labels={"role": "checker"}))
        checks = eventually(lambda: get("greeting", "checker", namespace).get("status", {}).get("checks"),
                            timeout=20, what="the checks")
    finally:
        assert operator.stop() == 0
    assert checks == dict.fromkeys(checks, True) and len(checks) == 8
