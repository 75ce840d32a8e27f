"""Our engine and Kopf 1.45.2 side by side, on the same control plane, in the same run; and
with `--native`, the same work written as a kube-rs controller (`bench/native/`), the bar.

Each workload runs the same operator script (`bench/workloads/`) under each engine (the
native one runs its own version of the script's work), interleaved, for the given rounds;
figures come from outside the operator process (/proc: CPU seconds, peak RSS; wall clocks)
and, for timers, from the script itself (the lateness of every call). Run it with `bench/run` (see README.md).
"""

from __future__ import annotations

import argparse
import base64
import concurrent.futures
import dataclasses
import datetime
import http.client
import json
import os
import platform
import re
import signal
import socket
import ssl
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.parse
import uuid
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

HERE = Path(__file__).parent
WORKLOADS = HERE / "workloads"
RESULTS = HERE / "results"
README = HERE.parent / "README.md"
CRD = HERE.parent / "examples" / "crd.yaml"
TICKS = os.sysconf("SC_CLK_TCK")
GREETINGS = "/apis/demo.kopf.dev/v1/namespaces/{namespace}/greetings"
PODS = "/api/v1/namespaces/{namespace}/pods"
# User agents in the apiserver's audit log: the native engine's is kube-rs' own.
AGENTS = {"ours": "kopf-rs/", "kopf": "kopf/", "native": "kube-rs/"}

sys.path.insert(0, str(HERE.parent / "tests"))
from support.audit import AuditLog  # noqa: E402  (the test suite's reader of the audit log)


def kubectl(*args: str, input: str | None = None) -> str:
    result = subprocess.run(["kubectl", *args], input=input, capture_output=True, text=True, check=False)
    if result.returncode != 0:
        raise RuntimeError(f"kubectl {' '.join(args)} failed: {result.stderr.strip()}")
    return result.stdout


