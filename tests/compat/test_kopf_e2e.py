"""Kopf 1.45.2's own end-to-end test of its examples (`tests/e2e/test_examples.py` from its
sdist), run unchanged on our engine with our fixtures (`kopf_e2e_conftest.py`): every example
without a missing feature passes it; those with one are expected to fail (strictly)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import xml.etree.ElementTree as ElementTree
from pathlib import Path

HERE = Path(__file__).parent


def test_kopfs_own_e2e_test_of_its_examples(kopf_source: Path, example_crd: None, tmp_path: Path) -> None:
    suite = tmp_path / "kopf-e2e"
    suite.mkdir()
    shutil.copy(kopf_source / "tests" / "e2e" / "test_examples.py", suite / "test_examples.py")
    shutil.copy(HERE / "kopf_e2e_conftest.py", suite / "conftest.py")
    (suite / "pytest.ini").write_text("[pytest]\n")  # not the sdist's configuration
    report = tmp_path / "report.xml"
    result = subprocess.run(
        # -P: the sdist's root (the working directory) holds Kopf's own `kopf/`: never import it.
        [sys.executable, "-P", "-m", "pytest", str(suite), "-c", str(suite / "pytest.ini"), "--rootdir", str(suite),
         "-p", "no:cacheprovider", "-q", f"--junitxml={report}"],
        cwd=kopf_source, capture_output=True, text=True, env={**os.environ, "PYTHONPATH": str(suite)},
    )
    assert report.exists(), result.stdout[-5000:] + result.stderr[-2000:]
    cases = ElementTree.parse(report).getroot().iter("testcase")
    outcomes = {}
    for case in cases:
        name = case.get("name", "").split("[")[-1].rstrip("]")
        kind = next((child.tag for child in case if child.tag in {"failure", "error", "skipped"}), "passed")
        outcomes[name] = (kind, float(case.get("time", 0)))
    print("\nKopf's e2e test on our engine (seconds): "
          + ", ".join(f"{name} {kind} {time:.1f}" for name, (kind, time) in sorted(outcomes.items())))
    assert result.returncode == 0, result.stdout[-5000:] + result.stderr[-2000:]
    assert {name: kind for name, (kind, _) in outcomes.items() if kind != "passed"} == {}
    assert len(outcomes) == 14
