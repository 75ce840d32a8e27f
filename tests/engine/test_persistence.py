"""Where handlers' progress and the last handled state are kept: each storage choice,
strict schemas, built-in resources, and operators moving between PyPI's Kopf 1.45.2
and our engine on the same live objects, both ways."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from support.audit import AuditLog
from support.cluster import apply, kubectl
from support.operators import OperatorProcess, eventually, get, write_script

HANDLERS = """
import json
import kopf

{storages}

@kopf.on.startup()
def configure(settings, **_):
    {settings}

@kopf.on.create('greetings')
def created(name, retry, spec, logger, **_):
    if spec.get('flaky') and retry == 0:
        raise kopf.TemporaryError("not yet", delay=3)
    logger.info(f"CREATED {{name}} retry={{retry}}")

@kopf.on.update('greetings')
def updated(name, logger, **_):
    logger.info(f"UPDATED {{name}}")

@kopf.on.delete('greetings')
def deleted(name, logger, **_):
    logger.info(f"DELETED {{name}}")
"""

# A progress storage of the operator's own: all records in one annotation.
CUSTOM_STORAGES = """
class OneAnnotationProgress(kopf.ProgressStorage):
    KEY = 'custom.example.com/progress'

    def _records(self, body, patch):
        return json.loads(patch.metadata.annotations.get(self.KEY) or body.metadata.annotations.get(self.KEY) or '{}')

    def fetch(self, *, key, body):
        return json.loads(body.metadata.annotations.get(self.KEY) or '{}').get(key)

    def store(self, *, key, record, body, patch):
        records = self._records(body, patch)
        records[key] = {k: v for k, v in record.items() if v is not None}
        patch.metadata.annotations[self.KEY] = json.dumps(records, sort_keys=True)

    def purge(self, *, key, body, patch):
        records = self._records(body, patch)
        if key in records:
            del records[key]
            patch.metadata.annotations[self.KEY] = json.dumps(records, sort_keys=True) if records else None

    def touch(self, *, body, patch, value):
        if body.metadata.annotations.get('custom.example.com/touch') != value:
            patch.metadata.annotations['custom.example.com/touch'] = value

    def clear(self, *, essence):
        essence = super().clear(essence=essence)
        annotations = essence.get('metadata', {}).get('annotations', {})
        for key in [key for key in annotations if key.startswith('custom.example.com/')]:
            del annotations[key]
        self.remove_empty_stanzas(essence)
        return essence


class SortedDiffBase(kopf.DiffBaseStorage):
    KEY = 'custom.example.com/essence'

    def build(self, *, body, extra_fields=None):
        essence = super().build(body=body, extra_fields=extra_fields)
        self.remove_annotations(essence, {self.KEY})
        self.remove_empty_stanzas(essence)
        return essence

    def fetch(self, *, body):
        text = body.metadata.annotations.get(self.KEY)
        return json.loads(text) if text else None

    def store(self, *, body, patch, essence):
        patch.metadata.annotations[self.KEY] = json.dumps(essence, sort_keys=True)
