"""The Python side of one ``on.event`` call, without the core or a cluster: what building a
handler's kwargs, calling it (``bench/workloads/events.py``'s handler, its lines counted and
dropped) and answering cost in CPU per call, back to back and after an idle gap between
calls. An event storm's calls come ~1 ms apart: each meets caches that the gap has cooled,
which back-to-back calls do not show (docs/benchmarks.md, "What bounds an event storm").
Run it with `bench/run calls` (in our engine's virtualenv, as `bench/run` makes it).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import runpy
import statistics
import time

import kopf
from kopf._bridge.protocol import Invocation, ResourceInfo
from kopf._running.calls import Bridge

WORKLOAD = os.path.join(os.path.dirname(os.path.abspath(__file__)), "workloads", "events.py")
WARMUP = 500  # calls before the measured ones, at most: the first calls make the caches

RESOURCE: ResourceInfo = {
    'group': 'demo.kopf.dev', 'version': 'v1', 'plural': 'greetings', 'kind': 'Greeting',
    'singular': 'greeting', 'shortcuts': [], 'categories': [], 'subresources': ['status'],
    'namespaced': True, 'preferred': True, 'verbs': ['get', 'list', 'watch', 'patch'],
}


def event(n: int, objects: int) -> Invocation:
    """The n-th event of a storm over `objects` objects, as the core hands it to the bridge
    (a body as the API server sends a patched greeting: kubectl's managed fields included)."""
    name = f"greeting-{n % objects}"
    body = {
        'apiVersion': 'demo.kopf.dev/v1', 'kind': 'Greeting',
        'metadata': {
            'name': name, 'namespace': 'bench', 'uid': f"00000000-0000-0000-0000-{n % objects:012d}",
            'resourceVersion': str(1000 + n), 'generation': 1 + n // objects,
            'creationTimestamp': '2026-11-28T08:00:00Z',
            'managedFields': [{'manager': 'kubectl-patch', 'operation': 'Update', 'apiVersion': 'demo.kopf.dev/v1',
                               'time': '2026-11-28T08:00:00Z', 'fieldsType': 'FieldsV1',
                               'fieldsV1': {'f:spec': {'.': {}, 'f:n': {}}}}],
        },
        'spec': {'n': n},
    }
    return {'kind': 'watching', 'handler': 0, 'resource': RESOURCE, 'body': body, 'event_type': 'MODIFIED',
            'reason': None, 'old': None, 'new': None, 'diff': None, 'retry': 0, 'started': None,
            'runtime': 0.0, 'scope': None, 'children': None}


def per_call(bridge: Bridge, calls: int, objects: int, gap: float) -> float:
    """The mean CPU of a call, in µs, with `gap` seconds of sleep before each."""
    spent = []
    for n in range(calls):
        call = event(n, objects)
        if gap:
            time.sleep(gap)
        started = time.thread_time_ns()
        bridge.invoke_in_thread(call)
        spent.append(time.thread_time_ns() - started)
    return statistics.fmean(spent) / 1000


class Lines:
    """Where the handler's lines go: only counted (each call must have run the handler)."""

    def __init__(self) -> None:
        self.count = 0

    def write(self, text: str) -> int:
        self.count += text.count("\n")
        return len(text)

    def flush(self) -> None:
        pass


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--calls", type=int, default=3000, help="calls per gap (default: %(default)s)")
    parser.add_argument("--objects", type=int, default=100, help="objects the events are about")
    parser.add_argument("--gaps", default="0,0.0001,0.001,0.005",
                        help="seconds of idle sleep before each call, comma-separated (default: %(default)s)")
    args = parser.parse_args()
    registry = kopf.get_default_registry()
    lines = Lines()
    with contextlib.redirect_stdout(lines):  # a writer is all that print() needs
        runpy.run_path(WORKLOAD)
        bridge = Bridge(registry=registry, settings=kopf.OperatorSettings(), memo=kopf.Memo(),
                        ready=asyncio.Event(), loop=asyncio.new_event_loop())
        warmup = min(args.calls, WARMUP)
        per_call(bridge, warmup, args.objects, 0)
        results: list[tuple[float, float]] = []
        for gap in (float(text) for text in args.gaps.split(",")):
            results.append((gap, per_call(bridge, args.calls, args.objects, gap)))
    expected = warmup + args.calls * len(results)
    if lines.count != expected:
        raise SystemExit(f"the handler ran {lines.count} times for {expected} calls: the figures mean nothing")
    print("| idle gap before each call | CPU per call |\n|---|---|")
    for gap, micros in results:
        print(f"| {gap * 1000:g} ms | {micros:.1f} µs |")


if __name__ == "__main__":
    main()
