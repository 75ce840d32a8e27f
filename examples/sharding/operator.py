"""Manual shards: each replica of a StatefulSet serves its own share of the objects, split by
the hash of their uids, with Kubernetes' sharded list & watch (`settings.watching.shard_selectors`;
the API server needs its `ShardedListAndWatch` feature). Replica N of SHARDS takes the N-th range;
the replicas do not pause each other in a peering, as Kopf's sharded operators do not.

    kopf run --all-namespaces examples/sharding/operator.py   # HOSTNAME=greeter-0 SHARDS=2
"""

import os
from typing import Any

import kopf

SHARDS = int(os.environ.get('SHARDS', '1'))
# A StatefulSet's pods are named `<name>-<ordinal>`, and so is their HOSTNAME.
ORDINAL = int(os.environ.get('HOSTNAME', 'greeter-0').rsplit('-', 1)[-1])


def shard_range(ordinal: int, shards: int) -> str:
    """The `ordinal`-th of `shards` equal ranges of the 64-bit hashes of the objects' uids."""
    span = 2 ** 64 // shards
    low = ordinal * span
    high = 2 ** 64 if ordinal == shards - 1 else (ordinal + 1) * span
    return f"shardRange(object.metadata.uid, '0x{low:016x}', '0x{high:016x}')"


@kopf.on.startup()
def configure(settings: kopf.OperatorSettings, logger: kopf.Logger, **_: Any) -> None:
    if not 0 <= ORDINAL < SHARDS:
        raise kopf.PermanentError(f"replica {ORDINAL} does not fit {SHARDS} shards: set SHARDS to the replicas")
    settings.watching.shard_selectors['demo.kopf.dev', 'greetings'] = shard_range(ORDINAL, SHARDS)
    logger.info(f"Serving shard {ORDINAL} of {SHARDS}: {shard_range(ORDINAL, SHARDS)}")


@kopf.on.create('demo.kopf.dev', 'greetings')
def greet(spec: kopf.Spec, **_: Any) -> dict[str, Any]:
    return {'message': f"Hello, {spec.get('who', 'world')}!", 'shard': ORDINAL}
