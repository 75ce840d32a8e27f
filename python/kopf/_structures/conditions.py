"""``kopf.set_condition()``: an object's ``status.conditions`` kept as Kubernetes' own objects
keep them (not in Kopf), so that ``kubectl wait --for=condition=Ready`` works on an operator's
objects.

A condition is replaced by its type; its ``lastTransitionTime`` changes only when its status
does; ``observedGeneration`` is the generation of the object the handler saw. The list goes
into the handler's ``patch``, whole (a merge-patch replaces lists), and several calls in one
handler build on each other.
"""

from __future__ import annotations

import datetime
import re
from collections.abc import Mapping
from typing import Any

from kopf._structures.dicts import plain
from kopf._structures.hierarchies import cause_body_var
from kopf._structures.structs import Patch

STATUSES = {True: 'True', False: 'False', 'True': 'True', 'False': 'False', 'Unknown': 'Unknown', None: 'Unknown'}
# As the API's own conditions (metav1.Condition) allow them.
TYPE = re.compile(r'([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?'
                  r'[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?')
REASON = re.compile(r'[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?')


def set_condition(patch: Patch, type: str, status: bool | str | None, *, reason: str | None = None,
                  message: str | None = None, body: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """Set the condition of this ``type`` in the object's ``status.conditions`` through the
    handler's ``patch``: replaced if there is one of that type, added if not; the condition as set.

    ``status``: True, False or None (``'True'``, ``'False'``, ``'Unknown'`` as well);
    ``reason``: a CamelCase word (``'Deployed'``); ``message``: for people; ``body``: the object
    (by default the one whose handler is running). ``lastTransitionTime`` is now if the status
    changes (or the condition is new), else kept; ``observedGeneration`` is the object's
    ``metadata.generation``.
    """
    if not isinstance(type, str) or TYPE.fullmatch(type) is None or len(type) > 316:
        raise ValueError(f"A condition's type is a CamelCase name such as 'Ready' (or 'example.com/Ready'), "
                         f"not {type!r}.")
    try:
        text = STATUSES[status]
    except (KeyError, TypeError):
        raise ValueError(f"A condition's status is True, False or None ('True', 'False', 'Unknown'), "
                         f"not {status!r}.") from None
    if reason is not None and (not isinstance(reason, str) or REASON.fullmatch(reason) is None):
        raise ValueError(f"A condition's reason is a CamelCase word such as 'Deployed', not {reason!r}.")
    if body is None:
        try:
            body = cause_body_var.get()
        except LookupError:
            raise TypeError("kopf.set_condition() needs body= outside of a handler.") from None
    written = patch.get('status') or {}
    current = written['conditions'] if 'conditions' in written else (body.get('status') or {}).get('conditions')
    conditions = [plain(item) for item in (current or []) if isinstance(item, Mapping)]
    previous = next((item for item in conditions if item.get('type') == type), None)
    now = datetime.datetime.now(datetime.UTC).strftime('%Y-%m-%dT%H:%M:%SZ')
    kept = previous is not None and previous.get('status') == text and previous.get('lastTransitionTime')
    condition: dict[str, Any] = {'type': type, 'status': text, 'lastTransitionTime': kept or now}
    if reason is not None:
        condition['reason'] = reason
    if message is not None:
        condition['message'] = message
    generation = (body.get('metadata') or {}).get('generation')
    if generation is not None:
        condition['observedGeneration'] = generation
    if previous is None:
        conditions.append(condition)
    else:
        conditions = [condition if item is previous else item for item in conditions]
    patch.status['conditions'] = conditions
    return condition

