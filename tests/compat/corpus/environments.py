"""Virtualenvs of the corpus' operators: one with PyPI's Kopf, one with our wheel, both
from the operator's pinned requirements; cached outside the repository, keyed by the pins."""

from __future__ import annotations

import fcntl
import hashlib
import os
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

HERE = Path(__file__).parent
KOPF_PIN = HERE / "kopf.txt"
CACHE = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "kopf-rs" / "corpus"

ENGINES = ("kopf", "ours")


class EnvironmentError_(Exception):
    """An environment could not be made: the install command and its output."""


def our_wheel() -> Path:
    """The wheel that checks/setup built and installed into the suite's own virtualenv."""
    wheels = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "kopf-rs" / "wheels"
    found = sorted(wheels.glob("kopf_rs-*.whl"))
    if not found:
        raise EnvironmentError_(f"no wheel in {wheels}: run checks/setup first")
    return found[-1]


def _install(venv: Path, *args: str) -> None:
    """``uv pip install`` into the virtualenv (uv from checks/requirements.txt, beside the suite's
    Python): the same packages as pip's. The 20 environments took 9 minutes of CPU with pip, which
    compiles every module of every package, and take 2 with uv (mostly ``venv`` itself); Python
    compiles what an operator imports, when it does."""
    uv = Path(sys.executable).with_name("uv")
    result = subprocess.run([str(uv), "pip", "install", "--quiet", "--python", str(venv / "bin" / "python"), *args],
                            capture_output=True, text=True, check=False)
    if result.returncode != 0:
        raise EnvironmentError_(f"uv pip install {' '.join(args)} in {venv} failed:\n{result.stdout}\n{result.stderr}")


def environment(name: str, engine: str) -> Path:
    """The virtualenv of operator `name` on `engine` ("kopf" or "ours"), made if absent.

    The requirements are a complete freeze (every package pinned) installed without
    dependencies, so that an operator's own pin of Kopf can never bring PyPI's Kopf in
    beside ours; then the engine: Kopf by ``kopf.txt``, or our wheel (reinstalled on every
    call: it changes between runs while the pins do not)."""
    requirements = HERE / "requirements" / f"{name}.txt"
    pins = requirements.read_bytes() + (KOPF_PIN.read_bytes() if engine == "kopf" else b"ours")
    key = hashlib.sha256(pins + sys.version.encode()).hexdigest()[:12]
    venv = CACHE / f"{name}-{engine}-{key}"
    CACHE.mkdir(parents=True, exist_ok=True)
    with open(CACHE / f".{name}-{engine}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        stamp = venv / ".complete"
        if not stamp.exists():
            for stale in CACHE.glob(f"{name}-{engine}-*"):
                shutil.rmtree(stale, ignore_errors=True)
            # (Made by the standard library, with its pip and setuptools, as an operator's own
            # virtualenv would be: only the installs go through uv.)
            subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, capture_output=True)
            _install(venv, "--no-deps", "-r", str(requirements))
            if engine == "kopf":
                _install(venv, "--no-deps", "-r", str(KOPF_PIN))
            stamp.touch()
        if engine == "ours":
            _install(venv, "--no-deps", "--reinstall", str(our_wheel()))
    return venv


def sdist(requirement: str) -> Path:
    """An operator's source distribution from PyPI (its CRDs and examples), unpacked once."""
    name, _, version = requirement.partition("==")
    wanted = f"{name}-{version}".replace("-", "_").lower()
    root = CACHE / "sdists"
    root.mkdir(parents=True, exist_ok=True)

    def unpacked() -> Path | None:
        return next((path for path in root.iterdir()
                     if path.is_dir() and path.name.replace("-", "_").lower() == wanted), None)

    with open(root / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if (found := unpacked()) is not None:
            return found
        subprocess.run([sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", "--no-binary", ":all:",
                        "--disable-pip-version-check", "-d", str(root), requirement], check=True, capture_output=True)
        for archive in root.glob("*.tar.gz"):
            with tarfile.open(archive) as tar:
                tar.extractall(root, filter="data")
            archive.unlink()
        if (found := unpacked()) is None:
            raise EnvironmentError_(f"the sdist of {requirement} did not unpack into {root}/{wanted}")
        return found


def prepare_all() -> None:
    """Every operator's two environments, made side by side (checks/run starts this early, in
    the background: the tests wait for each on its lock)."""
    import concurrent.futures

    names = sorted(path.stem for path in (HERE / "requirements").glob("*.txt"))
    with concurrent.futures.ThreadPoolExecutor(max_workers=4) as pool:
        futures = {pool.submit(environment, name, engine): (name, engine) for name in names for engine in ENGINES}
        for future in concurrent.futures.as_completed(futures):
            name, engine = futures[future]
            try:
                print(f"corpus: {name} on {engine}: {future.result()}", flush=True)
            except Exception as e:  # the test that needs it fails with the same error, in its place
                print(f"corpus: {name} on {engine} failed: {e}", flush=True)


if __name__ == "__main__":
    prepare_all()
