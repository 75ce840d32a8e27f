"""One run of a corpus operator on one engine, and what a user could see of it: the objects
after each step of the scenario, the API writes per object (from the audit log), the log
lines, the Kubernetes Events, and how the process ended on SIGTERM (or SIGINT). All of it normalised
(names of the run's namespace, times, uids) so that two runs can be compared line by line."""

from __future__ import annotations

import collections
import contextlib
import dataclasses
import json
import os
import re
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from support.operators import api_server, pod_secrets

from . import charting, restricting

STOP_GRACE = 30.0  # Kubernetes' default terminationGracePeriodSeconds
WRITES = frozenset({"create", "update", "patch", "delete", "deletecollection"})
TIME = re.compile(r"\d{4}-\d\d-\d\d[T ]\d\d:\d\d:\d\d(?:[.,]\d+)?(?:Z|[+-]\d\d:?\d\d)?")
UID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")
ADDRESS = re.compile(r"0x[0-9a-f]{6,}")
# The simulated node a pod is scheduled to (python/kopf/_operating/cluster/kwok.yaml: two alike): the scheduler's pick.
NODE = re.compile(r"\bkwok-node-\d+\b")
IP = re.compile(r"\b\d{1,3}\.\d{1,3}\.\d{1,3}\.\d{1,3}\b")  # e.g. a Service's cluster IP
# A pod's service-account token volume: named with a random suffix by the API server's admission.
TOKEN_VOLUME = re.compile(r"\bkube-api-access-[a-z0-9]{5}\b")
# Kopf's default log format (`kopf run` and `kopf.configure()`): [time] logger [LEVEL] message.
FOREIGN = re.compile(r"^\S+ \[\w+\] \[(?![^\]]*<ns>)[^\]\s]+\] ")
LOG_LINE = re.compile(r"^\[[^\]]+\]\s+(\S+)\s+\[(\w+)\s*\]\s(.*)$")
DROPPED_METADATA = ("uid", "resourceVersion", "creationTimestamp", "managedFields", "selfLink")
DROPPED_ANNOTATIONS = ("kubectl.kubernetes.io/last-applied-configuration",)


@dataclasses.dataclass
class Recording:
    """What one run showed, normalised."""

    engine: str
    snapshots: dict[str, dict[str, Any]] = dataclasses.field(default_factory=dict)
    writes: collections.Counter[str] = dataclasses.field(default_factory=collections.Counter)
    logs: collections.Counter[str] = dataclasses.field(default_factory=collections.Counter)
    events: collections.Counter[str] = dataclasses.field(default_factory=collections.Counter)
    timeouts: list[str] = dataclasses.field(default_factory=list)
    stop_signal: str = "SIGTERM"
    exit_code: int | None = None  # None: it did not stop within the grace period (killed)
    exit_seconds: float = 0.0
    output: str = ""  # the raw log, to show when something differs
    # The generated RBAC it ran under (ours), and what `kopf rbac record` saw of it; None: admin.
    rbac: restricting.Restriction | None = None
    charted: list[str] = dataclasses.field(default_factory=list)  # the chart's objects, as the dry run took them