def cpu_seconds(pid: int) -> float:
    """User + system time of the whole process (all its threads) so far."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICKS


def _status_kib(pid: int, field: str) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(f"{field}:"):
            return int(line.split()[1]) / 1024
    return 0.0


def peak_rss_mib(pid: int) -> float:
    return _status_kib(pid, "VmHWM")


def current_rss_mib(pid: int) -> float:
    return _status_kib(pid, "VmRSS")


class Api:
    """Plain HTTPS requests with the kubeconfig's client certificate, one connection per
    thread: fast enough to create 10,000 objects or patch them 10,000 times."""

    def __init__(self) -> None:
        config = json.loads(Path(os.environ["KUBECONFIG"]).read_text())
        cluster, user = config["clusters"][0]["cluster"], config["users"][0]["user"]
        server = urllib.parse.urlparse(cluster["server"])
        self.host, self.port = server.hostname or "127.0.0.1", server.port or 443
        self._files = tempfile.TemporaryDirectory()
        folder = Path(self._files.name)
        for name in ("certificate-authority-data", "client-certificate-data", "client-key-data"):
            (folder / name).write_bytes(base64.b64decode(cluster.get(name) or user.get(name, "")))
        self.context = ssl.create_default_context(cafile=str(folder / "certificate-authority-data"))
        self.context.load_cert_chain(str(folder / "client-certificate-data"), str(folder / "client-key-data"))
        self._local = threading.local()

    def request(self, method: str, path: str, body: Any = None,
                content_type: str = "application/json") -> Any:
        payload = json.dumps(body) if body is not None else None
        for attempt in (1, 2):
            connection = getattr(self._local, "connection", None)
            if connection is None:
                connection = http.client.HTTPSConnection(self.host, self.port, context=self.context, timeout=120)
                self._local.connection = connection
            try:
                connection.request(method, path, body=payload, headers={"Content-Type": content_type})
                response = connection.getresponse()
                data = response.read()
                break
            except (http.client.RemoteDisconnected, ConnectionError):
                # The server closes idle kept-alive connections: reconnect once.
                connection.close()
                self._local.connection = None
                if attempt == 2:
                    raise
        if response.status >= 400 and response.status != 404:
            raise RuntimeError(f"{method} {path}: HTTP {response.status}: {data[:300]!r}")
        return json.loads(data) if data else None

    def many(self, calls: Iterable[tuple[str, str, Any]], threads: int = 8) -> None:
        with concurrent.futures.ThreadPoolExecutor(threads) as pool:
            list(pool.map(lambda call: self.request(*call, content_type="application/merge-patch+json")
                          if call[0] == "PATCH" else self.request(*call), calls))


API: Api | None = None


def api() -> Api:
    global API
    if API is None:
        API = Api()
    return API


class Objects:
    """N Greetings in a namespace of their own; removed (finalizers included) afterwards."""

    def __init__(self, count: int) -> None:
        self.namespace = f"bench-{uuid.uuid4().hex[:8]}"
        self.count = count
        self.path = GREETINGS.format(namespace=self.namespace)

    def __enter__(self) -> Objects:
        kubectl("create", "namespace", self.namespace)
        self.create(self.count)
        return self

    def names(self, count: int) -> list[str]:
        return [f"g-{i}" for i in range(count)]

    def create(self, count: int, sent: dict[str, float] | None = None) -> None:
        """Create `count` objects; `sent` gets the wall-clock time each creation was sent."""
        def one(name: str) -> None:
            if sent is not None:
                sent[name] = time.time()
            api().request("POST", self.path, {"apiVersion": "demo.kopf.dev/v1", "kind": "Greeting",
                                              "metadata": {"name": name}, "spec": {"who": name}})
        with concurrent.futures.ThreadPoolExecutor(8) as pool:
            list(pool.map(one, self.names(count)))

    def patch(self, patches: Iterable[tuple[str, Any]]) -> None:
        api().many(("PATCH", f"{self.path}/{name}", patch) for name, patch in patches)

    def delete(self, count: int) -> None:
        api().many(("DELETE", f"{self.path}/{name}", None) for name in self.names(count))

    def remaining(self) -> int:
        return len(api().request("GET", self.path)["items"])

    def __exit__(self, *_: object) -> None:
        # The operators leave their finalizers when they exit: drop them, or nothing is deleted.
        items = api().request("GET", self.path)["items"]
        self.patch((item["metadata"]["name"], {"metadata": {"finalizers": None}}) for item in items
                   if item["metadata"].get("finalizers"))
        # Waited for: the API server deleting thousands of objects in the background loaded
        # the shared cores during the next run (in round 2, our timers-1000 took 8.99 CPU
        # seconds right after Kopf's idle-10000, 7.47 in round 1).
        try:
            kubectl("delete", "namespace", self.namespace, "--wait=true", "--timeout=600s")
        except RuntimeError as e:
            print(f"  (the namespace is still being deleted; going on: {e})", flush=True)


class Operator:
    """`kopf run` of one engine on one namespace, with its output in a file."""

    options: list[str] = []  # extra `kopf run` options for all runs (e.g. --quiet)

    def __init__(self, kopf: str, script: Path, namespace: str, workdir: Path, env: dict[str, str],
                 command: list[str] | None = None) -> None:
        """``command``: another program than ``kopf run`` doing the same work (it is given the namespace)."""
        self.log = workdir / "operator.log"
        self._out = open(self.log, "wb")
        args = [*command, namespace] if command else [kopf, "run", "--standalone", *self.options, "-n", namespace,
                                                       str(script)]
        self.process = subprocess.Popen(
            args, cwd=workdir,
            stdout=self._out, stderr=subprocess.STDOUT, env={**os.environ, "PYTHONUNBUFFERED": "1", **env},
        )
        self.started = time.monotonic()

    def count(self, text: str) -> int:
        return self.log.read_text(errors="replace").count(text)

    def wait_for(self, check: Callable[[], bool], timeout: float, what: str) -> None:
        deadline = time.monotonic() + timeout
        while not check():
            if self.process.poll() is not None:
                raise RuntimeError(f"the operator exited early ({self.process.returncode}): see {self.log}")
            if time.monotonic() > deadline:
                raise RuntimeError(f"{what} did not happen in {timeout}s: see {self.log}")
            time.sleep(0.2)

    def cpu_over_window(self, run: Run) -> float:
        """The CPU seconds over `run.duration`, after `run.warmup` for things to settle."""
        time.sleep(run.warmup)
        cpu_start = cpu_seconds(self.process.pid)
        time.sleep(run.duration)
        return cpu_seconds(self.process.pid) - cpu_start

    def terminate(self, timeout: float = 120) -> tuple[int, float]:
        """SIGTERM; the exit code and how long the exit took."""
        started = time.monotonic()
        self.process.send_signal(signal.SIGTERM)
        try:
            code = self.process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.process.kill()
            code = self.process.wait()
        self._out.close()
        return code, time.monotonic() - started


def percentile(values: list[float], fraction: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(fraction * len(ordered)))]


@dataclasses.dataclass
class Run:
    """One workload run: which engine, with how many objects, for how long."""
    engine: str
    kopf: str
    objects: int
    duration: float
    warmup: float
    env: dict[str, str] = dataclasses.field(default_factory=dict)  # the operator's extra variables


def requests_by_verb(audit: AuditLog | None, engine: str, namespace: str) -> dict[str, int]:
    """The engine's API requests in the workload's namespace, by verb (from the audit log)."""
    if audit is None:
        return {}
    counts: dict[str, int] = {}
    for entry in audit.requests(agent=AGENTS[engine], namespace=namespace):
        counts[f"requests_{entry['verb']}"] = counts.get(f"requests_{entry['verb']}", 0) + 1
    return counts


def audit_log() -> AuditLog | None:
    try:
        return AuditLog()
    except (KeyError, AssertionError):
        return None  # a cluster started before the audit log existed: no request counts


def timers(run: Run) -> dict[str, Any]:
    """N objects with a 1 s timer each: CPU and lateness over `duration` after `warmup`."""
    with tempfile.TemporaryDirectory() as tmp, Objects(run.objects) as objs:
        workdir = Path(tmp)
        samples_path = workdir / "samples.json"
        operator = Operator(run.kopf, WORKLOADS / "timers.py", objs.namespace, workdir,
                            {"BENCH_SAMPLES": str(samples_path)})
        time.sleep(run.warmup)
        window_start, cpu_start = time.time(), cpu_seconds(operator.process.pid)
        time.sleep(run.duration)
        window_end, cpu_end = time.time(), cpu_seconds(operator.process.pid)
        rss = peak_rss_mib(operator.process.pid)
        code, exit_time = operator.terminate()
        flat = json.loads(samples_path.read_text()) if samples_path.exists() else []
    samples = zip(flat[0::2], flat[1::2], strict=True)  # (when, lateness) pairs
    lateness = [late * 1000 for at, late in samples if window_start <= at <= window_end]
    return {
        "cpu_seconds": cpu_end - cpu_start,
        "peak_rss_mib": rss,
        "calls": len(lateness),
        "calls_expected": run.objects * run.duration,
        "lateness_p50_ms": percentile(lateness, 0.50),
        "lateness_p99_ms": percentile(lateness, 0.99),
        "exit_code": code,
        "exit_seconds": exit_time,
    }


def daemons(run: Run) -> dict[str, Any]:
    """N objects with an async daemon each: start-up, idle CPU and memory, and the exit by SIGTERM."""
    with tempfile.TemporaryDirectory() as tmp, Objects(run.objects) as objs:
        workdir = Path(tmp)
        operator = Operator(run.kopf, WORKLOADS / "daemons.py", objs.namespace, workdir, {})
        operator.wait_for(lambda: operator.count("bench daemon started") >= run.objects, timeout=300,
                          what=f"{run.objects} daemons starting")
        started = time.monotonic() - operator.started
        cpu_start = cpu_seconds(operator.process.pid)
        time.sleep(run.duration)
        cpu_idle = cpu_seconds(operator.process.pid) - cpu_start
        rss = peak_rss_mib(operator.process.pid)
        code, exit_time = operator.terminate()
    return {
        "start_seconds": started,
        "idle_cpu_seconds": cpu_idle,
        "peak_rss_mib": rss,
        "exit_code": code,
        "exit_seconds": exit_time,
    }


def lifecycles(run: Run) -> dict[str, Any]:
    """N objects created, updated once, deleted (one trivial handler each): the operator's CPU
    and the wall time from the first creation until the last object is gone; the reaction
    latency: from sending an object's creation to its creation handler starting (each
    handler prints when it started), p50 and p99 over the burst."""
    n = run.objects
    with tempfile.TemporaryDirectory() as tmp, Objects(0) as objs:
        operator = Operator(run.kopf, WORKLOADS / "lifecycles.py", objs.namespace, Path(tmp), run.env)
        time.sleep(run.warmup)  # both engines are watching by then
        audit = audit_log()
        cpu_start, started = cpu_seconds(operator.process.pid), time.monotonic()
        sent: dict[str, float] = {}
        objs.create(n, sent)
        operator.wait_for(lambda: operator.count("bench created") >= n, timeout=1800, what=f"{n} creations")
        created = time.monotonic()
        starts = re.findall(r"bench created (\S+) at ([\d.]+)", operator.log.read_text(errors="replace"))
        reactions = [float(at) - sent[name] for name, at in starts if name in sent]
        objs.patch((name, {"spec": {"updated": True}}) for name in objs.names(n))
        operator.wait_for(lambda: operator.count("bench updated") >= n, timeout=1800, what=f"{n} updates")
        updated = time.monotonic()
        objs.delete(n)
        operator.wait_for(lambda: operator.count("bench deleted") >= n, timeout=1800, what=f"{n} deletions")
        operator.wait_for(lambda: objs.remaining() == 0, timeout=600, what="all objects gone")
        finished = time.monotonic()
        cpu = cpu_seconds(operator.process.pid) - cpu_start
        rss = peak_rss_mib(operator.process.pid)
        code, _ = operator.terminate()
        requests = requests_by_verb(audit, run.engine, objs.namespace)
    return {
        "cpu_seconds": cpu, "wall_seconds": finished - started, "peak_rss_mib": rss,
        "reaction_p50_ms": 1000 * percentile(reactions, 0.5), "reaction_p99_ms": 1000 * percentile(reactions, 0.99),
        "create_seconds": created - started, "update_seconds": updated - created,
        "delete_seconds": finished - updated, **requests, "exit_code": code,
    }


def idle(run: Run) -> dict[str, Any]:
    """N objects watched (an `on.event` handler), no changes: the start (listing them all),
    then CPU and memory over `duration`."""
    with tempfile.TemporaryDirectory() as tmp, Objects(run.objects) as objs:
        operator = Operator(run.kopf, WORKLOADS / "events.py", objs.namespace, Path(tmp), run.env)
        operator.wait_for(lambda: operator.count("bench event") >= run.objects, timeout=1800,
                          what=f"{run.objects} objects listed")
        listed = time.monotonic() - operator.started
        cpu = operator.cpu_over_window(run)
        rss, peak = current_rss_mib(operator.process.pid), peak_rss_mib(operator.process.pid)
        code, _ = operator.terminate()
    return {"listed_seconds": listed, "idle_cpu_seconds": cpu, "rss_mib": rss, "peak_rss_mib": peak,
            "exit_code": code}


def requeues(run: Run) -> dict[str, Any]:
    """N objects looked at again every 5 s though nothing changes (`workloads/requeues.py`): the
    calls, the writes to the API server and CPU over `duration` after `warmup`."""
    with tempfile.TemporaryDirectory() as tmp, Objects(run.objects) as objs:
        operator = Operator(run.kopf, WORKLOADS / "requeues.py", objs.namespace, Path(tmp), run.env)
        operator.wait_for(lambda: operator.count("bench requeue") >= run.objects, timeout=600,
                          what=f"{run.objects} objects looked at")
        time.sleep(run.warmup)
        audit = audit_log()
        calls_start, cpu_start = operator.count("bench requeue"), cpu_seconds(operator.process.pid)
        time.sleep(run.duration)
        calls, cpu = operator.count("bench requeue") - calls_start, cpu_seconds(operator.process.pid) - cpu_start
        requests = requests_by_verb(audit, run.engine, objs.namespace)
        rss = peak_rss_mib(operator.process.pid)
        code, _ = operator.terminate()
    return {"calls": calls, "calls_expected": run.objects * run.duration / 5, "cpu_seconds": cpu,
            "writes": sum(requests.get(f"requests_{verb}", 0) for verb in ("patch", "update", "create")),
            "peak_rss_mib": rss, "exit_code": code}


PATCHES_PER_OBJECT = 100


def storm(run: Run) -> dict[str, Any]:
    """N objects (100) patched 100 times each (10,000 in all), an `on.event` handler seeing
    every event: CPU and the wall time until the last event is handled."""
    with tempfile.TemporaryDirectory() as tmp, Objects(run.objects) as objs:
        operator = Operator(run.kopf, WORKLOADS / "events.py", objs.namespace, Path(tmp), run.env)
        operator.wait_for(lambda: operator.count("bench event") >= run.objects, timeout=300, what="listing")
        time.sleep(run.warmup)
        audit = audit_log()
        cpu_start, started = cpu_seconds(operator.process.pid), time.monotonic()
        names, patches = objs.names(run.objects), run.objects * PATCHES_PER_OBJECT
        objs.patch((names[k % run.objects], {"spec": {"n": k}}) for k in range(patches))
        patched = time.monotonic()
        expected = run.objects + patches
        operator.wait_for(lambda: operator.count("bench event") >= expected, timeout=1800, what="all events")
        finished = time.monotonic()
        cpu = cpu_seconds(operator.process.pid) - cpu_start
        rss = peak_rss_mib(operator.process.pid)
        code, _ = operator.terminate()
        requests = requests_by_verb(audit, run.engine, objs.namespace)
    return {"cpu_seconds": cpu, "wall_seconds": finished - started, "patching_seconds": patched - started,
            "peak_rss_mib": rss, **requests, "exit_code": code}


def indexing(run: Run) -> dict[str, Any]:
    """N pods indexed by two indices, a 1 s timer (on one object) reading them: the memory of
    the indexed set (the resident memory's growth from before the pods to after), the CPU
    of indexing them as they are created, then of the timer's reads over `duration`."""
    with tempfile.TemporaryDirectory() as tmp, Objects(1) as objs:
        operator = Operator(run.kopf, WORKLOADS / "indexing.py", objs.namespace, Path(tmp),
                            {"BENCH_OBJECTS": str(run.objects)})
        time.sleep(run.warmup)  # both engines are watching by then
        rss_before = current_rss_mib(operator.process.pid)
        cpu_start, started = cpu_seconds(operator.process.pid), time.monotonic()
        api().many(("POST", PODS.format(namespace=objs.namespace), {
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": f"p-{i}", "labels": {"app": f"bench-{i % 10}", "tier": "web"}},
            "spec": {"containers": [{"name": "main", "image": "busybox"}]},
        }) for i in range(run.objects))
        operator.wait_for(lambda: operator.count("bench indexed all") >= 1, timeout=1800,
                          what=f"{run.objects} pods indexed")
        indexed, cpu_indexing = time.monotonic() - started, cpu_seconds(operator.process.pid) - cpu_start
        cpu = operator.cpu_over_window(run)
        rss, peak = current_rss_mib(operator.process.pid), peak_rss_mib(operator.process.pid)
        code, _ = operator.terminate()
        api().request("DELETE", PODS.format(namespace=objs.namespace))  # at once, not by the namespace's end
    return {"indexed_rss_mib": rss - rss_before, "rss_mib": rss, "peak_rss_mib": peak,
            "indexing_cpu_seconds": cpu_indexing, "indexed_seconds": indexed, "cpu_seconds": cpu,
            "exit_code": code}


class Pods:
    """N pods on kwok's simulated nodes, each with a container whose log is a file that the
    benchmark writes (see python/kopf/_operating/cluster/kwok.yaml); their namespace deleted afterwards."""

    def __init__(self, count: int, directory: Path) -> None:
        self.namespace = f"bench-{uuid.uuid4().hex[:8]}"
        self.files = [directory / f"pod-{i}.log" for i in range(count)]

    def __enter__(self) -> Pods:
        kubectl("create", "namespace", self.namespace)
        documents = []
        for i, path in enumerate(self.files):
            path.touch()
            documents.append({"apiVersion": "kwok.x-k8s.io/v1alpha1", "kind": "Logs",
                              "metadata": {"name": f"pod-{i}", "namespace": self.namespace},
                              "spec": {"logs": [{"containers": ["main"], "logsFile": str(path), "follow": True}]}})
            documents.append({"apiVersion": "v1", "kind": "Pod",
                              "metadata": {"name": f"pod-{i}", "namespace": self.namespace,
                                           "labels": {"app": "bench-logs"}},
                              "spec": {"containers": [{"name": "main", "image": "example.com/main:1"}],
                                       "terminationGracePeriodSeconds": 0}})
        kubectl("apply", "-f", "-", input=json.dumps({"apiVersion": "v1", "kind": "List", "items": documents}))
        deadline = time.monotonic() + 300
        while True:
            pods = json.loads(kubectl("get", "pods", "-n", self.namespace, "-o", "json"))["items"]
            if sum(p.get("status", {}).get("phase") == "Running" for p in pods) == len(self.files):
                return self
            if time.monotonic() > deadline:
                raise RuntimeError(f"the benchmark's {len(self.files)} pods did not all run in 300 s")
            time.sleep(1)

    def __exit__(self, *_: object) -> None:
        kubectl("delete", "namespace", self.namespace, "--wait=true", "--timeout=600s")


class LogWriter(threading.Thread):
    """Appends lines to every pod's log at `rate` lines a second each (one in ten matches the
    workload's pattern), in batches four times a second; counts what it wrote."""

    def __init__(self, files: list[Path], rate: int) -> None:
        super().__init__(daemon=True)
        self.files, self.rate = files, rate
        self.written = self.matching = 0
        self._halt = threading.Event()

    def run(self) -> None:
        batch, tick, serial = max(1, self.rate // 4), 1 / 4, 0
        next_at = time.monotonic()
        while not self._halt.is_set():
            now = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%S.%f")
            for path in self.files:
                lines = []
                for _ in range(batch):
                    serial += 1
                    text = (f"epoch {serial}: model accuracy is {serial % 100}.5%" if serial % 10 == 0 else
                            f"step {serial}: loss=0.{serial % 997:03d} lr=0.001 batch=64 samples/s=1234.5 ok")
                    lines.append(f"{now}000Z stdout F {text}\n")
                    self.matching += serial % 10 == 0
                with path.open("a") as file:
                    file.writelines(lines)
                self.written += batch
            next_at += tick
            self._halt.wait(max(0.0, next_at - time.monotonic()))

    def stop(self) -> None:
        self._halt.set()
        self.join()


def handled_count(path: Path) -> int:
    try:
        return int(path.read_text() or 0)
    except (OSError, ValueError):
        return 0


LOG_RATE = 20  # lines a second per pod


def logs(run: Run) -> dict[str, Any]:
    """N pods logging LOG_RATE lines a second each, one in ten matched by a log handler: the
    CPU per line read, memory at the window's start and end (flat: bounded queues), and how
    far the handling lags behind the writing at the end. Against the same work in plain
    Python (`kubernetes_asyncio` and `re`, bench/workloads/logs_plain.py) in the Kopf column:
    Kopf has no log handlers."""
    with tempfile.TemporaryDirectory() as tmp, Pods(run.objects, Path(tmp)) as pods:
        workdir = Path(tmp)
        counts = workdir / "handled"
        command = [run.kopf, str(WORKLOADS / "logs_plain.py")] if run.engine == "kopf" else None
        operator = Operator(run.kopf, WORKLOADS / "logs.py", pods.namespace, workdir,
                            {"BENCH_COUNTS": str(counts)}, command=command)
        writer = LogWriter(pods.files, LOG_RATE)
        writer.start()
        time.sleep(run.warmup)
        written_start, cpu_start = writer.written, cpu_seconds(operator.process.pid)
        rss_start = current_rss_mib(operator.process.pid)
        time.sleep(run.duration)
        written, cpu = writer.written - written_start, cpu_seconds(operator.process.pid) - cpu_start
        rss_end, peak = current_rss_mib(operator.process.pid), peak_rss_mib(operator.process.pid)
        lag = writer.matching - handled_count(counts)
        writer.stop()
        code, exit_time = operator.terminate()
    return {
        "cpu_seconds": cpu,
        "lines_per_cpu_second": written / cpu if cpu else float("nan"),
        "rss_mib": rss_end,
        "rss_growth_mib": rss_end - rss_start,
        "peak_rss_mib": peak,
        "lines_written": written,
        "lag_lines": lag,
        "exit_code": code,
    }


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def self_signed(workdir: Path) -> None:
    """cert.pem and key.pem for localhost, in the workload's folder."""
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2",
                    "-subj", "/CN=localhost", "-addext", "subjectAltName=DNS:localhost,IP:127.0.0.1",
                    "-keyout", str(workdir / "key.pem"), "-out", str(workdir / "cert.pem")],
                   check=True, capture_output=True)


