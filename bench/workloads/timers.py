"""Benchmark workload: a 1-second timer on every object; each call records its lateness
(the gap since the previous call minus the interval) for the benchmark to read at exit.

The samples are kept as raw doubles (16 bytes a sample): as a list of tuples (112 bytes a
sample), the 70 000 samples of a minute of 1000 timers held 7-8 MiB in the operator's
process, the same in both engines, and that much of the peak RSS was the benchmark's own."""

import array
import json
import os
import time

import kopf

SAMPLES = array.array('d')  # (when, lateness) pairs, flat


@kopf.timer('greetings.demo.kopf.dev', interval=1.0)
async def tick(memo: kopf.Memo, **_: object) -> None:
    now = time.time()
    last = memo.get('bench_last')
    memo['bench_last'] = now
    if last is not None:
        SAMPLES.extend((now, now - last - 1.0))


@kopf.on.cleanup()
def dump(**_: object) -> None:
    with open(os.environ['BENCH_SAMPLES'], 'w', encoding='utf-8') as f:
        json.dump(SAMPLES.tolist(), f)
