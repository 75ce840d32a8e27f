"""Benchmark workload: pods indexed by two indices (by label, and each pod's phase), and a
1-second timer on one object that reads both (a full scan and a lookup), as Kopf's example
does. It prints a line once every pod is indexed, which the benchmark waits for."""

import os

import kopf

EXPECTED = int(os.environ['BENCH_OBJECTS'])


@kopf.index('pods')
def by_label(labels: kopf.Labels, name: str, **_: object) -> dict[tuple[str, str], str]:
    return {(label, value): name for label, value in labels.items()}


@kopf.index('pods')
def phases(namespace: str, name: str, status: kopf.Status, **_: object) -> dict[tuple[str, str], object]:
    return {(namespace, name): status.get('phase')}


@kopf.timer('greetings.demo.kopf.dev', interval=1.0)
def read(by_label: kopf.Index[tuple[str, str], str], phases: kopf.Index[tuple[str, str], object],
         **_: object) -> None:
    running = sum(1 for _, store in phases.items() if 'Running' in store)
    first_app = len(by_label.get(('app', 'bench-0'), ()))
    if len(phases) >= EXPECTED and first_app >= EXPECTED // 10 and running == 0:
        print("bench indexed all", flush=True)
