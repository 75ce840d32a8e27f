"""Where ``kopf testing install``'s one ``go build -o folder/`` puts each program, and that
``checks/cluster build`` runs with no wheel installed (CI builds the control plane beside it)."""

import subprocess
import sys
from pathlib import Path

import pytest
from kopf._operating.cluster import binaries

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize(("package", "name"), [
    ("go.etcd.io/etcd/server/v3", "server"),
    ("k8s.io/kubernetes/cmd/kube-apiserver", "kube-apiserver"),
    ("sigs.k8s.io/kwok/cmd/kwok", "kwok"),
    ("example.com/v2", "example.com"),
    ("tool", "tool"),
])
def test_the_built_file_is_named_as_go_names_it(package: str, name: str) -> None:
    assert binaries.built_name(package) == name


def test_every_program_is_renamed_from_a_distinct_file() -> None:
    for programs in binaries.MODULES.values():
        built = [binaries.built_name(package) for package in programs.values()]
        assert len(set(built)) == len(built)


def test_the_build_command_runs_without_the_package(tmp_path: Path) -> None:
    # No Go on PATH: the build stops at once with the module's own message, which proves that the
    # module was loaded from its file by a Python without kopf (-I: no site-packages, no cwd).
    result = subprocess.run(
        [sys.executable, "-I", str(ROOT / "checks/cluster"), "build"],
        env={"PATH": str(tmp_path), "KOPF_CLUSTER_CACHE": str(tmp_path / "cache"), "HOME": str(tmp_path)},
        capture_output=True, text=True, check=False,
    )
    assert result.returncode == 1, result.stderr
    assert "cluster: error: The Go toolchain is not on PATH" in result.stderr
