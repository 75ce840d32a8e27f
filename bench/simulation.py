"""kopf.testing.Simulation: how many handler tests a second, and an hour of timers in how long.

Two figures, no cluster (Kopf has nothing alike to compare with):
- a test as a user writes it: a simulation made and entered (the operator started), an
  object created, changed and deleted, each step settled and checked, the operator stopped;
  rounds in a row, the tests per second of real time;
- an hour of virtual time with a 1-second timer on one object: the real time it takes;
- an hour of virtual time with a daemon that waits 1 second in ``stopped.wait()`` between
  its checks: the real time it takes.
Writes bench/results/simulation.{json,md}.

Usage: bench/run simulation [--rounds N]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import tempfile
import textwrap
import time
from pathlib import Path
from typing import Any

import yaml
from kopf.testing import Simulation

RESULTS = Path(__file__).parent / "results"

CRD = yaml.safe_load((Path(__file__).parent.parent / "examples" / "crd.yaml").read_text())

HANDLERS = """
import kopf

TICKS = []

@kopf.on.create('greetings')
def greet(spec, **_):
    return spec['who']

@kopf.on.update('greetings')
def regreet(spec, **_):
    return spec['who']

@kopf.on.delete('greetings')
def part(**_):
    pass

@kopf.timer('greetings', interval=1, labels={'ticking': 'yes'})
def tick(**_):
    TICKS.append(1)

@kopf.daemon('greetings', labels={'checking': 'yes'})
async def check(stopped, **_):
    while not stopped:
        TICKS.append(1)
        await stopped.wait(1)
"""


def greeting(**labels: str) -> dict[str, Any]:
    return {"apiVersion": "demo.kopf.dev/v1", "kind": "Greeting",
            "metadata": {"name": "g1", "labels": labels}, "spec": {"who": "world"}}


async def lifecycle(path: Path) -> None:
    sim = Simulation(paths=[str(path)])
    sim.create(CRD)
    async with sim:
        sim.create(greeting())
        await sim.settle()
        assert (sim.get("greetings", "g1") or {})["status"]["greet"] == "world"
        sim.patch("greetings", "g1", {"spec": {"who": "again"}})
        await sim.settle()
        assert (sim.get("greetings", "g1") or {})["status"]["regreet"] == "again"
        sim.delete("greetings", "g1")
        await sim.settle()
        assert sim.get("greetings", "g1") is None


async def an_hour(path: Path, **labels: str) -> tuple[float, int]:
    sim = Simulation(paths=[str(path)])
    sim.create(CRD)
    async with sim:
        sim.create(greeting(**labels))
        await sim.settle()
        before = sum(len(getattr(module, "TICKS", [])) for module in _scripts())
        started = time.monotonic()
        await sim.advance(3600)
        elapsed = time.monotonic() - started
        ticks = sum(len(getattr(module, "TICKS", [])) for module in _scripts()) - before
    return elapsed, ticks


def _scripts() -> list[Any]:
    import sys
    return [m for name, m in sys.modules.items() if name.startswith("__kopf_script_")]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=50, help="tests in a row (default: 50)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "handlers.py"
        path.write_text(textwrap.dedent(HANDLERS))
        durations = []
        for _ in range(args.rounds):
            started = time.monotonic()
            asyncio.run(lifecycle(path))
            durations.append(time.monotonic() - started)
        hour, ticks = asyncio.run(an_hour(path, ticking="yes"))
        daemon_hour, checks = asyncio.run(an_hour(path, checking="yes"))
    median = statistics.median(durations)
    figures = {"rounds": args.rounds, "test_median_s": round(median, 4),
               "tests_per_second": round(args.rounds / sum(durations), 1),
               "hour_of_1s_timer_s": round(hour, 3), "timer_calls": ticks,
               "hour_of_1s_daemon_s": round(daemon_hour, 3), "daemon_checks": checks}
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "simulation.json").write_text(json.dumps(figures, indent=2) + "\n")
    (RESULTS / "simulation.md").write_text(
        "# kopf.testing.Simulation\n\n"
        f"- a create-update-delete test (the operator started and stopped): median {median * 1000:.0f} ms, "
        f"{figures['tests_per_second']} tests a second ({args.rounds} in a row)\n"
        f"- an hour of virtual time with a 1-second timer: {hour:.2f} s of real time, {ticks} timer calls\n"
        f"- an hour of virtual time with a daemon waiting 1 second between checks: {daemon_hour:.2f} s of real"
        f" time, {checks} checks\n")
    print(json.dumps(figures))


if __name__ == "__main__":
    main()
