"""The corpus' operators charted: `kopf deploy generate` with the options of their RBAC (and their
declarations, if any), the chart linted by the real helm, and its objects as Helm renders them
for the run's namespace accepted by the API server (a server-side dry run: the Deployment, the
roles, the webhooks' Service and configurations). cert-manager's objects are left out of the dry
run: the compat plane runs no cert-manager (tests/engine/test_helm_charts.py installs them)."""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Callable
from pathlib import Path

import yaml

from .restricting import RULES


def check(*, venv: Path, args: list[str], namespace: str, workdir: Path, name: str,
          wrap: Callable[[list[str]], tuple[list[str], dict[str, str]]], env: dict[str, str]) -> list[str]:
    """The chart's objects, as the API server accepted them (kind/name); an AssertionError with
    the output of what failed."""
    helm = os.environ.get("KOPF_RS_HELM")
    assert helm, "$KOPF_RS_HELM names no helm (checks/run builds it)"
    folder = workdir / "chart"
    declared = RULES / f"{name}.py"
    command = [str(venv / "bin" / "kopf"), "deploy", "generate", *args,
               *([str(declared)] if declared.exists() else []), "--name", f"corpus-{name}",
               "--image", f"corpus.example/{name}:1", "--output", str(folder)]
    argv, extra = wrap(command)
    made = subprocess.run(argv, cwd=workdir, env={**env, **extra}, capture_output=True, text=True, check=False)
    assert made.returncode == 0, f"kopf deploy generate {' '.join(args)} failed:\n{made.stderr[-5000:]}"
    linted = subprocess.run([helm, "lint", str(folder)], capture_output=True, text=True, check=False)
    assert linted.returncode == 0, f"helm lint of {name}'s chart failed:\n{linted.stdout}{linted.stderr}"
    rendered = subprocess.run([helm, "template", f"corpus-{name}", str(folder), "--namespace", namespace],
                              capture_output=True, text=True, check=False)
    assert rendered.returncode == 0, f"helm template of {name}'s chart failed:\n{rendered.stderr}"
    objects = [doc for doc in yaml.safe_load_all(rendered.stdout)
               if doc and not str(doc.get("apiVersion", "")).startswith("cert-manager.io/")]
    applied = subprocess.run(["kubectl", "apply", "--dry-run=server", "-n", namespace, "-o", "name", "-f", "-"],
                             input=json.dumps({"apiVersion": "v1", "kind": "List", "items": objects}),
                             capture_output=True, text=True, check=False)
    assert applied.returncode == 0, f"the API server refused {name}'s chart:\n{applied.stderr}"
    return applied.stdout.split()
