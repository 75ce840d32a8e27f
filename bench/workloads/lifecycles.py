"""Benchmark workload: one trivial handler for each of creation, update and deletion;
each prints a line, which the benchmark counts (printing works at any log level). The
creation handler says when it started, for the reaction latency."""

import time

import kopf


@kopf.on.create('greetings.demo.kopf.dev')
def created(name: str, **_: object) -> None:
    print(f"bench created {name} at {time.time():.6f}", flush=True)


@kopf.on.update('greetings.demo.kopf.dev')
def updated(**_: object) -> None:
    print("bench updated", flush=True)


@kopf.on.delete('greetings.demo.kopf.dev')
def deleted(**_: object) -> None:
    print("bench deleted", flush=True)
