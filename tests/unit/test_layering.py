"""The Python package's floor plan as checks/layering.py enforces it: a group imports only the
groups below it in docs/architecture.md's table, and nothing of the package outside the groups."""

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def layering() -> ModuleType:
    spec = importlib.util.spec_from_file_location("layering", ROOT / "checks" / "layering.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["layering"] = module
    spec.loader.exec_module(module)
    return module


GROUPS = ["_running", "_handling", "_structures", "_bridge"]  # top-down


def test_imports_down_the_table_pass(layering: ModuleType) -> None:
    graph = {
        "kopf._running.calls": {"kopf._handling.handlers", "kopf._bridge.services", "kopf._running.stopping"},
        "kopf._handling.handlers": {"kopf._structures.settings"},
        "kopf._bridge.services": {"kopf._engine"},
        "kopf.on": {"kopf._running.calls"},  # the top row imports any
        "kopf._cogs.configs": {"kopf._structures.settings"},
    }
    assert list(layering.python_group_violations(graph, GROUPS)) == []


def test_an_import_up_the_table_is_named(layering: ModuleType) -> None:
    graph = {"kopf._structures.settings": {"kopf._handling.progress", "kopf._bridge.protocol"}}
    assert list(layering.python_group_violations(graph, GROUPS)) == [
        "kopf._structures.settings imports kopf._handling.progress, of a group above its own in "
        "docs/architecture.md's table",
    ]


def test_a_group_importing_the_public_modules_is_named(layering: ModuleType) -> None:
    graph = {"kopf._handling.callbacks": {"kopf", "kopf._engine"}}
    assert list(layering.python_group_violations(graph, GROUPS)) == [
        "kopf._handling.callbacks imports kopf, which is in no group (the top row of the groups' table)",
    ]


def test_the_table_lists_every_group_top_down(layering: ModuleType) -> None:
    groups = layering.python_groups()
    assert groups[-1] == "_bridge" and groups[0] == "_operating"
    assert sorted(groups) == sorted(
        path.parent.name for path in (ROOT / "python" / "kopf").glob("_*/__init__.py")
        if path.parent.name not in ("_cogs", "_core", "_kits")
    )