def timed_reviews(operator: Operator, connection: http.client.HTTPSConnection,
                  reviews: Iterable[tuple[str, bytes, Callable[[dict[str, Any]], bool]]],
                  ) -> tuple[list[float], float, float]:
    """Each review (its path, body and a check of the answer) sent in turn over one connection:
    the latencies (ms), and the wall and CPU seconds of the operator over them all."""
    latencies = []
    cpu_start, started = cpu_seconds(operator.process.pid), time.monotonic()
    for path, body, check in reviews:
        sent = time.monotonic()
        connection.request("POST", path, body=body, headers={"Content-Type": "application/json"})
        response = connection.getresponse()
        answer = json.loads(response.read())
        latencies.append((time.monotonic() - sent) * 1000)
        if response.status != 200 or not check(answer):
            raise RuntimeError(f"a bad answer ({response.status}): {answer}")
    return latencies, time.monotonic() - started, cpu_seconds(operator.process.pid) - cpu_start


def admission(run: Run) -> dict[str, Any]:
    """N AdmissionReviews sent one after another over one kept-alive HTTPS connection (half
    of them to the validating handler, half to the mutating one, as the managed webhooks'
    paths address them; every tenth one rejected): the latency of each, and the CPU."""
    with tempfile.TemporaryDirectory() as tmp, Objects(0) as objs:
        workdir = Path(tmp)
        self_signed(workdir)
        port = free_port()
        operator = Operator(run.kopf, WORKLOADS / "admission.py", objs.namespace, workdir, {"BENCH_PORT": str(port)})
        context = ssl.create_default_context(cafile=str(workdir / "cert.pem"))
        def connect() -> http.client.HTTPSConnection:
            return http.client.HTTPSConnection("127.0.0.1", port, context=context, timeout=30)
        def ready() -> bool:
            try:
                connection = connect()
                connection.request("POST", "/check", body=b"{}")
                connection.getresponse().read()
                return True
            except OSError:
                return False
        operator.wait_for(ready, timeout=60, what="the webhook server to listen")
        time.sleep(run.warmup)
        def reviews() -> Iterator[tuple[str, bytes, Callable[[dict[str, Any]], bool]]]:
            for i in range(run.objects):
                body = {"apiVersion": "demo.kopf.dev/v1", "kind": "Greeting",
                        "metadata": {"name": f"g-{i}", "namespace": objs.namespace, "uid": str(uuid.uuid4())},
                        "spec": {"mood": "grumpy" if i % 10 == 0 else "happy"}}
                uid = str(uuid.uuid4())
                review = {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {
                    "uid": uid, "operation": "UPDATE", "userInfo": {"username": "bench"},
                    "resource": {"group": "demo.kopf.dev", "version": "v1", "resource": "greetings"},
                    "object": body, "oldObject": body}}
                yield ("/check" if i % 2 == 0 else "/stamp", json.dumps(review).encode(),
                       lambda answer, uid=uid: answer["response"]["uid"] == uid)
        connection = connect()
        latencies, elapsed, cpu = timed_reviews(operator, connection, reviews())
        connection.close()
        rss = peak_rss_mib(operator.process.pid)
        code, _ = operator.terminate()
    return {"latency_p50_ms": percentile(latencies, 0.5), "latency_p99_ms": percentile(latencies, 0.99),
            "cpu_seconds": cpu, "wall_seconds": elapsed, "peak_rss_mib": rss, "exit_code": code}


