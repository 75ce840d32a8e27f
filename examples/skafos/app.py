# (Not `operator.py`: a script named so would hide the standard library's `operator`.)
"""A Skafos operator (ING's Skafos listener API), unchanged, on kopf-rs' engine: greets each
Greeting (`examples/crd.yaml`) in its status and counts the updates of all of them.

    pip install kubernetes              # Skafos' operators use the official client
    python examples/skafos/app.py  # HEALTH_PORT (5000), LEADER_ELECTION_NS (none)

With `LEADER_ELECTION_NS` set, run it as a Deployment of several replicas: only the leader's
listeners get events, and another replica takes over (from where the leader got) if it dies.
`curl localhost:5000/healthz` answers 200 while the event stream is healthy, 503 if not.
"""

import logging
import os

from kubernetes import client, config
from skafos.event_listener import EventListener
from skafos.stream_watch import StreamWatch

CRD = os.path.join(os.path.dirname(os.path.abspath(__file__)), '..', 'crd.yaml')


class UpdateCounter(EventListener):
    """Passed as an instance: the same one gets every event."""

    updates = 0

    def update(self):
        self.updates += 1
        self.logger.info(f"{self.metadata['name']} updated ({self.updates} updates of greetings so far)")


class Greeter(EventListener):
    """Passed as a class: a new instance for each event, with the operator's API client."""

    def __init__(self, api_client, event):
        super().__init__(api_client, event)
        self.objects = client.CustomObjectsApi(api_client)

    def create(self):
        who = (self.event['object'].get('spec') or {}).get('who', 'world')
        self.objects.patch_namespaced_custom_object_status(
            'demo.kopf.dev', 'v1', self.metadata['namespace'], 'greetings', self.metadata['name'],
            {'status': {'message': f"Hello, {who}!"}})

    def delete(self):
        self.logger.info(f"{self.metadata['name']} is gone: goodbye!")


if __name__ == '__main__':
    if 'KUBERNETES_PORT' in os.environ:
        config.load_incluster_config()
    else:
        config.load_kube_config()
    logging.basicConfig(level=logging.INFO, format='%(asctime)s %(levelname)s %(name)s: %(message)s')
    StreamWatch(CRD, [UpdateCounter(), Greeter]).run(
        healthcheck_port=int(os.environ.get('HEALTH_PORT', '5000')),
        leader_election_ns=os.environ.get('LEADER_ELECTION_NS', ''),
    )
