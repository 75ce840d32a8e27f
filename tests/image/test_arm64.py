"""arm64 as users on arm64 nodes get it, run under emulation here (qemu-user through binfmt_misc,
set up by checks/arm64) against the project's control plane:

- the manylinux2014 aarch64 wheel, cross-compiled with zig as the release's options build it,
  installed with pip into the Python of an arm64 Debian (the arm64 stand-in of `python:3.11-slim`,
  checks/image-standin --arch arm64): it imports and its `kopf` runs;
- the image of `docker/Dockerfile` built for linux/arm64 on that base, running mounted handlers as
  a pod would: a Greeting created, updated and deleted (its finalizer released), a timer ticking,
  exit code 0 on SIGTERM.

One scenario only: emulated, everything takes several times as long. The wheels' sizes and the
scenario's time and CPU are printed (information, not asserted).
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from support.cluster import kubectl
from support.containers import container_process, greeting, podman, run_options
from support.operators import eventually, get

ROOT = Path(__file__).parents[2]
CACHE = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "kopf-rs"
GREETER = ROOT / "examples" / "greeter" / "operator.py"
GRACE = 30  # Kubernetes' default terminationGracePeriodSeconds
TICKING = '''

@kopf.timer('demo.kopf.dev', 'greetings', interval=1)
def tick(status, patch, **_):
    patch.status['ticks'] = (status.get('ticks') or 0) + 1
'''


@pytest.fixture(scope="module")
def arm64() -> tuple[Path, str]:
    """The aarch64 wheel and the arm64 stand-in base; waits for checks/run's background build,
    or does it now."""
    result = subprocess.run([str(ROOT / "checks" / "arm64")], capture_output=True, text=True, check=False,
                            timeout=3600)
    if result.returncode != 0:
        pytest.fail(f"checks/arm64 failed:\n{result.stderr[-3000:]}", pytrace=False)
    wheel, base = result.stdout.split()
    (x86_64,) = (CACHE / "wheels").glob("kopf_rs-*-manylinux2014_x86_64*.whl")
    print(f"\nwheels: aarch64 {Path(wheel).stat().st_size / 1e6:.2f} MB, "
          f"x86_64 {x86_64.stat().st_size / 1e6:.2f} MB")
    return Path(wheel), base


def test_the_aarch64_wheel_installs_and_runs_in_an_arm64_python(arm64: tuple[Path, str]) -> None:
    wheel, base = arm64
    script = (f"python3 -c 'import platform; print(platform.machine())' && python3 -m venv /tmp/venv"
              f" && /tmp/venv/bin/pip install --quiet --disable-pip-version-check /wheels/{wheel.name}"
              f" && /tmp/venv/bin/kopf --version && /tmp/venv/bin/python -c 'import kopf._engine, skafos'")
    output = podman("run", *run_options("arm64-wheel"), "--platform", "linux/arm64",
                    "-v", f"{wheel.parent}:/wheels:ro", base, "sh", "-c", script, timeout=900)
    machine, version = output.split("\n")[:2]
    assert machine == "aarch64", output
    assert "kopf-rs" in version, output


@pytest.fixture(scope="module")
def image(arm64: tuple[Path, str], tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """docker/Dockerfile built for linux/arm64 on the arm64 stand-in (`--from` replaces only the
    Dockerfile's `FROM python:...-slim`), with the aarch64 wheel as users' builds get it."""
    wheel, base = arm64
    context = tmp_path_factory.mktemp("context-arm64")
    shutil.copytree(ROOT / "docker", context / "docker")
    (context / "dist").mkdir()
    shutil.copy(wheel, context / "dist")
    name = "localhost/kopf-rs-test:arm64"
    podman("build", "--platform", "linux/arm64", "--isolation", "chroot", "--layers=false", "--from", base,
           "-f", context / "docker" / "Dockerfile", "-t", name, context, timeout=1800)
    assert podman("image", "inspect", "--format", "{{.Architecture}}", name).strip() == "arm64"
    yield name
    subprocess.run(["podman", "rmi", "-f", name], capture_output=True, check=False)


def cpu_seconds(pid: int) -> float:
    """The process's CPU time so far (user and system, all its threads), as the host sees it."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def test_the_arm64_image_handles_a_greetings_life_under_emulation(
        image: str, crd: None, namespace: str, tmp_path: Path) -> None:
    kubeconfig = tmp_path / "kubeconfig"
    shutil.copy(os.environ["KUBECONFIG"], kubeconfig)
    kubeconfig.chmod(0o644)  # the image's user (uid 1000) reads it
    handlers = tmp_path / "handlers.py"
    handlers.write_text(GREETER.read_text() + TICKING)
    handlers.chmod(0o644)
    name = f"arm64-{namespace}"
    options = [*run_options(name), "--platform", "linux/arm64", "-e", "KUBECONFIG=/kube/config",
               "-v", f"{kubeconfig}:/kube/config:ro", "-v", f"{handlers}:/operator/handlers.py:ro"]
    started = time.monotonic()
    operator = container_process(tmp_path, options, image, ["--namespace", namespace, "--standalone",
                                                           "/operator/handlers.py"])
    cpu = 0.0
    try:
        pid = int(eventually(lambda: podman("inspect", "--format", "{{.State.Pid}}", name).strip() or None,
                             timeout=120, what="the container started"))
        assert podman("exec", name, "uname", "-m").strip() == "aarch64"
        kubectl("apply", "-f", "-", input=greeting("arm", namespace, "arm64"))
        status = eventually(lambda: get("greeting", "arm", namespace).get("status", {}).get("greet"),
                            timeout=180, what="the creation handled")
        assert status == {"message": "Hello, arm64!"}
        kubectl("apply", "-f", "-", input=greeting("arm", namespace, "aarch64"))
        status = eventually(lambda: get("greeting", "arm", namespace).get("status", {}).get("regreet/spec.who"),
                            timeout=120, what="the update handled")
        assert status == {"message": "Hello again, aarch64!"}
        eventually(lambda: (get("greeting", "arm", namespace).get("status", {}).get("ticks") or 0) >= 3,
                   timeout=120, what="the timer ticking")
        kubectl("delete", "greeting", "arm", "-n", namespace, "--timeout=120s")  # the finalizer let go
        operator.wait_for(r"Goodbye, arm\.", timeout=60)
        cpu = cpu_seconds(pid)
    finally:
        code = operator.stop(signal.SIGTERM, timeout=GRACE)
        subprocess.run(["podman", "rm", "-f", name], capture_output=True, check=False)
    output = operator.output
    assert code == 0, output
    assert "Signal SIGTERM is received. Operator is stopping." in output, output
    assert "Traceback" not in output, output
    print(f"\nthe arm64 scenario under emulation: {time.monotonic() - started:.1f} s, "
          f"the operator's CPU {cpu:.1f} s")
