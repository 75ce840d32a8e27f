"""Pods that "run" on the test control plane's simulated nodes (kwok; see python/kopf/_operating/cluster/kwok.yaml):
their manifests, their ends and restarts, and their containers' logs (files that tests write)."""

from __future__ import annotations

import datetime
import json
from pathlib import Path
from typing import Any

from support.cluster import apply, kubectl

# What the stages in python/kopf/_operating/cluster/kwok.yaml react to.
EXIT_CODE = "kwok.kopf.dev/exit-code"
RESTARTS = "kwok.kopf.dev/restarts"


def pod(name: str, namespace: str, containers: tuple[str, ...] = ("main",),
        labels: dict[str, str] | None = None) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": namespace, "labels": labels or {}},
            "spec": {"containers": [{"name": c, "image": f"example.com/{c}:1"} for c in containers],
                     "terminationGracePeriodSeconds": 0}}


def log_files(name: str, namespace: str, files: dict[str, Path]) -> None:
    """The files that the pod's containers "log" (by container name), followed as they grow."""
    for path in files.values():
        path.touch()
    apply({"apiVersion": "kwok.x-k8s.io/v1alpha1", "kind": "Logs",
           "metadata": {"name": name, "namespace": namespace},
           "spec": {"logs": [{"containers": [container], "logsFile": str(path), "follow": True}
                             for container, path in files.items()]}})


def cri_line(text: str, at: datetime.datetime | None = None, stream: str = "stdout") -> str:
    """A line as a container runtime writes it to a container's log file (the CRI format)."""
    at = at or datetime.datetime.now(datetime.UTC)
    return f"{at.strftime('%Y-%m-%dT%H:%M:%S.%f')}000Z {stream} F {text}\n"


def write_lines(path: Path, *texts: str, at: datetime.datetime | None = None) -> None:
    with path.open("a") as file:
        file.writelines(cri_line(text, at) for text in texts)


def exit_with(name: str, namespace: str, code: int) -> None:
    kubectl("annotate", "pod", name, "-n", namespace, f"{EXIT_CODE}={code}", "--overwrite")


def restart(name: str, namespace: str, restarts: int) -> None:
    kubectl("annotate", "pod", name, "-n", namespace, f"{RESTARTS}={restarts}", "--overwrite")


def pod_status(name: str, namespace: str) -> dict[str, Any]:
    found = kubectl("get", "pod", name, "-n", namespace, "-o", "json", "--ignore-not-found")
    return json.loads(found).get("status", {}) if found.strip() else {}
