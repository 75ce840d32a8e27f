"""Kopf 1.45.2's examples that come with tests of their own (09, 10, 11) run those tests
unchanged against our package; 12 (an operator embedded in an application's thread, whose
own test file is empty on purpose) runs its `main()` and is checked by what it prints."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from support.cluster import kubectl

FINALIZER = "kopf.zalando.org/KopfFinalizerMarker"


def examples_copy(kopf_source: Path, tmp_path: Path) -> Path:
    """The examples outside the sdist's root, whose `kopf/` must never be imported."""
    copy = tmp_path / "examples"
    shutil.copytree(kopf_source / "examples", copy)
    return copy


def release_pods() -> None:
    """Example 10 serves every pod in the cluster (with a deletion handler, so a finalizer):
    take ours off the pods that outlive it, as a user would after trying it."""
    pods = json.loads(kubectl("get", "pods", "-A", "-o", "json"))["items"]
    for pod in pods:
        finalizers = pod["metadata"].get("finalizers", [])
        if FINALIZER in finalizers:
            kept = [f for f in finalizers if f != FINALIZER]
            kubectl("patch", "pod", pod["metadata"]["name"], "-n", pod["metadata"]["namespace"],
                    "--type=merge", "-p", json.dumps({"metadata": {"finalizers": kept or None}}), check=False)


@pytest.mark.parametrize("example", ["09-testing", "10-builtins", "11-filtering-handlers"])
def test_an_examples_own_test(kopf_source: Path, example_crd: None, tmp_path: Path, example: str) -> None:
    examples = examples_copy(kopf_source, tmp_path)
    try:
        result = subprocess.run(
            [sys.executable, "-m", "pytest", str(examples / example), "-q", "-p", "no:cacheprovider",
             "--rootdir", str(examples / example), "-c", os.devnull],
            cwd=examples / example, capture_output=True, text=True, timeout=300,
        )
    finally:
        if example == "10-builtins":
            release_pods()
    print(result.stdout[-3000:])
    assert result.returncode == 0, result.stdout[-5000:] + result.stderr[-2000:]
    assert " passed" in result.stdout and " failed" not in result.stdout


def test_the_embedded_operator_example(kopf_source: Path, example_crd: None, tmp_path: Path) -> None:
    examples = examples_copy(kopf_source, tmp_path)
    result = subprocess.run(
        [sys.executable, "-c", "import example; example.main(steps=2)"],
        cwd=examples / "12-embedded", capture_output=True, text=True, timeout=120,
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    lines = result.stdout.splitlines()
    for step in (0, 1):
        assert f"Hello, kopf-example-{step}!" in lines
        assert f"Good bye, kopf-example-{step}!" in lines
    assert lines[0] == "Starting the main app." and lines[-1] == "Exiting the main app."
    assert "Traceback" not in result.stderr
