"""Our fixtures for Kopf 1.45.2's own `tests/e2e/test_examples.py`, which runs here unchanged
(copied from the sdist next to this file; the working directory is the sdist's root, as the
test's relative paths want). Kopf's own root conftest is not used: it needs Kopf's test tools."""

from __future__ import annotations

import glob
import os
import pathlib
import subprocess
from collections.abc import Iterator

import kopf
import pytest
from kopf._core.intents.registries import SmartOperatorRegistry

# The sdist's root (the working directory) holds Kopf's own sources: they must not be what runs.
assert not pathlib.Path(kopf.__file__).resolve().is_relative_to(pathlib.Path.cwd().resolve()), kopf.__file__
assert hasattr(kopf, "_engine"), "this is not the engine under test"

# Examples of features this engine does not have yet: expected to fail, strictly.
MISSING: dict[str, str] = {}

examples = sorted(glob.glob("examples/*/"))
assert examples, "run from the root of Kopf's sdist"
examples = [path for path in examples if not glob.glob(os.path.join(path, "test*.py"))]


@pytest.fixture(params=examples, ids=[os.path.basename(path.rstrip("/")) for path in examples])
def exampledir(request: pytest.FixtureRequest) -> pathlib.Path:
    name = os.path.basename(request.param.rstrip("/"))
    if name in MISSING:
        request.applymarker(pytest.mark.xfail(reason=f"needs {MISSING[name]}", strict=True))
    return pathlib.Path(request.param)


@pytest.fixture()
def settings() -> kopf.OperatorSettings:
    return kopf.OperatorSettings()


@pytest.fixture()
def with_crd() -> None:
    subprocess.run("kubectl apply -f examples/crd.yaml", shell=True, check=True, timeout=10, capture_output=True)


@pytest.fixture(autouse=True)
def fresh_registry() -> Iterator[None]:
    """Each example registers its handlers into a registry of its own (Kopf's tests get this
    from a process per test run; here all examples run in one process)."""
    previous = kopf.get_default_registry()
    kopf.set_default_registry(SmartOperatorRegistry())
    try:
        yield
    finally:
        kopf.set_default_registry(previous)
