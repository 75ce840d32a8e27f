"""A Skafos operator as its users write them (the `kubernetes` client, listeners by reference
and by class), run by the tests as `python listeners.py`. Each line it prints is one thing a
test checks; only the objects of `$NAMESPACE` are acted on (the stream is cluster-wide)."""

import logging
import os
import sys
import threading
import time

from kubernetes import client, config
from skafos.event_listener import EventListener
from skafos.stream_watch import StreamWatch

NAMESPACE = os.environ['NAMESPACE']
ME = os.environ.get('HOSTNAME', '?')


def say(line):
    sys.stdout.write(line + "\n")  # one write: the listeners' threads do not split each other's lines


def ours(listener):
    return isinstance(listener.metadata, dict) and listener.metadata.get('namespace') == NAMESPACE


class Journal(EventListener):
    """By reference: one instance sees every event."""

    def process(self, event=None, ev_state=None):
        self.process_event(event, ev_state)
        if self.event['type'] == 'ERROR' or ours(self):
            obj = self.event['object']
            version = obj.get('metadata', {}).get('resourceVersion')
            say(f"EVENT {self.event['type']} {self.metadata.get('name')} {version} by {id(self)}")
        return super().process(event, ev_state)

    def rollback(self):
        say(f"ROLLBACK {type(self).__name__} {self.metadata.get('name')}")


class Greeter(EventListener):
    """By class: a new instance per event, with the client Skafos gives it."""

    def __init__(self, api_client, event):
        super().__init__(api_client, event)
        self.api = client.CustomObjectsApi(api_client)

    def create(self):
        if not ours(self):
            return None
        spec = self.event['object'].get('spec') or {}
        if spec.get('fail'):
            raise ValueError(f"asked to fail by {self.metadata['name']}")
        if spec.get('refuse'):
            return False
        self.api.patch_namespaced_custom_object_status(
            'skafos.kopf.dev', 'v1', NAMESPACE, 'listenees', self.metadata['name'],
            {'status': {'greeted': ME}})
        say(f"CREATED {self.metadata['name']} by {id(self)}")
        return None

    def error(self):
        say(f"ERROR {self.event['object'].get('code')} {self.event['object'].get('reason')}")


if __name__ == '__main__':
    config.load_kube_config()
    logging.basicConfig(level=logging.INFO, format='%(levelname)s %(name)s: %(message)s')
    watch = StreamWatch(os.path.join(os.path.dirname(__file__), 'crd.yaml'), [Journal(), Greeter])
    stop_after = float(os.environ.get('STOP_AFTER', '0'))
    if stop_after:
        threading.Timer(stop_after, watch.stop).start()
    started = time.monotonic()
    watch.run(timeout=int(os.environ.get('TIMEOUT', '7200')), healthcheck_port=int(os.environ['PORT']),
              leader_election_ns=os.environ.get('ELECTION_NAMESPACE', ''))
    say(f"STOPPED after {time.monotonic() - started:.1f}s")
