"""Benchmark workload: the conversion example's two steps (a Contact's `name` split into `first`
and `last`, and joined back), served on a local HTTPS port with the benchmark's own certificate
(not managed: the benchmark sends the ConversionReviews itself)."""

import os
from typing import Any

import kopf


@kopf.on.startup()
def configure(settings: kopf.OperatorSettings, **_: object) -> None:
    settings.admission.server = kopf.WebhookServer(
        addr='127.0.0.1', port=int(os.environ['BENCH_PORT']), certfile='cert.pem', pkeyfile='key.pem')


@kopf.on.convert('contacts.demo.kopf.dev', source='v1', target='v2')
def split_name(spec: kopf.Spec, **_: object) -> dict[str, Any]:
    first, _, last = spec.get('name', '').partition(' ')
    rest = {key: value for key, value in spec.items() if key != 'name'}
    return {'spec': {**rest, 'first': first, 'last': last}}


@kopf.on.convert('contacts.demo.kopf.dev', source='v2', target='v1')
def join_name(spec: kopf.Spec, **_: object) -> dict[str, Any]:
    rest = {key: value for key, value in spec.items() if key not in ('first', 'last')}
    return {'spec': {**rest, 'name': ' '.join(p for p in (spec.get('first'), spec.get('last')) if p)}}
