"""Benchmark workload: the conversion handlers' work in plain Python, as a separate web service
would do it without the engine: aiohttp over HTTPS with the benchmark's certificate, each
ConversionReview's objects converted by the same functions, `apiVersion` set, the review
answered. Less than the engine does: no check of what a conversion may not change, no chains,
no kwargs beyond the spec."""

import json
import os
import ssl
import sys
from typing import Any

from aiohttp import web


def split_name(spec: dict[str, Any]) -> dict[str, Any]:
    first, _, last = spec.get('name', '').partition(' ')
    rest = {key: value for key, value in spec.items() if key != 'name'}
    return {**rest, 'first': first, 'last': last}


def join_name(spec: dict[str, Any]) -> dict[str, Any]:
    rest = {key: value for key, value in spec.items() if key not in ('first', 'last')}
    return {**rest, 'name': ' '.join(p for p in (spec.get('first'), spec.get('last')) if p)}


STEPS = {('v1', 'v2'): split_name, ('v2', 'v1'): join_name}


async def convert(request: web.Request) -> web.Response:
    review = await request.json()
    desired = review['request']['desiredAPIVersion']
    group, _, target = desired.rpartition('/')
    converted = []
    for obj in review['request']['objects']:
        source = obj['apiVersion'].rpartition('/')[2]
        if source != target:
            obj = {**obj, 'spec': STEPS[source, target](obj.get('spec', {})), 'apiVersion': desired}
        converted.append(obj)
    answer = {'apiVersion': review.get('apiVersion', 'apiextensions.k8s.io/v1'), 'kind': 'ConversionReview',
              'response': {'uid': review['request']['uid'], 'convertedObjects': converted,
                           'result': {'status': 'Success'}}}
    return web.Response(body=json.dumps(answer).encode(), content_type='application/json')


def main() -> None:
    app = web.Application(client_max_size=30 * 1024 * 1024)
    app.router.add_post('/{path:.*}', convert)
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain('cert.pem', 'key.pem')
    print(f"serving conversions for {sys.argv[1:]}", flush=True)
    web.run_app(app, host='127.0.0.1', port=int(os.environ['BENCH_PORT']), ssl_context=context, print=None,
                access_log=None)


if __name__ == '__main__':
    main()
