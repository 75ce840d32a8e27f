"""An operator as an SRE runs it (not in Kopf): its RBAC generated from its handlers, its figures
for Prometheus, and a cron schedule.

    kopf rbac generate -n default --name greeter examples/operating/operator.py | kubectl apply -f -
    kopf rbac verify -n default --name greeter examples/operating/operator.py  # as the account
    kopf run -n default --metrics 9090 examples/operating/operator.py
    curl -s localhost:9090/metrics | grep kopf_handler_calls_total
"""

import datetime
from typing import Any

import kopf


@kopf.on.create('greetings')
def greet(spec: kopf.Spec, name: str, logger: kopf.Logger, **_: Any) -> dict[str, str]:
    logger.info(f"Greeting {name}")
    return {'message': f"Hello, {spec.get('who', 'world')}!"}


@kopf.on.update('greetings', field='spec.who')
def regreet(new: Any, **_: Any) -> dict[str, str]:
    if not new:
        raise kopf.PermanentError("Nobody to greet.")
    return {'message': f"Hello again, {new}!"}


@kopf.timer('greetings', cron='*/5 * * * *', timezone='UTC')
def remind(patch: kopf.Patch, **_: Any) -> None:
    """Every five minutes on the clock: when the greeting was last confirmed."""
    patch.status['confirmed'] = datetime.datetime.now(datetime.UTC).isoformat(timespec='seconds')
