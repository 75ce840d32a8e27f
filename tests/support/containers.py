"""Containers run with podman as the tests run them: the commands, `podman run`'s options that this
machine needs, a container as an operator's process; and the examples' Greeting."""

from __future__ import annotations

import json
import resource
import shutil
import subprocess
from pathlib import Path

from support.operators import OperatorProcess


def podman(*args: str | Path, timeout: float = 600) -> str:
    """Run podman; its stdout, or the test fails with its output."""
    result = subprocess.run(["podman", *map(str, args)], capture_output=True, text=True, check=False,
                            timeout=timeout)
    command = " ".join(map(str, args))
    assert result.returncode == 0, f"podman {command} failed:\n{result.stdout[-3000:]}{result.stderr[-3000:]}"
    return result.stdout


def run_options(name: str) -> list[str]:
    """`podman run`'s options that this machine needs: crun refuses the cgroup layout here (runc
    does not), and podman's default rlimits cannot be set without CAP_SYS_RESOURCE (nor can
    this process's own limits): modest ones below them are."""
    limits = {kind: min(4096, resource.getrlimit(number)[0])
              for kind, number in {"nofile": resource.RLIMIT_NOFILE, "nproc": resource.RLIMIT_NPROC}.items()}
    # `--replace`: a container of that name left running by a run that was killed (podman's
    # process gone, the container not) refused every later run ("already in use").
    return ["--rm", "--replace", "--name", name, "--pull", "never", "--runtime", "runc", "--network", "host",
            *(option for kind, value in limits.items() for option in ("--ulimit", f"{kind}={value}:{value}"))]


def container_process(tmp_path: Path, options: list[str], image: str, args: list[str]) -> OperatorProcess:
    """`podman run` as the operator's process: its output is the container's, SIGTERM goes on to
    the container (podman's signal proxy), and its exit code is the container's."""
    return OperatorProcess(["run", *options, image, *args], cwd=tmp_path, kopf=Path(shutil.which("podman") or "podman"))


def greeting(name: str, namespace: str, who: str) -> str:
    """The examples' Greeting, as JSON for `kubectl apply`."""
    return json.dumps({"apiVersion": "demo.kopf.dev/v1", "kind": "Greeting",
                       "metadata": {"name": name, "namespace": namespace}, "spec": {"who": who}})
