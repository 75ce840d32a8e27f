"""Daemons and timers for Greetings: what runs for as long as each object exists.

    kopf run examples/daemons/operator.py --verbose -n default
    kubectl apply -f examples/greeter/greeting.yaml
    kubectl get gr hello -o yaml        # status.uptime ticks, status.heartbeat moves
    kubectl delete gr hello             # the daemons stop; then the object goes
"""

import asyncio
import time

import kopf


@kopf.daemon('greetings.demo.kopf.dev', cancellation_backoff=1.0, cancellation_timeout=3.0)
async def heartbeat(stopped: kopf.DaemonStopped, name: str, logger: kopf.Logger, **_) -> None:
    """An async daemon: beats every 2 seconds until stopped (or cancelled)."""
    beats = 0
    while not stopped:
        beats += 1
        logger.info(f"Heartbeat #{beats} of {name}.")
        await stopped.wait(2.0)
    logger.info(f"Heartbeat of {name} stops: {stopped.reason}.")


@kopf.daemon('greetings.demo.kopf.dev', initial_delay=1.0)
def watcher(stopped: kopf.DaemonStopped, spec: kopf.Spec, logger: kopf.Logger, **_) -> None:
    """A sync daemon in a thread: it sees the object's latest spec and checks the flag itself."""
    seen = None
    while not stopped:
        if spec.get('who') != seen:
            seen = spec.get('who')
            logger.info(f"Watching over {seen!r}.")
        stopped.wait(0.5)


@kopf.timer('greetings.demo.kopf.dev', interval=5.0, sharp=True)
def uptime(memo: kopf.Memo, meta: kopf.Meta, patch: kopf.Patch, **_) -> dict:
    """A timer: its result lands in status.uptime, its patch in status.heartbeat."""
    patch.status['heartbeat'] = time.strftime('%H:%M:%S')
    memo['checks'] = memo.get('checks', 0) + 1
    return {'checks': memo['checks'], 'since': meta.creation_timestamp}


@kopf.timer('greetings.demo.kopf.dev', idle=10.0, interval=60.0)
async def settled(name: str, logger: kopf.Logger, **_) -> None:
    """An idle timer: once nothing changed for 10 seconds, and then every minute."""
    await asyncio.sleep(0)
    logger.info(f"{name} has been quiet for a while.")
