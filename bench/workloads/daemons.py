"""Benchmark workload: an async daemon on every object, waiting to be stopped; each one
says when it starts, so that the benchmark knows when all are running."""

import kopf


@kopf.daemon('greetings.demo.kopf.dev')
async def idle(stopped: kopf.DaemonStopped, logger: kopf.Logger, **_: object) -> None:
    logger.info("bench daemon started")
    await stopped.wait()
