"""What traces cost (`kopf run --traces`): our engine on the same workloads with its traces off,
and on (every trace kept, exported to an OTLP receiver in this process: tests/support/otlp.py,
decoding them with the official definitions), round by round in turns. Per workload: each
mode's CPU seconds and peak RSS (medians), the spans received, and the CPU that tracing adds
per processed event. Run it with `bench/run traces` (see README.md).
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import statistics
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parents[1] / "tests"))  # (bench.py does it too)
from support.otlp import Receiver  # noqa: E402  (the tests' receiver of traces)

import bench  # noqa: E402

# The events each workload makes an operator process: lifecycles' create, update, delete and
# their own patches' echoes are counted by the spans themselves (see `events`).
WORKLOADS = {"lifecycles": bench.lifecycles, "storm": bench.storm}


def events(receiver: Receiver, since: int) -> int:
    return sum(1 for span in receiver.received()[since:] if span.name.startswith("event "))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--ours", required=True, help="our engine's `kopf` executable")
    parser.add_argument("--workloads", default="lifecycles,storm")
    parser.add_argument("--objects", type=int, default=1000, help="lifecycles' objects (storm: 100, as bench.py)")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--warmup", type=float, default=10.0)
    parser.add_argument("--output", type=Path, default=bench.RESULTS / "traces.json")
    args = parser.parse_args()

    bench.kubectl("apply", "-f", str(bench.CRD))
    receiver = Receiver()
    # Exported at once in batches of 512, as a collector would be fed under load.
    traced = {"KOPF_RUN_TRACES": receiver.url, "OTEL_BSP_SCHEDULE_DELAY": "1000"}
    results: list[dict[str, Any]] = []
    for round_ in range(1, args.rounds + 1):
        for workload in args.workloads.split(","):
            objects = args.objects if workload == "lifecycles" else 100
            modes = [("off", {}), ("on", traced)]
            for mode, env in modes if round_ % 2 else modes[::-1]:
                print(f"round {round_}: {workload}-{objects} with traces {mode}...", flush=True)
                before = len(receiver.received())
                run = bench.Run(engine="ours", kopf=args.ours, objects=objects, duration=0, warmup=args.warmup, env=env)
                figures = WORKLOADS[workload](run)
                if mode == "on":
                    figures["spans"] = len(receiver.received()) - before
                    figures["event_spans"] = events(receiver, before)
                print(f"  {figures}", flush=True)
                results.append({"round": round_, "workload": f"{workload}-{objects}", "mode": mode, "figures": figures})
    receiver.close()

    rows = []
    for workload in dict.fromkeys(r["workload"] for r in results):
        off, on = ([r["figures"] for r in results if r["workload"] == workload and r["mode"] == mode]
                   for mode in ("off", "on"))
        cpu_off, cpu_on = (statistics.median(f["cpu_seconds"] for f in runs) for runs in (off, on))
        event_spans = statistics.median(f["event_spans"] for f in on)
        rows.append({
            "workload": workload, "cpu_off": cpu_off, "cpu_on": cpu_on, "ratio": cpu_on / cpu_off,
            "rss_off": statistics.median(f["peak_rss_mib"] for f in off),
            "rss_on": statistics.median(f["peak_rss_mib"] for f in on),
            "spans": statistics.median(f["spans"] for f in on), "event_spans": event_spans,
            "added_us_per_event": 1e6 * (cpu_on - cpu_off) / event_spans if event_spans else None,
        })
    lines = ["| workload | CPU off (s) | CPU on (s) | on/off | peak RSS off (MiB) | on (MiB) | spans | events | "
             "added CPU per event (µs) |", "|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        added = "—" if r["added_us_per_event"] is None else f"{r['added_us_per_event']:.0f}"
        lines.append(f"| {r['workload']} | {r['cpu_off']:.3g} | {r['cpu_on']:.3g} | {r['ratio']:.3g} | "
                     f"{r['rss_off']:.3g} | {r['rss_on']:.3g} | {r['spans']:.0f} | {r['event_spans']:.0f} | {added} |")
    meta = {"date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
            "machine": {"cpus": os.cpu_count(), "platform": platform.platform()}, "rounds": args.rounds}
    text = (f"Measured {meta['date']} on {meta['machine']['cpus']} cores, {args.rounds} round(s); medians.\n\n"
            + "\n".join(lines) + "\n")
    print(text)
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(json.dumps({**meta, "rows": rows, "results": results}, indent=2) + "\n")
    args.output.with_suffix(".md").write_text(text)


if __name__ == "__main__":
    main()
