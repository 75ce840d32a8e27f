"""Our engine and Kopf 1.45.2 side by side, on the same control plane, in the same run.

Each workload runs the same operator script (`bench/workloads/`) under both engines,
interleaved, for the given rounds; figures come from outside the operator process
(/proc: CPU seconds, peak RSS; wall clocks) and, for timers, from the script itself
(the lateness of every call). Run it with `bench/run` (see README.md).
"""

from __future__ import annotations

import argparse
import concurrent.futures
import datetime
import json
import os
import platform
import signal
import statistics
import subprocess
import tempfile
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

HERE = Path(__file__).parent
WORKLOADS = HERE / "workloads"
RESULTS = HERE / "results"
CRD = HERE.parent / "examples" / "crd.yaml"
TICKS = os.sysconf("SC_CLK_TCK")


def kubectl(*args: str, input: str | None = None) -> str:
    result = subprocess.run(["kubectl", *args], input=input, capture_output=True, text=True, check=False)
    if result.returncode != 0:
        raise RuntimeError(f"kubectl {' '.join(args)} failed: {result.stderr.strip()}")
    return result.stdout


def cpu_seconds(pid: int) -> float:
    """User + system time of the whole process (all its threads) so far."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICKS


def peak_rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return 0.0


class Objects:
    """N Greetings in a namespace of their own; removed (finalizers included) afterwards."""

    def __init__(self, count: int) -> None:
        self.namespace = f"bench-{uuid.uuid4().hex[:8]}"
        self.count = count

    def __enter__(self) -> Objects:
        kubectl("create", "namespace", self.namespace)
        items = [{"apiVersion": "demo.kopf.dev/v1", "kind": "Greeting",
                  "metadata": {"name": f"g-{i}", "namespace": self.namespace}, "spec": {"who": f"#{i}"}}
                 for i in range(self.count)]
        kubectl("create", "-f", "-", input=json.dumps({"apiVersion": "v1", "kind": "List", "items": items}))
        return self

    def __exit__(self, *_: object) -> None:
        # The operators leave their finalizers when they exit: drop them, or nothing is deleted.
        names = kubectl("get", "greetings", "-n", self.namespace, "-o", "name").split()
        patch = '{"metadata": {"finalizers": null}}'
        def strip(chunk: list[str]) -> None:
            kubectl("patch", "-n", self.namespace, "--type=merge", "-p", patch, *chunk)
        chunks = [names[i:i + 100] for i in range(0, len(names), 100)]
        with concurrent.futures.ThreadPoolExecutor(4) as pool:
            list(pool.map(strip, chunks))
        kubectl("delete", "namespace", self.namespace, "--wait=false")


class Operator:
    """`kopf run` of one engine on one namespace, with its output in a file."""

    options: list[str] = []  # extra `kopf run` options for all runs (e.g. --quiet)

    def __init__(self, kopf: str, script: Path, namespace: str, workdir: Path, env: dict[str, str]) -> None:
        self.log = workdir / "operator.log"
        self._out = open(self.log, "wb")
        self.process = subprocess.Popen(
            [kopf, "run", "--standalone", *self.options, "-n", namespace, str(script)], cwd=workdir,
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


def timers(kopf: str, objects: int, duration: float, warmup: float) -> dict[str, Any]:
    """N objects with a 1 s timer each: CPU and lateness over `duration` after `warmup`."""
    with tempfile.TemporaryDirectory() as tmp, Objects(objects) as objs:
        workdir = Path(tmp)
        samples_path = workdir / "samples.json"
        operator = Operator(kopf, WORKLOADS / "timers.py", objs.namespace, workdir,
                            {"BENCH_SAMPLES": str(samples_path)})
        time.sleep(warmup)
        window_start, cpu_start = time.time(), cpu_seconds(operator.process.pid)
        time.sleep(duration)
        window_end, cpu_end = time.time(), cpu_seconds(operator.process.pid)
        rss = peak_rss_mib(operator.process.pid)
        code, exit_time = operator.terminate()
        samples = json.loads(samples_path.read_text()) if samples_path.exists() else []
    lateness = [late * 1000 for at, late in samples if window_start <= at <= window_end]
    return {
        "cpu_seconds": cpu_end - cpu_start,
        "peak_rss_mib": rss,
        "calls": len(lateness),
        "calls_expected": objects * duration,
        "lateness_p50_ms": percentile(lateness, 0.50),
        "lateness_p99_ms": percentile(lateness, 0.99),
        "exit_code": code,
        "exit_seconds": exit_time,
    }


def daemons(kopf: str, objects: int, duration: float, warmup: float) -> dict[str, Any]:
    """N objects with an async daemon each: start-up, idle CPU and memory, and the exit by SIGTERM."""
    del warmup  # the start is measured instead
    with tempfile.TemporaryDirectory() as tmp, Objects(objects) as objs:
        workdir = Path(tmp)
        operator = Operator(kopf, WORKLOADS / "daemons.py", objs.namespace, workdir, {})
        operator.wait_for(lambda: operator.count("bench daemon started") >= objects, timeout=300,
                          what=f"{objects} daemons starting")
        started = time.monotonic() - operator.started
        cpu_start = cpu_seconds(operator.process.pid)
        time.sleep(duration)
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


SCENARIOS: dict[str, Callable[..., dict[str, Any]]] = {"timers": timers, "daemons": daemons}


def summarize(results: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per workload and figure: the medians of each engine, and the ratios' spread across rounds."""
    rows = []
    for workload in dict.fromkeys(r["workload"] for r in results):
        ours = [r["figures"] for r in results if r["workload"] == workload and r["engine"] == "ours"]
        kopf = [r["figures"] for r in results if r["workload"] == workload and r["engine"] == "kopf"]
        for figure in ours[0]:
            mine = [f[figure] for f in ours]
            theirs = [f[figure] for f in kopf]
            ratios = [a / b for a, b in zip(mine, theirs, strict=False) if b]
            rows.append({
                "workload": workload, "figure": figure,
                "ours": statistics.median(mine), "kopf": statistics.median(theirs) if theirs else None,
                "ratio": statistics.median(ratios) if ratios else None,
                "ratio_min": min(ratios) if ratios else None, "ratio_max": max(ratios) if ratios else None,
            })
    return rows


