"""Benchmark workload: a 1-second timer on every object; each call records its lateness
(the gap since the previous call minus the interval) for the benchmark to read at exit."""

import json
import os
import time

import kopf

SAMPLES: list[tuple[float, float]] = []


@kopf.timer('greetings.demo.kopf.dev', interval=1.0)
async def tick(memo: kopf.Memo, **_: object) -> None:
    now = time.time()
    last = memo.get('bench_last')
    memo['bench_last'] = now
    if last is not None:
        SAMPLES.append((now, now - last - 1.0))


@kopf.on.cleanup()
def dump(**_: object) -> None:
    with open(os.environ['BENCH_SAMPLES'], 'w', encoding='utf-8') as f:
        json.dump(SAMPLES, f)
