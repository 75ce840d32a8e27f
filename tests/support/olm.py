"""operator-framework's validator of OLM bundles (`operator-verify manifests`, built by checks/run from
the Go module proxy), for the tests that compare our bundles and checks with it."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest


def operator_verify(bundle: Path, *flags: str) -> list[str]:
    """What the validator says of the bundle, as its log lines (errors, warnings, a fatal one)."""
    tool = os.environ.get("KOPF_RS_OPERATOR_VERIFY") or shutil.which("operator-verify")
    if not tool:
        pytest.fail("operator-verify is not installed: checks/run builds it (with Go) and sets KOPF_RS_OPERATOR_VERIFY")
    result = subprocess.run([tool, "manifests", str(bundle), *flags], capture_output=True, text=True, timeout=60,
                            check=False)
    lines = [line for line in result.stderr.splitlines() if "level=" in line]
    assert result.returncode == 0 or any("level=fatal" in line for line in lines), result.stderr
    return lines


def failures(lines: list[str]) -> list[str]:
    return [line for line in lines if "level=error" in line or "level=fatal" in line]
