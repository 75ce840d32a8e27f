"""Peering: who this operator is among its peers, and the ``kopf freeze/resume`` commands.

The peering itself (keep-alives, pausing, resuming) runs in the engine; this module
names the operator and asks the engine to write one record for the CLI commands.
"""

from __future__ import annotations

import datetime
import getpass
import json
import logging
import os
import random
import socket
from collections.abc import Collection
from typing import Any, NewType

from kopf._bridge import services
from kopf._structures.errors import OperatorError

logger = logging.getLogger('kopf._core.engines.peering')

Identity = NewType('Identity', str)


def detect_own_id(*, manual: bool) -> Identity:
    """``POD_ID`` if set (a pod's name, as a Deployment passes it); else who runs it where.

    Operators get a timestamp and a random tail, so that restarts are distinct peers;
    ``kopf freeze/resume`` (``manual``) do not, so that a resume finds its freeze.
    """
    pod = os.environ.get('POD_ID')
    if pod is not None:
        return Identity(pod)
    user = getpass.getuser()
    host = socket.gethostname()
    if manual:
        return Identity(f'{user}@{host}')
    now = datetime.datetime.now(datetime.UTC).strftime('%Y%m%d%H%M%S')
    tail = ''.join(random.choices('abcdefhijklmnopqrstuvwxyz0123456789', k=3))
    return Identity(f'{user}@{host}/{now}/{tail}')


async def touch_command(*, connection: dict[str, Any], identity: str, name: str, priority: int, lifetime: int,
                        clusterwide: bool, namespaces: Collection[str], message: str | None = None) -> None:
    """Write (``lifetime > 0``) or remove (``0``) our record in the peering objects, logged in as
    ``connection`` says (the login's result, as ``authenticate`` gives it)."""
    request = {'identity': identity, 'name': name, 'priority': priority, 'lifetime': lifetime,
               'clusterwide': clusterwide or not namespaces, 'namespaces': list(namespaces), 'message': message}
    try:
        results: list[Any] = json.loads(await services.touch_peering(json.dumps(connection), json.dumps(request)))
    except RuntimeError as e:
        raise OperatorError(str(e)) from None
    missing = [place for place, found in results if not found]
    for place, found in results:
        logger.info(f"Keep-alive in {name!r} {place}: {'ok' if found else 'not found'}.")
    if missing or not results:
        raise OperatorError(f"The peering {name!r} is not found {', '.join(missing) or 'anywhere'}.")
