"""Benchmark workload: the log handlers' work in plain Python, as an operator would write it
without log handlers: `kubernetes_asyncio`, one followed log stream per pod, each line
matched with Python's `re`, the matched lines counted (the count written to a file twice a
second). Less than the engine does: no watch of the pods; streams reopened from the start."""

import asyncio
import os
import re
import sys
import threading
import time

from kubernetes_asyncio import client, config

PATTERN = re.compile(r'model accuracy is (\d+(?:\.\d+)?)%')
HANDLED = [0]


def accuracy(pod: str, line: str, match: re.Match[str]) -> None:
    HANDLED[0] += 1


async def follow(api: client.CoreV1Api, namespace: str, name: str) -> None:
    """Follow the log; a stream that ends (kwok ends it at once until it knows the pod's log)
    is opened again, the lines already seen skipped by their times (and their count within
    the last time seen)."""
    last, count = '', 0
    while True:
        response = await api.read_namespaced_pod_log(name, namespace, container='main', follow=True,
                                                     timestamps=True, _preload_content=False)
        skip_before, skip_at = last, count
        async for raw in response.content:
            stamp, _, line = raw.decode('utf-8', 'replace').rstrip('\n').partition(' ')
            if stamp < skip_before or (stamp == skip_before and skip_at > 0):
                skip_at -= stamp == skip_before
                continue
            last, count = stamp, (count + 1 if stamp == last else 1)
            match = PATTERN.search(line)
            if match:
                accuracy(name, line, match)
        response.release()
        await asyncio.sleep(0.5)


async def main(namespace: str) -> None:
    configuration = client.Configuration()
    await config.load_kube_config(client_configuration=configuration)
    configuration.connection_pool_maxsize = 10_000  # a stream per pod, all at once
    async with client.ApiClient(configuration) as api_client:
        api = client.CoreV1Api(api_client)
        pods = await api.list_namespaced_pod(namespace, label_selector='app=bench-logs')
        await asyncio.gather(*(follow(api, namespace, pod.metadata.name) for pod in pods.items))


def dump() -> None:
    while True:
        with open(os.environ['BENCH_COUNTS'], 'w', encoding='utf-8') as f:
            f.write(str(HANDLED[0]))
        time.sleep(0.5)


if __name__ == '__main__':
    threading.Thread(target=dump, daemon=True).start()
    asyncio.run(main(sys.argv[1]))
