"""The start of kopf.testing's control plane against controller-runtime's envtest, the anchor.

Both start etcd and kube-apiserver from the same programs (``$KUBEBUILDER_ASSETS``), make their
certificates, wait until the API server is ready for requests, and stop; rounds alternate
between them, so the machine's moods fall on both. Ours is timed as a test session sees it:
``KopfCluster.__enter__``, from nothing to a kubeconfig that works (a state folder, free ports,
certificates, both processes). Writes bench/results/control-plane.{json,md}.

Usage: bench/run control-plane [--rounds N]   (bench/envtest/ is built once, with Go).
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import time
from pathlib import Path

from kopf.testing import KopfCluster

RESULTS = Path(__file__).parent / "results"


def ours() -> float:
    started = time.monotonic()
    with KopfCluster():
        elapsed = time.monotonic() - started
    return elapsed


def envtest(program: str) -> float:
    result = subprocess.run([program, "1"], capture_output=True, text=True, check=True)
    return float(result.stdout.strip())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--envtest", required=True, help="the built bench/envtest program")
    parser.add_argument("--rounds", type=int, default=10, help="starts of each (default: 10)")
    args = parser.parse_args()
    ours(), envtest(args.envtest)  # warm: the programs in the page cache
    times: dict[str, list[float]] = {"kopf.testing.KopfCluster": [], "envtest (controller-runtime)": []}
    for _ in range(args.rounds):
        times["kopf.testing.KopfCluster"].append(ours())
        times["envtest (controller-runtime)"].append(envtest(args.envtest))
    medians = {name: statistics.median(values) for name, values in times.items()}
    ratio = medians["kopf.testing.KopfCluster"] / medians["envtest (controller-runtime)"]
    lines = ["| control plane | median start | min | max |", "|---|---|---|---|"]
    lines += [f"| {name} | {medians[name]:.2f} s | {min(values):.2f} s | {max(values):.2f} s |"
              for name, values in times.items()]
    lines.append(f"\nOurs / envtest: {ratio:.2f} ({args.rounds} rounds each, alternating; "
                 "etcd and kube-apiserver ready for requests, certificates included).")
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "control-plane.json").write_text(json.dumps({"times": times, "medians": medians,
                                                             "ratio": ratio}, indent=2) + "\n")
    (RESULTS / "control-plane.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
