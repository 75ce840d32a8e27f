"""`kopf testing cluster up / env / status / down` and `kopf testing install`, as people run them:
a control plane that outlives the command, its shell lines on stdout, its progress on stderr,
and one clear error for a bad port, programs found nowhere, or no Go to build them with."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from kopf._operating.cluster import plane


def kopf(*args: str, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "kopf", *args], capture_output=True, text=True,
                          check=False, env={**os.environ, **env}, timeout=180)


def exported(lines: str) -> dict[str, str]:
    """The variables of `export NAME=value` lines, as a shell's eval would set them."""
    variables = {}
    for line in lines.splitlines():
        name, _, value = line.removeprefix("export ").partition("=")
        variables[name] = value.strip('"').replace("$PATH", os.environ["PATH"])
    return variables


def test_up_env_status_down(tmp_path: Path) -> None:
    home = {"KOPF_CLUSTER_HOME": str(tmp_path / "state"), "KOPF_CLUSTER_PORT": str(plane.free_port())}
    try:
        up = kopf("testing", "cluster", "up", **home)
        assert up.returncode == 0, up.stderr
        assert "The control plane is ready in" in up.stderr
        variables = exported(up.stdout)
        assert variables["KUBECONFIG"] == str(tmp_path / "state" / "kubeconfig")

        # The lines are all a shell needs: kubectl works with them.
        namespaces = subprocess.run(["kubectl", "get", "namespaces", "-o", "name"], capture_output=True,
                                    text=True, check=False, env={**os.environ, **variables})
        assert "namespace/default" in namespaces.stdout.splitlines(), namespaces.stderr

        assert kopf("testing", "cluster", "env", **home).stdout == up.stdout
        again = kopf("testing", "cluster", "up", **home)
        assert again.returncode == 0 and "The control plane is running already." in again.stderr

        status = kopf("testing", "cluster", "status", **home)
        assert status.returncode == 0, status.stdout
        assert [line.split()[:2] for line in status.stdout.splitlines()[:2]] == [
            ["etcd", "running,"], ["kube-apiserver", "running,"]]
        assert f"https://127.0.0.1:{home['KOPF_CLUSTER_PORT']} ready" in status.stdout

        # Other options restart it with them; `env` and `status` see what runs.
        more = kopf("testing", "cluster", "up", "--controller-manager", **home)
        assert more.returncode == 0, more.stderr
        assert "The control plane runs with other options: restarting it." in more.stderr
        status = kopf("testing", "cluster", "status", **home)
        assert "kube-controller-manager" in status.stdout and status.returncode == 0
    finally:
        down = kopf("testing", "cluster", "down", **home)
    assert re.fullmatch(r"Stopped kube-controller-manager \(pid \d+\), kube-apiserver \(pid \d+\), "
                        r"etcd \(pid \d+\)\.", down.stderr.strip()), down.stderr
    assert kopf("testing", "cluster", "status", **home).returncode == 3
    assert kopf("testing", "cluster", "down", **home).stderr.strip() == "Nothing was running."


@pytest.mark.parametrize("port", ["http", "80", "70000"])
def test_a_bad_port(tmp_path: Path, port: str) -> None:
    result = kopf("testing", "cluster", "up", KOPF_CLUSTER_HOME=str(tmp_path), KOPF_CLUSTER_PORT=port)
    assert result.returncode == 2
    assert f"KOPF_CLUSTER_PORT='{port}' is not a port number between 1025 and 65535." in result.stderr
    assert result.stdout == ""


def test_programs_found_nowhere(tmp_path: Path) -> None:
    env = {"KOPF_CLUSTER_HOME": str(tmp_path / "state"), "KOPF_CLUSTER_CACHE": str(tmp_path / "cache"),
           "KOPF_CLUSTER_PORT": str(plane.free_port())}
    result = subprocess.run([sys.executable, "-m", "kopf", "testing", "cluster", "up"], capture_output=True,
                            text=True, check=False, timeout=60,
                            env={k: v for k, v in {**os.environ, **env}.items() if k != "KUBEBUILDER_ASSETS"})
    assert result.returncode == 1
    assert "KUBEBUILDER_ASSETS" in result.stderr and "kopf testing install" in result.stderr
    assert result.stdout == ""
    assert not (tmp_path / "state" / "pids").exists() or not any((tmp_path / "state" / "pids").iterdir())


def test_install_without_go(tmp_path: Path) -> None:
    result = kopf("testing", "install", KOPF_CLUSTER_CACHE=str(tmp_path / "cache"), PATH=str(tmp_path / "empty"))
    assert result.returncode == 1
    assert "The Go toolchain is not on PATH" in result.stderr
    assert result.stdout == ""
