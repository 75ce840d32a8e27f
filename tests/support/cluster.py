"""The project's control plane (checks/cluster) and what tests do with it: kubectl, objects applied,
the examples, the `kopf` command of the suite's virtualenv."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).parents[2]
CLUSTER = ROOT / "checks" / "cluster"
EXAMPLES = ROOT / "examples"


def kubectl(*args: str, input: str | None = None, check: bool = True) -> str:
    """Run kubectl against the test cluster; fail the test with its stderr if it fails."""
    result = subprocess.run(["kubectl", *args], input=input, capture_output=True, text=True, check=False)
    if check and result.returncode != 0:
        raise AssertionError(f"kubectl {' '.join(args)} failed: {result.stderr.strip()}")
    return result.stdout if check else result.stdout + result.stderr


def kubectl_json(*args: str) -> Any:
    return json.loads(kubectl(*args, "-o", "json"))


def apply(manifest: dict[str, Any] | list[dict[str, Any]]) -> None:
    items = manifest if isinstance(manifest, list) else [manifest]
    kubectl("apply", "-f", "-", input=json.dumps({"apiVersion": "v1", "kind": "List", "items": items}))


def kopf_cli(*args: str) -> subprocess.CompletedProcess[str]:
    kopf = Path(sys.executable).with_name("kopf")
    return subprocess.run([str(kopf), *args], capture_output=True, text=True, check=False, timeout=60)
