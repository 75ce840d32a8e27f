"""What a user installs: the manylinux2014 wheel that checks/setup builds (and this suite runs on),
the sdist with and without a Rust toolchain, the Docker image's install step, the release
workflow (the wheels built as the suite's are, the operator image, nothing else published)."""

from __future__ import annotations

import importlib.metadata
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).parents[2]
CACHE = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "kopf-rs"
WHEELS = CACHE / "wheels"


def run(*args: str | Path, env: dict[str, str] | None = None, cwd: Path | None = None,
        timeout: float = 600) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(arg) for arg in args], capture_output=True, text=True, check=False,
                          timeout=timeout, env=env, cwd=cwd)


def the_wheel() -> Path:
    wheels = list(WHEELS.glob("kopf_rs-*.whl"))
    assert len(wheels) == 1, f"checks/setup leaves one wheel in {WHEELS}: {wheels}"
    return wheels[0]


def fresh_venv(where: Path) -> Path:
    """A virtualenv of the interpreter the suite runs on, with nothing of ours in it."""
    result = run(getattr(sys, "_base_executable", sys.executable), "-m", "venv", where)
    assert result.returncode == 0, result.stderr
    return where / "bin"


def test_the_wheel_is_manylinux2014_and_is_the_one_installed_here() -> None:
    wheel = the_wheel()
    assert "-cp311-abi3-manylinux2014_x86_64." in wheel.name
    shown = run(Path(sys.executable).with_name("auditwheel"), "show", wheel)
    assert shown.returncode == 0, shown.stderr
    assert 'consistent with the following platform tag:\n"manylinux_2_17_x86_64"' in shown.stdout, shown.stdout
    with zipfile.ZipFile(wheel) as archive:
        engine = archive.getinfo("kopf/_engine.abi3.so")
        names = archive.namelist()
    assert "kopf/py.typed" in names and "kopf/_engine.pyi" in names
    print(f"{wheel.name}: {wheel.stat().st_size / 2**20:.1f} MiB, the engine {engine.file_size / 2**20:.1f} MiB "
          f"unpacked; auditwheel: manylinux_2_17_x86_64")
    # The suite's own `kopf` is that wheel, not a local build tagged for this machine's glibc.
    tags = importlib.metadata.distribution("kopf-rs").read_text("WHEEL") or ""
    assert "Tag: cp311-abi3-manylinux2014_x86_64" in tags, tags


