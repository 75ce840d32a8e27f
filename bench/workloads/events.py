"""Benchmark workload: an `on.event` handler that sees every event of every object;
it prints a line for each, which the benchmark counts."""

import kopf


@kopf.on.event('greetings.demo.kopf.dev')
def seen(**_: object) -> None:
    print("bench event", flush=True)
