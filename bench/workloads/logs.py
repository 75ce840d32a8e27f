"""Benchmark workload: a log handler on the benchmark's pods, matching one line in ten (the
others never reach Python); the handled lines are counted, and the count written to a file
twice a second for the benchmark to read."""

import os
import threading
import time

import kopf

HANDLED = [0]


@kopf.on.log(labels={'app': 'bench-logs'}, regex=r'model accuracy is (\d+(?:\.\d+)?)%')
def accuracy(match: object, **_: object) -> None:
    HANDLED[0] += 1


@kopf.on.startup()
def count(**_: object) -> None:
    def dump() -> None:
        while True:
            with open(os.environ['BENCH_COUNTS'], 'w', encoding='utf-8') as f:
                f.write(str(HANDLED[0]))
            time.sleep(0.5)
    threading.Thread(target=dump, daemon=True).start()
