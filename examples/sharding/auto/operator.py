"""Automatic shards: any number of replicas of one Deployment share the greetings among
themselves, each watching only its own part of them (by the hash of their uids, with
Kubernetes' sharded list & watch). Nothing is configured per replica: they find each other
through Leases, split the objects evenly, and split them again when a replica joins or dies.

    kopf run --all-namespaces --shards auto examples/sharding/auto/operator.py
"""

import os
from typing import Any

import kopf


@kopf.on.startup()
def configure(settings: kopf.OperatorSettings, **_: Any) -> None:
    settings.sharding.group = 'auto-greeter'  # the replicas that share the objects


@kopf.on.create('demo.kopf.dev', 'greetings')
def greet(spec: kopf.Spec, **_: Any) -> dict[str, Any]:
    # POD_ID: the pod's name (the Deployment sets it), also the replica's identity.
    return {'message': f"Hello, {spec.get('who', 'world')}!", 'replica': os.environ.get('POD_ID', '')}
