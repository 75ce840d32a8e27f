"""Benchmark workload: a validating and a mutating admission handler, served on a local
HTTPS port with the benchmark's own certificate (both engines alike, no managed
configuration: the benchmark sends the AdmissionReviews itself). Prints a line once
the server listens."""

import os

import kopf


@kopf.on.startup()
def configure(settings: kopf.OperatorSettings, **_: object) -> None:
    settings.admission.server = kopf.WebhookServer(
        addr='127.0.0.1', port=int(os.environ['BENCH_PORT']), certfile='cert.pem', pkeyfile='key.pem')


@kopf.on.validate('greetings')
def check(spec: kopf.Spec, warnings: list[str], **_: object) -> None:
    if spec.get('mood') == 'grumpy':
        raise kopf.AdmissionError("No grumpy greetings.", code=418)
    warnings.append("checked")


@kopf.on.mutate('greetings')
def stamp(patch: kopf.Patch, **_: object) -> None:
    patch.spec['stamp'] = 'stamped'
