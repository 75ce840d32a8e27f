"""Types for type checkers: `mypy --strict` over Kopf 1.45.2's own examples (from its sdist),
once against our installed package and once against PyPI's Kopf 1.45.2 in its own virtualenv.
Ours may report no more errors than Kopf's. Both counts are printed.

The examples import third-party clients (pykube, yaml) that the two virtualenvs have or lack
differently; those import errors say nothing of either engine and are left out of both counts.
Everything else counts: a wrong or missing type of ours, a `# type: ignore` of the examples
that our looser types left unused, and `kopf` itself not being seen as typed."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

# An import error about a module that is not `kopf` (nor one of its submodules).
THIRD_PARTY_IMPORT = re.compile(r'error: .*(module named|analyzing|stubs not installed for) "(?!kopf\b)[\w.]+"')


def mypy_errors(examples: Path, python: Path) -> list[str]:
    result = subprocess.run(
        [sys.executable, "-m", "mypy", "--strict", "--no-incremental", "--python-executable", str(python),
         "--no-error-summary", "."],
        cwd=examples, capture_output=True, text=True, check=False, timeout=300,
    )
    lines = [line for line in result.stdout.splitlines() if ": error: " in line]
    assert result.returncode in (0, 1), result.stdout + result.stderr  # 2: mypy itself failed
    return [line for line in lines if not THIRD_PARTY_IMPORT.search(line)]


@pytest.fixture(scope="module")
def examples(kopf_source: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Kopf's examples side by side (each is `example.py` in its folder: one module name)."""
    folder = tmp_path_factory.mktemp("kopf-examples")
    for script in sorted((kopf_source / "examples").glob("*/example.py")):
        shutil.copy(script, folder / f"example_{script.parent.name.replace('-', '_')}.py")
    assert len(list(folder.iterdir())) >= 15
    return folder


def test_kopfs_examples_type_check_as_well_as_with_kopf(examples: Path, reference_kopf: Path) -> None:
    ours = mypy_errors(examples, Path(sys.executable))
    theirs = mypy_errors(examples, reference_kopf.with_name("python"))
    print(f"mypy --strict over {len(list(examples.iterdir()))} of Kopf 1.45.2's examples: "
          f"{len(ours)} errors with ours, {len(theirs)} with Kopf 1.45.2 (third-party imports left out)")
    for line in ours:
        print("  ours:", line)
    for line in theirs:
        print("  Kopf:", line)
    assert len(ours) <= len(theirs), "\n".join(ours)


def test_a_mistyped_handler_is_reported_as_kopf_reports_it(tmp_path: Path) -> None:
    """The decorators check the function against what its calls give (and keep its type)."""
    (tmp_path / "handlers.py").write_text(
        "from typing import Any\n"
        "import kopf\n\n"
        "@kopf.on.create('kopfexamples')\n"
        "def needs_more(spec: kopf.Spec, extra: int, **_: Any) -> None: ...\n\n"
        "@kopf.timer('kopfexamples', interval=1)\n"
        "def fine(spec: kopf.Spec, logger: kopf.Logger, **_: Any) -> str:\n"
        "    return 'x'\n\n"
        "reveal_type(fine)\n"
    )
    result = subprocess.run([sys.executable, "-m", "mypy", "--strict", "--no-incremental", "handlers.py"],
                            cwd=tmp_path, capture_output=True, text=True, check=False, timeout=300)
    errors = [line for line in result.stdout.splitlines() if ": error: " in line]
    assert len(errors) == 1 and "handlers.py:4:" in errors[0] and "needs_more" in errors[0], result.stdout
    assert re.search(r'Revealed type is "def \(spec: .*Spec, logger: .*, \*\*_: Any\) -> (builtins\.)?str"',
                     result.stdout), result.stdout
