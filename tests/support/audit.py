"""What clients asked of the API: the test cluster's audit log (see AUDIT_POLICY in
checks/cluster), one JSON line per request, with its verb and user agent."""

from __future__ import annotations

import collections
import json
import os
import time
from pathlib import Path
from typing import Any

WRITE_VERBS = frozenset({"create", "update", "patch", "delete", "deletecollection"})


class AuditLog:
    """The requests logged from the moment this object is made."""

    def __init__(self) -> None:
        self.path = Path(os.environ["KOPF_CLUSTER_AUDIT_LOG"])
        if not self.path.exists():
            raise AssertionError(f"no audit log at {self.path}: restart the cluster "
                                 "(checks/cluster down; up) to enable it")
        self.offset = self.path.stat().st_size

    def requests(self, *, agent: str, namespace: str | None = None) -> list[dict[str, Any]]:
        """Requests by clients whose user agent starts with `agent`, in a namespace if given."""
        time.sleep(0.5)  # the server logs a request just after it has answered
        with self.path.open("rb") as f:
            f.seek(self.offset)
            lines = f.read().decode(errors="replace").splitlines()
        found = []
        for line in lines:
            try:
                entry = json.loads(line)
            except ValueError:
                continue  # a line being written right now
            ref = entry.get("objectRef", {})
            if entry.get("userAgent", "").startswith(agent) and \
                    (namespace is None or ref.get("namespace") == namespace):
                found.append(entry)
        return found

    def writes(self, *, agent: str, namespace: str) -> collections.Counter[str]:
        """Writes by verb and resource (`patch greetings`, `create events`, ...)."""
        return collections.Counter(
            f"{entry['verb']} {entry['objectRef'].get('resource')}"
            + (f"/{entry['objectRef']['subresource']}" if entry["objectRef"].get("subresource") else "")
            for entry in self.requests(agent=agent, namespace=namespace)
            if entry["verb"] in WRITE_VERBS)