def table(rows: list[dict[str, Any]]) -> str:
    def fmt(value: float | None) -> str:
        return "—" if value is None else f"{value:.3g}"
    lines = [f"{'workload':<10} {'figure':<18} {'ours':>10} {'kopf':>10} {'ours/kopf':>10} {'spread':>14}"]
    for row in rows:
        spread = f"{fmt(row['ratio_min'])}–{fmt(row['ratio_max'])}" if row["ratio"] is not None else ""
        lines.append(f"{row['workload']:<10} {row['figure']:<18} {fmt(row['ours']):>10} {fmt(row['kopf']):>10} "
                     f"{fmt(row['ratio']):>10} {spread:>14}")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--ours", required=True, help="our engine's `kopf` executable")
    parser.add_argument("--kopf", required=True, help="Kopf 1.45.2's `kopf` executable")
    parser.add_argument("--workloads", default="timers,daemons", help="comma-separated: timers, daemons")
    parser.add_argument("--objects", type=int, default=1000)
    parser.add_argument("--duration", type=float, default=60.0, help="the measured window, seconds")
    parser.add_argument("--warmup", type=float, default=15.0, help="seconds before the window starts")
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--output", type=Path, default=RESULTS / "latest.json")
    parser.add_argument("--quiet", action="store_true", help="run the operators with --quiet (no INFO lines)")
    args = parser.parse_args()
    Operator.options = ["--quiet"] if args.quiet else []

    kubectl("apply", "-f", str(CRD))
    kubectl("wait", "--for=condition=Established", "crd/greetings.demo.kopf.dev", "--timeout=60s")
    engines = {"ours": args.ours, "kopf": args.kopf}
    results = []
    for round_ in range(1, args.rounds + 1):
        for workload in args.workloads.split(","):
            for engine, executable in engines.items():
                print(f"round {round_}: {workload} with {engine} ({args.objects} objects)...", flush=True)
                figures = SCENARIOS[workload](executable, args.objects, args.duration, args.warmup)
                print(f"  {figures}", flush=True)
                results.append({"round": round_, "workload": workload, "engine": engine, "figures": figures})
    rows = summarize(results)
    print(table(rows))
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(json.dumps({
        "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "machine": {"cpus": os.cpu_count(), "platform": platform.platform(), "python": platform.python_version()},
        "objects": args.objects, "duration": args.duration, "warmup": args.warmup, "rounds": args.rounds,
        "quiet": args.quiet,
        "summary": rows, "results": results,
    }, indent=2) + "\n")
    print(f"written: {args.output}")


if __name__ == "__main__":
    main()