def conversion(run: Run) -> dict[str, Any]:
    """ConversionReviews of N objects each (Contacts of examples/conversion, v1 to v2), sent one
    after another over one kept-alive HTTPS connection, as the API server sends those of a read
    (N=1) or a list (N=100): the latency of each, and the CPU. Against the same work in plain
    Python (an aiohttp service, bench/workloads/conversion_plain.py) in the Kopf column: Kopf
    has no conversion webhooks."""
    reviews = CONVERSION_REVIEWS if run.objects == 1 else CONVERSION_REVIEWS // 10
    kubectl("apply", "-f", str(CONTACTS_CRD))
    kubectl("wait", "--for=condition=Established", "crd/contacts.demo.kopf.dev", "--timeout=60s")
    with tempfile.TemporaryDirectory() as tmp, Objects(0) as objs:
        workdir = Path(tmp)
        self_signed(workdir)
        port = free_port()
        command = [run.kopf, str(WORKLOADS / "conversion_plain.py")] if run.engine == "kopf" else None
        operator = Operator(run.kopf, WORKLOADS / "conversion.py", objs.namespace, workdir,
                            {"BENCH_PORT": str(port)}, command=command)
        context = ssl.create_default_context(cafile=str(workdir / "cert.pem"))
        path = "/conversion/contacts.demo.kopf.dev"
        def connect() -> http.client.HTTPSConnection:
            return http.client.HTTPSConnection("127.0.0.1", port, context=context, timeout=30)
        def review_of(count: int) -> dict[str, Any]:
            objects = [{"apiVersion": "demo.kopf.dev/v1", "kind": "Contact",
                        "metadata": {"name": f"c-{i}", "namespace": objs.namespace, "uid": str(uuid.uuid4()),
                                     "resourceVersion": "1", "labels": {"app": "bench"}},
                        "spec": {"name": f"First{i} Last{i}", "email": f"c{i}@example.com"}} for i in range(count)]
            return {"apiVersion": "apiextensions.k8s.io/v1", "kind": "ConversionReview",
                    "request": {"uid": str(uuid.uuid4()), "desiredAPIVersion": "demo.kopf.dev/v2",
                                "objects": objects}}
        def ready() -> bool:
            try:
                connection = connect()
                connection.request("POST", path, body=json.dumps(review_of(1)).encode())
                return json.loads(connection.getresponse().read())["response"]["result"]["status"] == "Success"
            except (OSError, ValueError, KeyError):
                return False
        operator.wait_for(ready, timeout=60, what="the webhook server to convert")
        time.sleep(run.warmup)
        def converted(answer: dict[str, Any]) -> bool:
            objects = answer["response"].get("convertedObjects") or []
            return len(objects) == run.objects and objects[0]["spec"]["first"] == "First0"
        bodies = [(path, json.dumps(review_of(run.objects)).encode(), converted) for _ in range(reviews)]
        connection = connect()
        latencies, elapsed, cpu = timed_reviews(operator, connection, bodies)
        connection.close()
        rss = peak_rss_mib(operator.process.pid)
        code, _ = operator.terminate()
    return {"latency_p50_ms": percentile(latencies, 0.5), "latency_p99_ms": percentile(latencies, 0.99),
            "cpu_seconds": cpu, "objects_per_cpu_second": reviews * run.objects / cpu if cpu else float("nan"),
            "wall_seconds": elapsed, "peak_rss_mib": rss, "exit_code": code}