"""


def annotation(key: str) -> Callable[[dict[str, Any]], Any]:
    return lambda obj: obj["metadata"].get("annotations", {}).get(key)


def status_field(*path: str) -> Callable[[dict[str, Any]], Any]:
    def find(obj: dict[str, Any]) -> Any:
        value: Any = obj.get("status", {})
        for key in path:
            value = value.get(key, {}) if isinstance(value, dict) else {}
        return value or None
    return find


def decoded(find: Callable[[dict[str, Any]], Any]) -> Callable[[dict[str, Any]], Any]:
    return lambda obj: json.loads(found) if isinstance(found := find(obj), str) else found


def both(*finds: Callable[[dict[str, Any]], Any]) -> Callable[[dict[str, Any]], Any]:
    return lambda obj: all(find(obj) for find in finds) and finds[0](obj)


STORAGE_CHOICES = {
    "annotations-prefixed": (
        "settings.persistence.progress_storage = kopf.AnnotationsProgressStorage(prefix='op.example.com')\n"
        "    settings.persistence.diffbase_storage = kopf.AnnotationsDiffBaseStorage("
        "prefix='op.example.com', key='last-seen')",
        decoded(annotation("op.example.com/created")),
        annotation("op.example.com/last-seen"),
        '{"spec":{"flaky":true}}\n',
    ),
    "status": (
        "settings.persistence.progress_storage = kopf.StatusProgressStorage(name='op')\n"
        "    settings.persistence.diffbase_storage = kopf.StatusDiffBaseStorage(name='op')",
        status_field("op", "progress", "created"),
        status_field("op", "last-handled-configuration"),
        '{"spec":{"flaky":true}}',
    ),
    "multi": (
        "settings.persistence.progress_storage = kopf.MultiProgressStorage([\n"
        "        kopf.AnnotationsProgressStorage(prefix='op.example.com'), kopf.StatusProgressStorage(name='op')])\n"
        "    settings.persistence.diffbase_storage = kopf.MultiDiffBaseStorage([\n"
        "        kopf.StatusDiffBaseStorage(name='op'), kopf.AnnotationsDiffBaseStorage(prefix='op.example.com')])",
        both(decoded(annotation("op.example.com/created")), status_field("op", "progress", "created")),
        both(status_field("op", "last-handled-configuration"), annotation("op.example.com/last-handled-configuration")),
        '{"spec":{"flaky":true}}',
    ),
    "custom-python": (
        "settings.persistence.progress_storage = OneAnnotationProgress()\n"
        "    settings.persistence.diffbase_storage = SortedDiffBase()",
        lambda obj: json.loads(annotation("custom.example.com/progress")(obj) or "{}").get("created"),
        annotation("custom.example.com/essence"),
        '{"spec": {"flaky": true}}',
    ),
}


def greeting(name: str, namespace: str, **spec: Any) -> dict[str, Any]:
    return {"apiVersion": "demo.kopf.dev/v1", "kind": "Greeting",
            "metadata": {"name": name, "namespace": namespace}, "spec": spec}


@pytest.mark.parametrize("choice", list(STORAGE_CHOICES))
def test_state_lands_where_configured(crd: None, namespace: str, tmp_path: Path, choice: str) -> None:
    settings, find_progress, find_diffbase, stored_essence = STORAGE_CHOICES[choice]
    script = write_script(tmp_path, HANDLERS.format(storages=CUSTOM_STORAGES, settings=settings))
    operator = OperatorProcess(["run", "-n", namespace, "--verbose", str(script)], cwd=tmp_path)
    try:
        apply(greeting("g", namespace, flaky=True))
        record = eventually(lambda: find_progress(get("greeting", "g", namespace)), what="a progress record")
        assert record["retries"] == 1 and record["message"] == "not yet" and record["purpose"] == "create"
        operator.wait_for(r"CREATED g retry=1")
        obj = eventually(lambda: find_diffbase(o := get("greeting", "g", namespace)) and o, what="the diff base")
        assert find_diffbase(obj) == stored_essence
        assert not find_progress(obj), "the progress is purged when the handlers are done"
        everything = json.dumps(obj).replace("kopf.zalando.org/KopfFinalizerMarker", "")
        assert "kopf.zalando.org/" not in everything, "nothing under the default prefix"

        kubectl("patch", "greeting", "g", "-n", namespace, "--type=merge", "-p", '{"spec": {"x": 1}}')
        operator.wait_for(r"UPDATED g")
        kubectl("delete", "greeting", "g", "-n", namespace, "--timeout=30s")
        operator.wait_for(r"Deleted, really deleted")
    finally:
        assert operator.stop() == 0
    output = operator.output
    assert output.count("CREATED g") == 1 and output.count("UPDATED g") == 1 and output.count("DELETED g") == 1
    assert "Traceback" not in output and "unexpected error" not in output


@pytest.mark.parametrize("engine", ["kopf", "ours"])
def test_a_failing_custom_storage_holds_back_only_its_objects(crd: None, namespace: str, tmp_path: Path,
                                                              reference_kopf: Path, engine: str) -> None:
    """A storage that raises throttles its object's processing; an event that comes while it
    is throttled is processed when the throttling is over, which is said. The same in Kopf
    1.45.2 (but the error's text: ours names the storage's method, Kopf gives the repr)."""
    storages = """
