"""Benchmark workload: every object looked at again every 5 seconds, though nothing changes.

Ours: ``@kopf.on.reconcile`` returning ``kopf.Requeue(after=5)``, a timer in the operator.
Kopf has no requeue; its idiom is a change handler that raises ``kopf.TemporaryError(delay=5)``
(its progress is written to the object, and the object touched, for every retry). Each call
says ``bench requeue`` for the benchmark to count."""

import logging

import kopf

EVERY = 5.0
_logger = logging.getLogger('bench')

if hasattr(kopf.on, 'reconcile'):
    @kopf.on.reconcile('greetings.demo.kopf.dev')
    def look(**_: object) -> object:
        _logger.warning("bench requeue")
        return kopf.Requeue(after=EVERY)
else:
    @kopf.on.resume('greetings.demo.kopf.dev')
    @kopf.on.create('greetings.demo.kopf.dev')
    def look(**_: object) -> object:
        _logger.warning("bench requeue")
        raise kopf.TemporaryError("looking again", delay=EVERY)