@pytest.fixture(scope="module")
def sdist(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("sdist")
    result = run(Path(sys.executable).with_name("maturin"), "sdist", "--out", out, cwd=ROOT)
    assert result.returncode == 0, result.stderr
    (built,) = out.glob("kopf_rs-*.tar.gz")
    return built


def test_the_sdist_without_a_rust_toolchain_says_what_is_missing(sdist: Path, tmp_path: Path) -> None:
    bin = fresh_venv(tmp_path / "venv")
    no_rust = {"HOME": str(tmp_path), "PATH": f"{bin}:/usr/bin:/bin", "PIP_DISABLE_PIP_VERSION_CHECK": "1"}
    result = run(bin / "pip", "install", sdist, env=no_rust)
    assert result.returncode != 0
    output = result.stdout + result.stderr
    assert "building from the source distribution needs a Rust toolchain" in output, output
    assert "https://rustup.rs" in output


def test_the_sdist_builds_and_installs_with_a_rust_toolchain(sdist: Path, tmp_path: Path) -> None:
    bin = fresh_venv(tmp_path / "venv")
    # The Rust build's cache is shared with checks/setup's (the workspace's crates are built again).
    env = {**os.environ, "CARGO_TARGET_DIR": str(CACHE / "target"), "PIP_DISABLE_PIP_VERSION_CHECK": "1"}
    # The sdist's files all carry one fixed date (a reproducible archive), older than any build:
    # cargo would take the crate built from an earlier sdist as up to date with these sources.
    # Without their fingerprints (every `kopf-rs-*` crate of the workspace), they are built again
    # from the sdist's sources; the dependencies are still reused.
    for fingerprint in (CACHE / "target" / "release" / ".fingerprint").glob("kopf-rs-*"):
        shutil.rmtree(fingerprint)
    env.pop("VIRTUAL_ENV", None)
    result = run(bin / "pip", "install", sdist, env=env, cwd=tmp_path, timeout=1800)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    version = run(bin / "kopf", "--version", cwd=tmp_path)
    assert version.returncode == 0 and "kopf-rs" in version.stdout, version.stdout + version.stderr
    imports = "import kopf, kopf._engine, skafos.stream_watch; print(kopf.__file__)"
    imported = run(bin / "python", "-c", imports, cwd=tmp_path)
    assert imported.returncode == 0 and str(tmp_path / "venv") in imported.stdout, imported.stderr


def test_the_docker_images_install_step_in_a_fresh_virtualenv(tmp_path: Path) -> None:
    """The image's install script, as the image runs it, in a plain virtualenv (the image itself is
    built and run by tests/image/test_image.py)."""
    dockerfile = (ROOT / "docker" / "Dockerfile").read_text()
    assert "RUN sh /tmp/install.sh /tmp/wheels" in dockerfile and "cargo" not in dockerfile
    bin = fresh_venv(tmp_path / "venv")
    wheels = tmp_path / "dist"
    wheels.mkdir()
    shutil.copy(the_wheel(), wheels)
    env = {"HOME": str(tmp_path), "PATH": f"{bin}:/usr/bin:/bin"}
    result = run("sh", ROOT / "docker" / "install.sh", wheels, env=env, cwd=tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "kopf-rs" in result.stdout  # `kopf --version` of the installed engine
    handlers = tmp_path / "handlers.py"
    handlers.write_text("import kopf\n\n@kopf.on.create('kopfexamples')\ndef create_fn(**_):\n    pass\n")
    loaded = run(bin / "python", "-c", "import kopf, runpy; runpy.run_path('handlers.py');"
                 "print(len(kopf.get_default_registry()._changing))", env=env, cwd=tmp_path)
    assert loaded.returncode == 0 and loaded.stdout.strip() == "1", loaded.stdout + loaded.stderr

    empty = tmp_path / "empty"
    empty.mkdir()
    refused = run("sh", ROOT / "docker" / "install.sh", empty, env=env, cwd=tmp_path)
    assert refused.returncode == 1 and "expected one kopf_rs-" in refused.stderr


def test_the_release_workflow_builds_every_platform_and_lints_clean() -> None:
    workflow = ROOT / ".github" / "workflows" / "release.yml"
    jobs = yaml.safe_load(workflow.read_text())["jobs"]
    # The wheels the suite runs (x86_64 here, aarch64 under emulation: tests/image/test_arm64.py),
    # built with the options of checks/setup and checks/arm64; nothing else is published.
    assert set(jobs["linux"]["strategy"]["matrix"]["target"]) == {"x86_64", "aarch64"}
    build = next(step["run"] for step in jobs["linux"]["steps"] if "maturin build" in step.get("run", ""))
    options = " ".join(build.replace("\\\n", " ").split())
    for option in ("--release", "--locked", "--zig", "--compatibility manylinux2014"):
        assert option in options, f"the release's wheels are not built with {option}: {options}"
        for script in ("checks/setup", "checks/arm64"):
            assert option in (ROOT / script).read_text(), f"{script} does not build with {option}"
    assert set(jobs) == {"linux", "sdist", "image", "publish"}, "a job that publishes what the suite does not run"
    assert jobs["publish"]["needs"] == ["linux", "sdist"]
    # The operator image, for both Linux architectures, from the manylinux2014 wheels.
    build = next(step for step in jobs["image"]["steps"] if step.get("uses", "").startswith("docker/build-push-"))
    assert build["with"]["file"] == "docker/Dockerfile" and build["with"]["platforms"] == "linux/amd64,linux/arm64"
    assert jobs["image"]["needs"] == ["linux"]
    actionlint = os.environ.get("KOPF_RS_ACTIONLINT") or shutil.which("actionlint")
    if not actionlint:
        pytest.fail("actionlint is not installed: checks/run installs it (with Go) and sets KOPF_RS_ACTIONLINT")
    linted = run(actionlint, workflow, cwd=ROOT)
    assert linted.returncode == 0, linted.stdout + linted.stderr
