"""`kopf testing install --download`: envtest's release found in an index of releases, checked by
its SHA-512, its three programs put in the cache, and a control plane started from them alone.

No network here: the index and the archive are local files (``file:`` addresses, as a company's
mirror could be), laid out as controller-tools publishes them; the programs are the built ones."""

from __future__ import annotations

import hashlib
import io
import os
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest
import yaml
from kopf._operating.cluster import binaries
from kopf.testing import KopfCluster


def release(tmp_path: Path, version: str, programs: dict[str, bytes | Path], *, digest: str | None = None) -> str:
    """An archive as controller-tools makes it (controller-tools/envtest/<program>), and an index
    listing it (with an older release besides); the index's address."""
    archive = tmp_path / f"envtest-{version}-{binaries.this_platform()}.tar.gz"
    with tarfile.open(archive, "w") as tar:  # (uncompressed: the reader does not mind, and it is fast)
        for name, content in programs.items():
            if isinstance(content, Path):
                tar.add(content.resolve(), arcname=f"controller-tools/envtest/{name}")
            else:
                info = tarfile.TarInfo(f"controller-tools/envtest/{name}")
                info.size, info.mode = len(content), 0o755
                tar.addfile(info, io.BytesIO(content))
    sha512 = digest or hashlib.sha512(archive.read_bytes()).hexdigest()
    index = {"releases": {
        version: {archive.name: {"hash": sha512, "selfLink": archive.as_uri()}},
        "v1.20.0": {f"envtest-v1.20.0-{binaries.this_platform()}.tar.gz": {
            "hash": "0" * 128, "selfLink": (tmp_path / "never-fetched.tar.gz").as_uri()}},
    }}
    (tmp_path / "index.yaml").write_text(yaml.safe_dump(index))
    return (tmp_path / "index.yaml").as_uri()


def install(*args: str, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "kopf", "testing", "install", "--download", *args],
                          capture_output=True, text=True, check=False, timeout=300, env={**os.environ, **env})


def test_a_control_plane_of_downloaded_programs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    built = binaries.find(binaries.ENVTEST)
    index = release(tmp_path, "v1.36.3", dict(built))
    cache = tmp_path / "cache"
    result = install(KOPF_ENVTEST_INDEX=index, KOPF_CLUSTER_CACHE=str(cache))
    assert result.returncode == 0, result.stderr
    folder = cache / f"envtest-v1.36.3-{binaries.this_platform()}" / "bin"
    assert result.stdout.strip() == str(folder)
    assert sorted(path.name for path in folder.iterdir()) == sorted(binaries.ENVTEST)

    # Nothing else in the cache, no KUBEBUILDER_ASSETS: the control plane runs on the download.
    monkeypatch.setenv("KOPF_CLUSTER_CACHE", str(cache))
    monkeypatch.delenv("KUBEBUILDER_ASSETS", raising=False)
    assert binaries.find(["kube-apiserver"])["kube-apiserver"] == folder / "kube-apiserver"
    with KopfCluster() as cluster:
        assert "namespace/default" in cluster.kubectl("get", "namespaces", "-o", "name").split()

    again = install(KOPF_ENVTEST_INDEX=index, KOPF_CLUSTER_CACHE=str(cache))
    assert again.returncode == 0 and "is in the cache already" in again.stderr


def test_an_archive_that_does_not_match_its_checksum(tmp_path: Path) -> None:
    programs = {name: b"#!/bin/sh\n" for name in binaries.ENVTEST}
    index = release(tmp_path, "v1.36.3", programs, digest="ab" * 64)
    result = install(KOPF_ENVTEST_INDEX=index, KOPF_CLUSTER_CACHE=str(tmp_path / "cache"))
    assert result.returncode == 1
    assert "does not match its SHA-512 in the index (expected abababababababab…" in result.stderr
    assert "nothing installed" in result.stderr
    assert not list((tmp_path / "cache").glob("envtest-*"))


def test_an_archive_without_the_programs(tmp_path: Path) -> None:
    index = release(tmp_path, "v1.36.3", {"etcd": b"#!/bin/sh\n"})
    result = install(KOPF_ENVTEST_INDEX=index, KOPF_CLUSTER_CACHE=str(tmp_path / "cache"))
    assert result.returncode == 1
    assert "lacks kube-apiserver, kubectl; nothing installed." in result.stderr
    assert not list((tmp_path / "cache").glob("envtest-*"))


def test_a_version_that_is_not_released(tmp_path: Path) -> None:
    index = release(tmp_path, "v1.36.3", {name: b"" for name in binaries.ENVTEST})
    result = install("--kubernetes-version", "1.99.0", KOPF_ENVTEST_INDEX=index,
                     KOPF_CLUSTER_CACHE=str(tmp_path / "cache"))
    assert result.returncode == 1
    assert "There is no envtest release v1.99.0" in result.stderr
    assert "the newest are v1.36.3, v1.20.0." in result.stderr


def test_no_network(tmp_path: Path) -> None:
    result = install(KOPF_ENVTEST_INDEX="http://127.0.0.1:9/envtest-releases.yaml",
                     KOPF_CLUSTER_CACHE=str(tmp_path / "cache"))
    assert result.returncode == 1
    assert "Cannot download http://127.0.0.1:9/envtest-releases.yaml" in result.stderr
    assert "build the programs instead (`kopf testing install`, with Go)" in result.stderr


def test_a_version_without_download_is_refused() -> None:
    result = subprocess.run([sys.executable, "-m", "kopf", "testing", "install", "--kubernetes-version", "1.30.0"],
                            capture_output=True, text=True, check=False)
    assert result.returncode == 2
    assert "--kubernetes-version goes with --download" in result.stderr
