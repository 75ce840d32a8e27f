"""Automatic sharding at scale: 1, 2 and 3 replicas of our engine (`kopf run --shards auto`)
on one control plane, with Kopf 1.45.2's one replica as the reference (Kopf cannot share the
objects among replicas). Each run: N objects created, updated once and deleted with one
trivial handler each (`bench/workloads/lifecycles.py`); the objects per second of the whole
lifecycle, each replica's CPU seconds and peak RSS, and the API server's and etcd's CPU over
the same time (what the replicas cannot divide among themselves). Run it with
`bench/run sharding` (see README.md).
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import bench
from bench import Objects, Operator, cpu_seconds, kubectl, peak_rss_mib

# checks/cluster's control plane
STATE = Path(os.environ.get("KOPF_CLUSTER_HOME", Path.home() / ".local/state/kopf-rs/checks-cluster"))
SCRIPT = bench.WORKLOADS / "lifecycles.py"


def control_plane_cpu() -> dict[str, float]:
    """CPU seconds so far of the API server and etcd (their pids from the cluster's state)."""
    return {name: cpu_seconds(int((STATE / "pids" / f"{name}.pid").read_text()))
            for name in ("kube-apiserver", "etcd")}


def lifecycles(kopf: str, replicas: int, objects: int, sharded: bool) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as tmp, Objects(0) as objs:
        operators = []
        for index in range(replicas):
            workdir = Path(tmp) / f"replica-{index}"
            workdir.mkdir()
            operators.append(Operator(kopf, SCRIPT, objs.namespace, workdir, {"POD_ID": f"bench-replica-{index}"}))

        def total(text: str) -> int:
            return sum(operator.count(text) for operator in operators)
        if sharded:
            ready = f"of {replicas}: shardRange"
            operators[0].wait_for(lambda: all(o.count(ready) for o in operators), timeout=120,
                                  what=f"{replicas} replicas with a shard each")
        time.sleep(5)  # every replica is watching by then
        cpu_start = [cpu_seconds(o.process.pid) for o in operators]
        plane_start = control_plane_cpu()
        started = time.monotonic()
        objs.create(objects)
        operators[0].wait_for(lambda: total("bench created") >= objects, timeout=1800, what="the creations")
        objs.patch((name, {"spec": {"updated": True}}) for name in objs.names(objects))
        operators[0].wait_for(lambda: total("bench updated") >= objects, timeout=1800, what="the updates")
        objs.delete(objects)
        operators[0].wait_for(lambda: total("bench deleted") >= objects, timeout=1800, what="the deletions")
        operators[0].wait_for(lambda: objs.remaining() == 0, timeout=600, what="all objects gone")
        wall = time.monotonic() - started
        cpu = [cpu_seconds(o.process.pid) - s for o, s in zip(operators, cpu_start, strict=True)]
        plane = {name: seconds - plane_start[name] for name, seconds in control_plane_cpu().items()}
        rss = [peak_rss_mib(o.process.pid) for o in operators]
        handled = [o.count("bench created") for o in operators]
        codes = [o.terminate()[0] for o in operators]
    return {
        "objects_per_second": objects / wall, "wall_seconds": wall,
        "cpu_seconds_per_replica": cpu, "peak_rss_mib_per_replica": rss, "created_per_replica": handled,
        "apiserver_cpu_seconds": plane["kube-apiserver"], "etcd_cpu_seconds": plane["etcd"],
        "exit_codes": codes,
    }


def markdown(rows: list[dict[str, Any]], meta: dict[str, Any]) -> str:
    lines = [
        f"Sharding: {meta['objects']} object lifecycles (create, update, delete), {meta['rounds']} rounds, "
        f"medians; {meta['date']}, {meta['machine']['cpus']} cores.",
        "",
        "| engine | replicas | objects/s | wall s | CPU s per replica | CPU s, all replicas "
        "| peak RSS MiB per replica | handled per replica | kube-apiserver CPU s | etcd CPU s |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for row in rows:
        lines.append(
            f"| {row['engine']} | {row['replicas']} | {row['objects_per_second']:.1f} | {row['wall_seconds']:.1f} "
            f"| {' / '.join(f'{c:.2f}' for c in row['cpu_seconds_per_replica'])} "
            f"| {sum(row['cpu_seconds_per_replica']):.2f} "
            f"| {' / '.join(f'{r:.0f}' for r in row['peak_rss_mib_per_replica'])} "
            f"| {' / '.join(str(h) for h in row['created_per_replica'])} "
            f"| {row['apiserver_cpu_seconds']:.1f} | {row['etcd_cpu_seconds']:.1f} |")
    return "\n".join(lines) + "\n"


def median_row(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """The run of median throughput (its figures belong together), with the rounds' spread."""
    ordered = sorted(runs, key=lambda r: r["objects_per_second"])
    row = dict(ordered[len(ordered) // 2])
    row["objects_per_second_spread"] = [ordered[0]["objects_per_second"], ordered[-1]["objects_per_second"]]
    row["objects_per_second_median"] = statistics.median(r["objects_per_second"] for r in runs)
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--ours", required=True, help="our engine's `kopf` executable")
    parser.add_argument("--kopf", required=True, help="Kopf 1.45.2's `kopf` executable")
    parser.add_argument("--objects", type=int, default=1000)
    parser.add_argument("--replicas", default="1,2,3", help="comma-separated replica counts of our engine")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--output", type=Path, default=bench.RESULTS / "sharding.json")
    args = parser.parse_args()
    kubectl("apply", "-f", str(bench.CRD))
    kubectl("wait", "--for=condition=Established", "crd/greetings.demo.kopf.dev", "--timeout=60s")
    plan = [("kopf", args.kopf, 1, False)]
    plan += [("ours", args.ours, int(n), True) for n in args.replicas.split(",")]
    results: list[dict[str, Any]] = []
    for round_ in range(1, args.rounds + 1):
        for engine, executable, replicas, sharded in plan:
            print(f"round {round_}: {engine}, {replicas} replica(s)...", flush=True)
            Operator.options = ["--shards", "auto"] if sharded else []
            figures = lifecycles(executable, replicas, args.objects, sharded)
            print(f"  {figures}", flush=True)
            results.append({"round": round_, "engine": engine, "replicas": replicas, **figures})
    rows = [median_row([r for r in results if (r["engine"], r["replicas"]) == (engine, replicas)])
            for engine, _, replicas, _ in plan]
    meta = {
        "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "machine": {"cpus": os.cpu_count(), "platform": platform.platform(), "python": platform.python_version()},
        "objects": args.objects, "rounds": args.rounds,
    }
    args.output.write_text(json.dumps({**meta, "summary": rows, "results": results}, indent=2) + "\n")
    text = markdown(rows, meta)
    args.output.with_suffix(".md").write_text(text)
    print(text)


if __name__ == "__main__":
    main()