class Session:
    """What a scenario may do: kubectl in the run's namespaces, waiting, and snapshots."""

    def __init__(self, *, namespace: str, source: Path | None, resources: tuple[str, ...],
                 recording: Recording, log_path: Path, alias: Callable[[dict[str, Any]], str | None],
                 alive: Callable[[], bool] = lambda: True, venv: Path | None = None) -> None:
        self.namespace = namespace
        self.venv = venv  # its path in the objects (a traceback's file in an error message) is <venv>
        # The run's namespaces: its own first, then the ones named after it (`<namespace>-a`).
        self.namespaces = [namespace]
        self.alive = alive  # whether the operator's process still runs: no waiting for a dead one
        self.alias = alias
        self.aliases: dict[str, str] = {}  # generated names -> names that are the same in both runs
        self.source = source  # the operator's unpacked sdist, if it has one
        self.resources = resources
        self.recording = recording
        self.log_path = log_path

    def kubectl(self, *args: str, input: str | None = None, check: bool = True, namespace: str | None = None) -> str:
        result = subprocess.run(["kubectl", "-n", namespace or self.namespace, *args], input=input,
                                capture_output=True, text=True, check=False)
        if check and result.returncode != 0:
            raise AssertionError(f"kubectl {' '.join(args)} failed: {result.stderr.strip()}")
        return result.stdout

    def apply(self, manifest: str | Path, namespace: str | None = None) -> None:
        text = manifest.read_text() if isinstance(manifest, Path) else manifest
        self.kubectl("apply", "-f", "-", input=text, namespace=namespace)

    def get(self, resource: str, name: str, namespace: str | None = None) -> dict[str, Any] | None:
        output = self.kubectl("get", resource, name, "-o", "json", "--ignore-not-found", namespace=namespace)
        return json.loads(output) if output.strip() else None

    def create_namespace(self, suffix: str) -> str:
        """Another namespace of the run, `<namespace>-<suffix>`: snapshotted, audited and deleted
        with the run's own."""
        name = f"{self.namespace}-{suffix}"
        fresh_namespace(name)
        self.namespaces.append(name)
        return name

    def wait(self, what: str, predicate: Callable[[], bool], timeout: float = 60.0) -> bool:
        """Wait until `predicate()` holds; a timeout is recorded (a difference), not raised."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                if predicate():
                    return True
            except (KeyError, TypeError, AssertionError):
                pass
            if not self.alive():
                break
            time.sleep(0.5)
        self.recording.timeouts.append(what)
        return False

    def log_text(self) -> str:
        return self.log_path.read_text(errors="replace")

    def logged(self, text: str) -> bool:
        return text in self.log_text()

    def settled(self, text: str, least: int, quiet: float = 2.0) -> bool:
        """Whether `text` is logged at least `least` times, and no more times within `quiet` seconds."""
        count = self.log_text().count(text)
        if count < least:
            return False
        time.sleep(quiet)
        return self.log_text().count(text) == count

    def snapshot(self, step: str) -> None:
        """The objects of the scenario's resources in the run's namespaces, as they are now:
        keyed `resource/name` in its own, `resource/namespace/name` in the others."""
        items: dict[str, list[dict[str, Any]]] = {}
        for namespace in self.namespaces:
            for resource in self.resources:
                listed = json.loads(self.kubectl("get", resource, "-o", "json", namespace=namespace))["items"]
                # Cluster-scoped objects (no namespace) are listed once, with the run's own.
                items[resource if namespace == self.namespace else f"{resource}/{namespace}"] = [
                    item for item in listed if item["metadata"].get("namespace", self.namespace) == namespace]
        for item in (item for listed in items.values() for item in listed):
            name = item["metadata"]["name"]
            if name in self.aliases:
                alias = self.aliases[name]
            elif (alias := self.alias(item)) is not None:
                # "{n}": numbered in the order first seen, for objects that are all alike.
                taken = sum(1 for known in self.aliases.values() if known.startswith(alias.split("{n}")[0]))
                alias = alias.replace("{n}", str(taken + 1))
                self.aliases[name] = alias
            # Uids differ in every run: named by their objects (they key maps, e.g. children).
            self.aliases[item["metadata"]["uid"]] = f"<uid of {alias or name}>"
        self.recording.snapshots[step] = {
            normalised_text(f"{resource}/{self.aliased(item['metadata']['name'])}", self.namespace):
                normalised_object(json.loads(self.aliased(self.unplaced(json.dumps(item)))), self.namespace)
            for resource, listed in items.items() for item in listed}

    def unplaced(self, text: str) -> str:
        return text.replace(json.dumps(str(self.venv))[1:-1], "<venv>") if self.venv is not None else text

    def aliased(self, text: str) -> str:
        for name, alias in self.aliases.items():
            text = text.replace(name, alias)
        return text


def normalised_text(text: str, namespace: str) -> str:
    text = text.replace(namespace, "<ns>")
    text = TIME.sub("<time>", text)
    text = UID.sub("<uid>", text)
    text = IP.sub("<ip>", text)
    text = NODE.sub("<node>", text)
    text = TOKEN_VOLUME.sub("kube-api-access-<random>", text)
    return ADDRESS.sub("<address>", text)


def normalised_value(value: Any, namespace: str) -> Any:
    if isinstance(value, str):
        return normalised_text(value, namespace)
    if isinstance(value, dict):
        return {normalised_text(key, namespace): normalised_value(item, namespace) for key, item in value.items()}
    if isinstance(value, list):
        return [normalised_value(item, namespace) for item in value]
    return value


def normalised_object(item: dict[str, Any], namespace: str) -> dict[str, Any]:
    metadata = {key: value for key, value in item.get("metadata", {}).items() if key not in DROPPED_METADATA}
    # JSON in annotations (Kopf's diff base and progress) compared by value: its keys' order is
    # the stored object's, which follows the uids of its children in some operators.
    annotations = {key: _parsed(value) for key, value in metadata.get("annotations", {}).items()
                   if key not in DROPPED_ANNOTATIONS}
    if annotations:
        metadata["annotations"] = annotations
    else:
        metadata.pop("annotations", None)
    shown = {key: value for key, value in item.items() if key not in ("metadata", "apiVersion")}
    return normalised_value({"metadata": metadata, **shown}, namespace)


def _parsed(value: str) -> Any:
    if value.startswith("{"):
        try:
            return json.loads(value)
        except ValueError:
            pass
    return value


def normalised_logs(text: str, namespace: str, venv: Path) -> collections.Counter[str]:
    """Log lines as `logger [LEVEL] message`; traceback frames (indented) left out, as they
    name each engine's own files; lines of other formats kept whole, normalised. Lines about
    objects outside the run (`[name]` or `[ns/name]` without the run's namespace: a
    cluster-wide operator sees the other tests' namespaces come and go) are left out."""
    lines: collections.Counter[str] = collections.Counter()
    for raw in text.replace(str(venv), "<venv>").splitlines():
        if not raw.strip() or raw[0].isspace():
            continue
        match = LOG_LINE.match(raw)
        line = f"{match[1]} [{match[2]}] {match[3]}" if match else raw
        line = re.sub(r"\s+", " ", normalised_text(line, namespace)).strip()
        if not FOREIGN.search(line):
            lines[line] += 1
    return lines


def of_run(namespace: str, name: str | None) -> bool:
    """Whether a namespace is one of the run's: its own or one named after it."""
    return name is not None and (name == namespace or name.startswith(f"{namespace}-"))


def audit_writes(audit_log: Path, offset: int, namespace: str) -> collections.Counter[str]:
    """The writes of the operator's process in the run's namespaces (and to those namespaces
    themselves): `client verb resource name`;
    the client is `engine` for Kopf's or ours, else the user agent's product (its own client).
    A write the API refused is counted apart, with its code (e.g. a lost optimistic-lock race)."""
    writes: collections.Counter[str] = collections.Counter()
    with audit_log.open("rb") as f:
        f.seek(offset)
        lines = f.read().decode(errors="replace").splitlines()
    for line in lines:
        try:
            entry = json.loads(line)
        except ValueError:
            continue
        ref = entry.get("objectRef", {})
        agent = entry.get("userAgent", "")
        where = ref.get("name") if ref.get("resource") == "namespaces" else ref.get("namespace")
        if not of_run(namespace, where) or entry.get("verb") not in WRITES or agent.startswith("kubectl"):
            continue
        client = "engine" if agent.startswith(("kopf/", "kopf-rs/")) else agent.split("/")[0] or "unknown"
        resource = ref.get("resource", "") + (f"/{ref['subresource']}" if ref.get("subresource") else "")
        code = entry.get("responseStatus", {}).get("code", 200)
        refused = f" (refused: {code})" if code >= 400 else ""
        name = ref.get("name", "")
        if ref.get("namespace") not in (None, namespace):
            name = f"{ref['namespace']}/{name}"  # in another of the run's namespaces
        writes[normalised_text(f"{client} {entry['verb']} {resource} {name}".strip() + refused, namespace)] += 1
    return writes


# The API server's repair loops run on their own clock and report a Service whose address they
# find between its allocation and its storage: a race with the control plane, not the operator's.
RACING_REPORTERS = {"ipallocator-repair-controller", "portallocator-repair-controller"}


def events(namespaces: list[str]) -> collections.Counter[str]:
    """The Events in the run's namespaces (the first is its own), but the control plane's racing
    repair loops'."""
    found: collections.Counter[str] = collections.Counter()
    namespace = namespaces[0]
    for where in namespaces:
        result = subprocess.run(["kubectl", "-n", where, "get", "events", "-o", "json"],
                                capture_output=True, text=True, check=True)
        for item in json.loads(result.stdout)["items"]:
            reporter = item.get("reportingComponent") or item.get("source", {}).get("component")
            if reporter in RACING_REPORTERS:
                continue
            involved = item.get("involvedObject", {})
            place = "" if where == namespace else f"{where}: "
            text = f"{place}{involved.get('kind')}/{involved.get('name')} {item.get('type')} {item.get('reason')}: " \
                   f"{item.get('message', '')}"
            found[normalised_text(text, namespace)] += item.get("count") or 1
    return found


def served(resource: str, timeout: float = 30.0) -> bool:
    """Whether the resource is listed: a new CRD's storage answers 429 for a moment after it
    is established, and an operator would log the retry."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if subprocess.run(["kubectl", "get", resource, "-A"], capture_output=True).returncode == 0:
            return True
        time.sleep(0.5)
    return False


def fresh_namespace(namespace: str) -> None:
    """The run's namespace, new: a left-over one from an earlier run is deleted first."""
    subprocess.run(["kubectl", "delete", "namespace", namespace, "--ignore-not-found", "--timeout=120s"],
                   capture_output=True, check=False)
    subprocess.run(["kubectl", "create", "namespace", namespace], capture_output=True, check=True)


def unmark(resource: str) -> None:
    """Kopf's annotations (its diff base, its progress) removed from every object of a
    cluster-scoped resource."""
    listed = json.loads(subprocess.run(["kubectl", "get", resource, "-o", "json"], capture_output=True, text=True,
                                       check=True).stdout)["items"]
    for item in listed:
        marks = [key for key in item["metadata"].get("annotations", {}) if key.startswith("kopf.zalando.org/")]
        if marks:
            subprocess.run(["kubectl", "annotate", resource, item["metadata"]["name"], *(f"{key}-" for key in marks)],
                           capture_output=True, check=False)


IN_CLUSTER_ACCOUNT = "corpus-operator"  # in the namespace `default`, bound to cluster-admin


def in_cluster(workdir: Path, namespace: str, argv: list[str]) -> tuple[list[str], dict[str, str]]:
    """The command and environment that make a process see what a pod sees: the service
    account's token, CA and namespace in /var/run/secrets/kubernetes.io/serviceaccount (in a
    mount namespace of its own, on a tmpfs over /run: the host's /run is untouched), and the API
    server in $KUBERNETES_SERVICE_HOST/PORT, with no kubeconfig. For operators that load the
    in-cluster configuration themselves (as root: unshare and mount need it)."""
    for args in (["create", "serviceaccount", IN_CLUSTER_ACCOUNT, "-n", "default"],
                 ["create", "clusterrolebinding", IN_CLUSTER_ACCOUNT, "--clusterrole=cluster-admin",
                  f"--serviceaccount=default:{IN_CLUSTER_ACCOUNT}"]):
        subprocess.run(["kubectl", *args], capture_output=True, check=False)  # already there: fine
    secrets = pod_secrets(IN_CLUSTER_ACCOUNT, workdir / "serviceaccount", namespace=namespace)
    host, port = api_server()
    return mounted(secrets, argv), {"KUBERNETES_SERVICE_HOST": host, "KUBERNETES_SERVICE_PORT": str(port)}


def mounted(secrets: Path, argv: list[str]) -> list[str]:
    """The command, with a folder mounted where a pod has its service account's files."""
    mount = ('mount -t tmpfs tmpfs /run && mkdir -p /run/secrets/kubernetes.io/serviceaccount'
             ' && mount --bind "$0" /run/secrets/kubernetes.io/serviceaccount && exec "$@"')
    return ["unshare", "--mount", "--propagation", "private", "sh", "-c", mount, str(secrets), *argv]


def record(*, engine: str, venv: Path, command: list[str], namespace: str, source: Path | None,
           resources: tuple[str, ...], scenario: Callable[[Session], None], ready: str,
           alias: Callable[[dict[str, Any]], str | None] = lambda item: None,
           peering: str | None = None, env: dict[str, str] | None = None,
           stop_signal: signal.Signals = signal.SIGTERM, pod: bool = False,
           setup: Callable[[str], dict[str, str]] | None = None, namespaces: tuple[str, ...] = (),
           unmarked: tuple[str, ...] = (), rbac: tuple[str, ...] | None = None, operator: str = "") -> Recording:
    """Run the operator in its own process, its scenario against it, then stop it with a signal
    (SIGTERM as Kubernetes stops a pod, or SIGINT as Ctrl-C does). `pod`: as in a pod, with a
    service account's token and no kubeconfig (`in_cluster`). `setup`: what the operator needs
    around it before it starts (given the run's namespace): its environment variables.
    `namespaces`: suffixes of more namespaces for the run, `<namespace>-<suffix>`, made before
    it starts. `unmarked`: cluster-scoped resources whose objects lose Kopf's annotations after
    the run (an operator that handles every namespace marks them all: the next run starts clean).
    `rbac`: `kopf rbac generate`'s arguments for the operator (by its name): it runs under exactly
    that RBAC, recorded (`restricting`); without them, as the cluster's admin."""
    recording = Recording(engine=engine, stop_signal=stop_signal.name)
    for name in (namespace, *(f"{namespace}-{suffix}" for suffix in namespaces)):
        fresh_namespace(name)
    if peering:
        subprocess.run(["kubectl", "-n", namespace, "apply", "-f", "-"], check=True, capture_output=True, text=True,
                       input=json.dumps({"apiVersion": "kopf.dev/v1", "kind": "KopfPeering",
                                         "metadata": {"name": peering}}))
    audit_log = Path(os.environ["KOPF_CLUSTER_AUDIT_LOG"])
    offset = audit_log.stat().st_size
    workdir = Path(tempfile.mkdtemp(prefix=f"corpus-{engine}-"))
    log_path = workdir / "operator.log"
    argv = [part.format(bin=venv / "bin", namespace=namespace, source=source or "") for part in command]
    process_env = {key: value for key, value in os.environ.items() if not key.startswith("KOPF_")}
    # TMPDIR: where the `kubernetes` client writes a kubeconfig's key and certificates; an operator
    # killed after the grace period leaves them, removed with the run's folder.
    process_env.update({"PATH": f"{venv / 'bin'}:{os.environ['PATH']}", "PYTHONUNBUFFERED": "1",
                        "KUBECONFIG": os.environ["KUBECONFIG"], "TMPDIR": str(workdir), **(env or {})})
    if setup is not None:
        process_env.update(setup(namespace))
    if rbac is not None:
        prepared: list[tuple[list[str], dict[str, str]]] = []  # (a pod's files, made once for both commands)

        def wrap(command: list[str]) -> tuple[list[str], dict[str, str]]:
            if not pod:
                return command, {}
            if not prepared:
                prepared.append(in_cluster(workdir, namespace, []))
            prefix, pod_env = prepared[0]
            return [*prefix, *command], pod_env

        generating = {k: v for k, v in process_env.items() if not (pod and k == "KUBECONFIG")}
        recording.rbac = restricting.generate(
            venv=venv, args=[part.format(namespace=namespace, source=source or "") for part in rbac],
            namespace=namespace, workdir=workdir, name=operator, wrap=wrap, env=generating)
        # The same options make its chart, which the API server must take (before the run: the
        # dry run touches nothing).
        recording.charted = charting.check(
            venv=venv, args=[part.format(namespace=namespace, source=source or "") for part in rbac],
            namespace=namespace, workdir=workdir, name=operator, wrap=wrap, env=generating)
        secrets = workdir / "restricted-serviceaccount" if pod else None
        argv = restricting.recorded(recording.rbac, venv, mounted(secrets, argv) if secrets else argv, secrets)
        # `kopf rbac record` logs in with the account's token; it gives the operator its proxy
        # (a kubeconfig, or with `pod`, a pod's files).
        process_env["KUBECONFIG"] = str(restricting.credentials(recording.rbac, workdir))
    elif pod:
        argv, pod_env = in_cluster(workdir, namespace, argv)
        process_env.update(pod_env)
        del process_env["KUBECONFIG"]
    with log_path.open("wb") as log:
        # A group of its own: the operator runs under wrappers (`kopf rbac record`, a pod's mount
        # namespace); a kill after the grace period must reach it too, not orphan it.
        process = subprocess.Popen(argv, cwd=workdir, stdout=log, stderr=subprocess.STDOUT, env=process_env,
                                   start_new_session=True)
        session = Session(namespace=namespace, source=source, resources=resources, recording=recording,
                          log_path=log_path, alias=alias, alive=lambda: process.poll() is None, venv=venv)
        session.namespaces += [f"{namespace}-{suffix}" for suffix in namespaces]
        try:
            if session.wait("the operator is ready", lambda: session.logged(ready) or process.poll() is not None):
                scenario(session)
        finally:
            started = time.monotonic()
            process.send_signal(stop_signal)
            try:
                recording.exit_code = process.wait(timeout=STOP_GRACE)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
                recording.exit_code = None  # did not stop within the grace period
            recording.exit_seconds = time.monotonic() - started
            with contextlib.suppress(ProcessLookupError):  # whatever of the group outlived it
                os.killpg(process.pid, signal.SIGKILL)
    recording.output = log_path.read_text(errors="replace")
    if recording.rbac is not None:
        recording.output = restricting.finish(recording.output, recording.rbac)
    recording.logs = normalised_logs(session.aliased(recording.output), namespace, venv)
    recording.writes = collections.Counter({session.aliased(key): count for key, count in
                                            audit_writes(audit_log, offset, namespace).items()})
    recording.events = collections.Counter({session.aliased(key): count for key, count in
                                            events(session.namespaces).items()})
    # An operator that handles objects everywhere would see this run's in the next one: gone first.
    subprocess.run(["kubectl", "delete", "namespace", *session.namespaces, f"--wait={bool(unmarked)}".lower(),
                    "--timeout=120s"], capture_output=True, check=False)
    for resource in unmarked:
        unmark(resource)
    shutil.rmtree(workdir, ignore_errors=True)
    return recording
