"""Which Kopf this engine follows, as operators and users ask it (no cluster needed)."""

from __future__ import annotations

import importlib.metadata

import kopf
from support.cluster import kopf_cli


def test_the_kopf_version_is_the_one_followed() -> None:
    assert kopf.__version__ == "1.45.2"


def test_the_command_names_both_versions() -> None:
    result = kopf_cli("--version")
    assert result.returncode == 0
    own = importlib.metadata.version("kopf-rs")
    assert result.stdout.strip() == f"kopf, version {own} (kopf-rs; compatible with Kopf 1.45.2)"