class PickyStorage(kopf.AnnotationsProgressStorage):
    def fetch(self, *, key, body):
        if body.metadata.labels.get('broken'):
            raise RuntimeError(f"cannot read {body.metadata.name}")
        return super().fetch(key=key, body=body)
"""
    settings = "settings.persistence.progress_storage = PickyStorage(); settings.queueing.error_delays = [4]"
    script = write_script(tmp_path, HANDLERS.format(storages=storages, settings=settings), name=f"{engine}.py")
    operator = OperatorProcess(["run", "-n", namespace, "--verbose", str(script)], cwd=tmp_path,
                               kopf=reference_kopf if engine == "kopf" else None)
    try:
        broken = greeting("broken", namespace)
        broken["metadata"]["labels"] = {"broken": "yes"}
        apply([broken, greeting("fine", namespace)])
        operator.wait_for(r"CREATED fine retry=0")
        operator.wait_for(rf"\[{namespace}/broken\] Throttling for 4 seconds due to an unexpected error: "
                          r".*cannot read broken")
        assert "CREATED broken" not in operator.output
        kubectl("label", "greeting", "broken", "-n", namespace, "broken-")
        operator.wait_for(r"CREATED broken retry=0")
    finally:
        assert operator.stop() == 0
    output = operator.output
    if engine == "ours":
        assert "error: PickyStorage.fetch() failed: RuntimeError: cannot read broken" in output
    over = output.index(f"[{namespace}/broken] Throttling is over. Switching back to normal operations.")
    assert over < output.index("CREATED broken")
    assert output.count("CREATED broken") == 1


STRICT_CRD = {
    "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
    "metadata": {"name": "strictthings.demo.kopf.dev"},
    "spec": {
        "group": "demo.kopf.dev", "scope": "Namespaced",
        "names": {"plural": "strictthings", "singular": "strictthing", "kind": "StrictThing"},
        "versions": [{
            "name": "v1", "served": True, "storage": True, "subresources": {"status": {}},
            "schema": {"openAPIV3Schema": {"type": "object", "properties": {
                "spec": {"type": "object", "properties": {"size": {"type": "integer"}}},
                "status": {"type": "object", "properties": {"phase": {"type": "string"}}},
            }}},
        }],
    },
}


def test_strict_schema_with_the_default_storages(cluster: dict[str, str], namespace: str, tmp_path: Path) -> None:
    apply(STRICT_CRD)
    kubectl("wait", "--for=condition=Established", "crd/strictthings.demo.kopf.dev", "--timeout=30s")
    script = write_script(tmp_path, """
        import kopf

        @kopf.on.create('strictthings')
        def created(name, retry, logger, patch, **_):
            if retry == 0:
                raise kopf.TemporaryError("again", delay=1)
            patch.status['phase'] = 'Ready'
            logger.info(f"CREATED {name}")

        @kopf.on.update('strictthings')
        def updated(name, logger, **_):
            logger.info(f"UPDATED {name}")
    """)
    operator = OperatorProcess(["run", "-n", namespace, "--verbose", str(script)], cwd=tmp_path)
    try:
        apply({"apiVersion": "demo.kopf.dev/v1", "kind": "StrictThing",
               "metadata": {"name": "s", "namespace": namespace}, "spec": {"size": 1}})
        operator.wait_for(r"CREATED s")
        # The status first, the diff base in the next request: wait for both.
        obj = eventually(lambda: (o := get("strictthing", "s", namespace)).get("status", {}).get("phase") and
                         "kopf.zalando.org/last-handled-configuration" in o["metadata"].get("annotations", {}) and o,
                         what="the status and the diff base")
        assert obj["status"] == {"phase": "Ready"}
        assert obj["metadata"]["annotations"]["kopf.zalando.org/last-handled-configuration"] == \
            '{"spec":{"size":1}}\n'
        kubectl("patch", "strictthing", "s", "-n", namespace, "--type=merge", "-p", '{"spec": {"size": 2}}')
        operator.wait_for(r"UPDATED s")
    finally:
        assert operator.stop() == 0
    assert operator.output.count("CREATED s") == 1 and operator.output.count("UPDATED s") == 1


def test_a_built_in_resource(cluster: dict[str, str], namespace: str, tmp_path: Path) -> None:
    script = write_script(tmp_path, """
        import kopf

        @kopf.on.create('configmaps', labels={'handled': 'yes'})
        def created(name, body, logger, **_):
            logger.info(f"CREATED {name} {dict(body['data'])}")

        @kopf.on.update('configmaps', labels={'handled': 'yes'})
        def updated(name, diff, logger, **_):
            logger.info(f"UPDATED {name} {[tuple(d) for d in diff]}")

        @kopf.on.delete('configmaps', labels={'handled': 'yes'})
        def deleted(name, logger, **_):
            logger.info(f"DELETED {name}")
    """)
    operator = OperatorProcess(["run", "-n", namespace, "--verbose", str(script)], cwd=tmp_path)
    try:
        apply({"apiVersion": "v1", "kind": "ConfigMap", "data": {"k": "v"},
               "metadata": {"name": "cm", "namespace": namespace, "labels": {"handled": "yes"}}})
        operator.wait_for(r"CREATED cm \{'k': 'v'\}")
        obj = eventually(lambda: (o := get("configmap", "cm", namespace))["metadata"].get("annotations") and o,
                         what="the diff base")
        assert obj["metadata"]["annotations"]["kopf.zalando.org/last-handled-configuration"] == \
            '{"data":{"k":"v"},"metadata":{"labels":{"handled":"yes"}}}\n'
        kubectl("patch", "configmap", "cm", "-n", namespace, "--type=merge", "-p", '{"data": {"k": "w"}}')
        operator.wait_for(r"UPDATED cm \[\('change', \('data', 'k'\), 'v', 'w'\)\]")
        kubectl("delete", "configmap", "cm", "-n", namespace, "--timeout=30s")
        operator.wait_for(r"DELETED cm")
    finally:
        assert operator.stop() == 0


# A handler id longer than 63 characters: its progress is kept under hashed V1 and V2 keys.
LONG_ID = "a_creation_handler_with_a_name_long_enough_to_be_shortened_by_a_hash"
HANDOVER = HANDLERS.format(storages="", settings="pass") + f"""
@kopf.on.create('greetings', id='{LONG_ID}')
def long_named(name, retry, spec, logger, **_):
    if spec.get('flaky') and retry == 0:
        raise kopf.TemporaryError("not yet either", delay=3)
    logger.info(f"LONG {{name}} retry={{retry}}")