CONVERSION_REVIEWS = 2000  # of one object; of a hundred: a tenth as many
CONTACTS_CRD = HERE.parent / "examples" / "conversion" / "crd.yaml"

SCENARIOS: dict[str, Callable[[Run], dict[str, Any]]] = {
    "lifecycles": lifecycles, "idle": idle, "timers": timers, "storm": storm, "daemons": daemons,
    "indexing": indexing, "admission": admission, "logs": logs, "conversion": conversion,
    "requeues": requeues,
}
# Compared with plain Python doing the same work, not with Kopf (which has no such feature).
PLAIN_WORKLOADS = {"logs", "conversion"}
# The issue's plan: each workload with its sizes (objects); `--quick` divides them for a smoke run.
SIZES = {"lifecycles": [200, 1000], "idle": [1000, 10_000, 50_000], "timers": [1000], "storm": [100],
         "daemons": [1000], "indexing": [10_000], "admission": [2000], "logs": [200], "conversion": [1, 100],
         "requeues": [1000]}


# The workloads that the native engine has a version of (bench/native/src/main.rs).
NATIVE_WORKLOADS = {"lifecycles", "storm", "idle", "timers"}


def summarize(results: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per workload and figure: the medians of each engine, and the ratios of ours to Kopf's and
    to the native engine's, each with its spread across rounds (the rounds' runs paired)."""
    rows = []
    for workload in dict.fromkeys(r["workload"] for r in results):
        ours, kopf, native = ([r["figures"] for r in results if r["workload"] == workload and r["engine"] == engine]
                              for engine in ("ours", "kopf", "native"))
        for figure in ours[0]:
            mine = [f[figure] for f in ours]
            row = {"workload": workload, "figure": figure, "ours": statistics.median(mine)}
            for name, other in [("kopf", kopf), ("native", native)]:
                theirs = [f[figure] for f in other if figure in f]
                ratios = [a / b for a, b in zip(mine, theirs, strict=False) if b]
                prefix = "ratio" if name == "kopf" else "native_ratio"
                row.update({
                    name: statistics.median(theirs) if theirs else None,
                    prefix: statistics.median(ratios) if ratios else None,
                    f"{prefix}_min": min(ratios) if ratios else None,
                    f"{prefix}_max": max(ratios) if ratios else None,
                })
            rows.append(row)
    return rows


def table(rows: list[dict[str, Any]]) -> str:
    def fmt(value: float | None) -> str:
        return "—" if value is None else f"{value:.3g}"
    lines = [f"{'workload':<16} {'figure':<18} {'ours':>10} {'kopf':>10} {'ours/kopf':>10} {'spread':>14} "
             f"{'native':>10} {'ours/native':>11} {'spread':>14}"]
    for row in rows:
        spread = f"{fmt(row['ratio_min'])}–{fmt(row['ratio_max'])}" if row["ratio"] is not None else ""
        native_spread = (f"{fmt(row['native_ratio_min'])}–{fmt(row['native_ratio_max'])}"
                         if row["native_ratio"] is not None else "")
        lines.append(f"{row['workload']:<16} {row['figure']:<18} {fmt(row['ours']):>10} {fmt(row['kopf']):>10} "
                     f"{fmt(row['ratio']):>10} {spread:>14} {fmt(row['native']):>10} "
                     f"{fmt(row['native_ratio']):>11} {native_spread:>14}")
    return "\n".join(lines)


# The figures the chart and the README show, and the goals for their ratios (ours/Kopf).
# At rest, the goal is no more CPU than Kopf's; a timer's call and its log line are the
# same Python work in both engines, so the timers' CPU goal is a quarter, not a fifth.
GOALS = {"cpu_seconds": 1 / 5, "idle_cpu_seconds": 1.0, "peak_rss_mib": 1 / 3, "rss_mib": 1 / 3,
         "indexed_rss_mib": 1 / 3, "indexing_cpu_seconds": 1 / 5, "wall_seconds": 1 / 2,
         "reaction_p99_ms": 1 / 2}
GOALS_OF_WORKLOADS = {("timers", "cpu_seconds"): 1 / 4}
SHOWN = [*GOALS, "reaction_p50_ms", "lateness_p99_ms", "requests_patch", "latency_p50_ms", "latency_p99_ms",
         "listed_seconds", "lines_per_cpu_second", "objects_per_cpu_second", "rss_growth_mib", "lag_lines",
         "calls", "writes"]


def goal_of(row: dict[str, Any]) -> float | None:
    """The goal for a row's ratio (wall time has one for lifecycles only)."""
    if row["figure"] == "wall_seconds" and not row["workload"].startswith("lifecycles"):
        return None
    workload = row["workload"].rsplit("-", 1)[0]
    if workload in PLAIN_WORKLOADS:
        return None  # compared with plain Python, not Kopf: the goals are Kopf's
    return GOALS_OF_WORKLOADS.get((workload, row["figure"]), GOALS.get(row["figure"]))


def markdown(rows: list[dict[str, Any]], meta: dict[str, Any]) -> str:
    def fmt(value: float | None) -> str:
        if value is None:
            return "—"
        return f"{value:.0f}" if abs(value) >= 1000 else f"{value:.3g}"
    lines = [f"Measured {meta['date']} on {meta['machine']['cpus']} cores ({meta['machine']['platform']}), "
             f"{meta['rounds']} round(s); medians, ratios ours/Kopf 1.45.2 and ours/native (a kube-rs "
             f"controller doing the same work, `bench/native/`; — where it has no version of the workload) "
             f"with their spread across rounds."
             + (" The engines' virtualenvs have `kubernetes` and `pykube-ng` installed (`--with-clients`)."
                if meta.get("with_clients") else "")
             + (" For `logs`, the Kopf column is plain Python (`kubernetes_asyncio` and `re`, "
                "bench/workloads/logs_plain.py): Kopf has no log handlers."
                if any(row["workload"].startswith("logs-") for row in rows) else "")
             + (" For `conversion`, the Kopf column is plain Python (an aiohttp service, "
                "bench/workloads/conversion_plain.py): Kopf has no conversion webhooks."
                if any(row["workload"].startswith("conversion-") for row in rows) else ""), "",
             "| workload | figure | ours | Kopf 1.45.2 | ours/Kopf | spread | goal | native | ours/native | spread |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for row in rows:
        if row["figure"] not in SHOWN:
            continue
        spread = f"{fmt(row['ratio_min'])}–{fmt(row['ratio_max'])}" if row["ratio"] is not None else ""
        native_spread = (f"{fmt(row['native_ratio_min'])}–{fmt(row['native_ratio_max'])}"
                         if row["native_ratio"] is not None else "")
        goal = goal_of(row)
        goal_text = f"≤ {goal:.2g}" if goal else ""
        lines.append(f"| {row['workload']} | {row['figure']} | {fmt(row['ours'])} | {fmt(row['kopf'])} | "
                     f"{fmt(row['ratio'])} | {spread} | {goal_text} | {fmt(row['native'])} | "
                     f"{fmt(row['native_ratio'])} | {native_spread} |")
    return "\n".join(lines) + "\n"


def chart(rows: list[dict[str, Any]], path: Path, title: str) -> None:
    """Horizontal bars of the ratios (log scale), with the spread and the goals."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    shown = [r for r in rows if r["figure"] in SHOWN and r["ratio"]]
    labels = [f"{r['workload']}: {r['figure']}" for r in shown]
    ratios = [r["ratio"] for r in shown]
    errors = [[r["ratio"] - r["ratio_min"] for r in shown], [r["ratio_max"] - r["ratio"] for r in shown]]
    colors = ["#8d99ae" if (g := goal_of(r)) is None else "#2a9d8f" if r["ratio"] <= g else "#e76f51"
              for r in shown]
    figure, axes = plt.subplots(figsize=(9, 0.35 * len(shown) + 1.5))
    axes.barh(range(len(shown)), ratios, xerr=errors, color=colors, capsize=3)
    axes.set_yticks(range(len(shown)), labels, fontsize=8)
    axes.invert_yaxis()
    axes.set_xscale("log")
    axes.axvline(1.0, color="black", linewidth=0.8)
    for goal, style in [(1 / 5, ":"), (1 / 3, "--"), (1 / 2, "-.")]:
        axes.axvline(goal, color="grey", linestyle=style, linewidth=0.8, label=f"goal {goal:.2g}")
    axes.set_xlabel("ours / Kopf 1.45.2 (lower is better; green: goal met, red: not met, grey: no goal)")
    axes.set_title(title, fontsize=9)
    axes.legend(fontsize=7, loc="lower right")
    figure.tight_layout()
    figure.savefig(path, dpi=110)
    plt.close(figure)


def update_readme(text: str) -> None:
    """Put the latest table between the README's benchmark markers."""
    readme = README.read_text()
    start, end = "<!-- bench:start -->", "<!-- bench:end -->"
    if start in readme and end in readme:
        before, rest = readme.split(start, 1)
        after = rest.split(end, 1)[1]
        README.write_text(f"{before}{start}\n{text}{end}{after}")


def plan(workloads: list[str], quick: int, sizes: dict[str, list[int]] | None = None) -> list[tuple[str, int]]:
    sizes = {**SIZES, **(sizes or {})}
    return [(workload, max(1, size // quick)) for workload in workloads for size in sizes[workload]]


def parse_sizes(text: str) -> dict[str, list[int]]:
    """`idle=50000;lifecycles=200,1000`: other sizes than the plan's, by workload."""
    sizes = {}
    for part in filter(None, text.split(";")):
        workload, _, counts = part.partition("=")
        sizes[workload.strip()] = [int(count) for count in counts.split(",")]
    return sizes


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--ours", required=True, help="our engine's `kopf` executable")
    parser.add_argument("--kopf", required=True, help="Kopf 1.45.2's `kopf` executable")
    parser.add_argument("--plain", help="the Python of the plain-Python comparison (logs: kubernetes_asyncio)")
    parser.add_argument("--native", help="the native engine's executable (bench/native/), for the workloads it has")
    parser.add_argument("--workloads", default="lifecycles,idle,timers,storm",
                        help="comma-separated: lifecycles, idle, timers, storm, daemons, indexing, admission, logs, "
                             "conversion, requeues")
    parser.add_argument("--duration", type=float, default=60.0, help="the measured window, seconds")
    parser.add_argument("--warmup", type=float, default=10.0, help="seconds before the window starts")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--quick", type=int, default=1, help="divide the object counts by this (smoke runs)")
    parser.add_argument("--sizes", type=parse_sizes, default={},
                        help="other object counts than the plan's, e.g. 'idle=50000;lifecycles=1000'")
    parser.add_argument("--output", type=Path, default=RESULTS / "latest.json")
    parser.add_argument("--readme", action="store_true", help="put the table into README.md")
    parser.add_argument("--quiet", action="store_true", help="run the operators with --quiet (no INFO lines)")
    parser.add_argument("--with-clients", action="store_true",
                        help="(from bench/run) the engines' virtualenvs have kubernetes and pykube-ng")
    args = parser.parse_args()
    Operator.options = ["--quiet"] if args.quiet else []

    kubectl("apply", "-f", str(CRD))
    kubectl("wait", "--for=condition=Established", "crd/greetings.demo.kopf.dev", "--timeout=60s")
    engines = {"ours": args.ours, "kopf": args.kopf, **({"native": args.native} if args.native else {})}
    results = []
    for round_ in range(1, args.rounds + 1):
        for workload, size in plan(args.workloads.split(","), args.quick, args.sizes):
            # The engines take turns at running first, round by round: whatever the previous
            # run leaves to the control plane falls on all alike.
            turn = round_ % len(engines)
            order = list(engines.items())[turn:] + list(engines.items())[:turn]
            for engine, executable in order:
                if engine == "native" and workload not in NATIVE_WORKLOADS:
                    continue
                if workload in PLAIN_WORKLOADS and engine == "kopf":
                    if not args.plain:
                        continue
                    executable = args.plain  # Kopf has no such feature: plain Python in its column
                label = f"{workload}-{size}"
                print(f"round {round_}: {label} with {engine}...", flush=True)
                run = Run(engine=engine, kopf=executable, objects=size, duration=args.duration, warmup=args.warmup)
                figures = SCENARIOS[workload](run)
                print(f"  {figures}", flush=True)
                results.append({"round": round_, "workload": label, "engine": engine, "figures": figures})
    rows = summarize(results)
    print(table(rows))
    meta = {
        "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "machine": {"cpus": os.cpu_count(), "platform": platform.platform(), "python": platform.python_version()},
        "duration": args.duration, "warmup": args.warmup, "rounds": args.rounds, "quick": args.quick,
        "quiet": args.quiet, "with_clients": args.with_clients,
    }
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(json.dumps({**meta, "summary": rows, "results": results}, indent=2) + "\n")
    text = markdown(rows, meta)
    args.output.with_suffix(".md").write_text(text)
    chart(rows, args.output.with_suffix(".png"), f"kopf-rs vs Kopf 1.45.2 — {meta['date']}, {os.cpu_count()} cores")
    if args.readme:
        update_readme(text)
    print(f"written: {args.output} (.md, .png)")


if __name__ == "__main__":
    main()