"""


@pytest.mark.parametrize("direction", ["kopf-to-ours", "ours-to-kopf"])
def test_hand_over_between_kopf_and_ours(crd: None, namespace: str, tmp_path: Path,
                                         reference_kopf: Path, direction: str) -> None:
    """One engine handles some objects and stops: one done, one mid-retries, one changed
    later; the other engine goes on from there, running nothing twice and skipping nothing."""
    engines = {"kopf": reference_kopf, "ours": None}
    first_engine, second_engine = (engines[name] for name in direction.split("-to-"))
    script = write_script(tmp_path, HANDOVER)
    args = ["run", "-n", namespace, "--standalone", "--verbose", str(script)]

    first = OperatorProcess(args, cwd=tmp_path, kopf=first_engine)
    try:
        apply([greeting("done", namespace, x=1), greeting("changed", namespace, x=1),
               greeting("flaky", namespace, flaky=True)])
        first.wait_for(r"CREATED done retry=0")
        first.wait_for(r"CREATED changed retry=0")
        first.wait_for(r"Handler 'created' failed temporarily: not yet")
        first.wait_for(rf"Handler '{LONG_ID}' failed temporarily: not yet either")
        for name in ("done", "changed"):
            eventually(lambda n=name: annotation("kopf.zalando.org/last-handled-configuration")(
                get("greeting", n, namespace)), what=f"the diff base of {name}")
        eventually(lambda: annotation("kopf.zalando.org/created")(get("greeting", "flaky", namespace)),
                   what="the progress of flaky")
    finally:
        assert first.stop() == 0
    kubectl("patch", "greeting", "changed", "-n", namespace, "--type=merge", "-p", '{"spec": {"x": 2}}')

    second = OperatorProcess(args, cwd=tmp_path, kopf=second_engine)
    try:
        second.wait_for(r"CREATED flaky retry=1")
        second.wait_for(r"LONG flaky retry=1")
        second.wait_for(r"UPDATED changed")
        kubectl("delete", "greeting", "done", "-n", namespace, "--timeout=30s")
        second.wait_for(r"DELETED done")
        flaky = eventually(lambda: (o := get("greeting", "flaky", namespace))["metadata"]["annotations"]
                           .get("kopf.zalando.org/last-handled-configuration") and o, what="flaky's diff base")
        assert "kopf.zalando.org/created" not in flaky["metadata"]["annotations"]
    finally:
        assert second.stop() == 0
    output = second.output
    assert "CREATED done" not in output and "CREATED changed" not in output
    assert "retry=0" not in output, "the retries go on from where the first engine stopped"
    assert output.count("UPDATED changed") == 1 and "UPDATED done" not in output and "UPDATED flaky" not in output
    assert output.count("CREATED flaky") == 1 and output.count("DELETED done") == 1
    assert output.count("LONG flaky") == 1 and "LONG done" not in output


def lifecycle(engine: Path | None, namespace: str, tmp_path: Path, name: str) -> AuditLog:
    """One object created, updated once and deleted, with one trivial handler for each
    (the creation's result goes to the status, as most operators' do)."""
    script = write_script(tmp_path, """
        import kopf

        @kopf.on.create('greetings')
        def created(**_):
            return {'message': 'created'}

        @kopf.on.update('greetings')
        def updated(**_):
            pass

        @kopf.on.delete('greetings')
        def deleted(**_):
            pass
    """, name=f"{name}.py")
    audit = AuditLog()
    operator = OperatorProcess(["run", "-n", namespace, "--standalone", str(script)], cwd=tmp_path, kopf=engine)
    try:
        apply(greeting(name, namespace, x=1))
        operator.wait_for(r"Creation is processed")
        eventually(lambda: annotation("kopf.zalando.org/last-handled-configuration")(get("greeting", name, namespace)),
                   what="the diff base")
        kubectl("patch", "greeting", name, "-n", namespace, "--type=merge", "-p", '{"spec": {"x": 2}}')
        operator.wait_for(r"Updating is processed")
        kubectl("delete", "greeting", name, "-n", namespace, "--timeout=30s")
        operator.wait_for(r"Deleting is processed|Deletion is processed")
    finally:
        assert operator.stop() == 0
    return audit


def test_api_writes_per_lifecycle_are_no_more_than_kopfs(crd: None, namespace: str, tmp_path: Path,
                                                         reference_kopf: Path) -> None:
    ours = lifecycle(None, namespace, tmp_path, "ours").writes(agent="kopf-rs/", namespace=namespace)
    kopfs = lifecycle(reference_kopf, namespace, tmp_path, "kopf").writes(agent="kopf/", namespace=namespace)
    print(f"\nAPI writes per lifecycle: ours {dict(ours)}; Kopf 1.45.2 {dict(kopfs)}")

    def on_objects(writes: Any) -> int:
        return sum(n for what, n in writes.items() if "greetings" in what)
    assert on_objects(ours) <= on_objects(kopfs)
    assert ours["create events"] == kopfs["create events"], "the same Kubernetes Events are posted"
    assert on_objects(ours) > 0, "the audit log sees our requests"
