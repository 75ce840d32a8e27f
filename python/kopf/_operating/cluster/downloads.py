"""The official envtest binaries (etcd, kube-apiserver, kubectl), downloaded where the network
allows: the release that controller-tools publishes for controller-runtime's envtest, found in
its index of releases and checked against the SHA-512 that the index gives for the archive.

The index's address can be changed (``$KOPF_ENVTEST_INDEX``, any URL that urllib reads, ``file:``
too) for a mirror inside a company's network. The other components (the controller manager, the
scheduler, kwok) are not in envtest's release: they are built (``binaries.install``).

Uses: ``binaries`` (the cache, the error), PyYAML.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import tarfile
import tempfile
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

from kopf._operating.cluster.binaries import (
    ENVTEST,
    PREFIX,
    BinariesError,
    cache_root,
    locked,
    this_platform,
    version_key,
)

INDEX = "https://raw.githubusercontent.com/kubernetes-sigs/controller-tools/HEAD/envtest-releases.yaml"


def index_url() -> str:
    return os.environ.get("KOPF_ENVTEST_INDEX", INDEX)


def _fetch(url: str, timeout: float = 60) -> Any:
    try:
        return urllib.request.urlopen(url, timeout=timeout)  # noqa: S310 (http(s) or file, as configured)
    except (urllib.error.URLError, OSError, ValueError) as error:
        reason = getattr(error, "reason", error)
        raise BinariesError(
            f"Cannot download {url}: {reason}. Without the network, build the programs instead "
            f"(`kopf testing install`, with Go), or set KOPF_ENVTEST_INDEX to a mirror of the index."
        ) from None


def choose(releases: dict[str, Any], version: str | None) -> tuple[str, str, str]:
    """The version, the archive's address and its SHA-512: the newest, or the one asked for."""
    if not releases:
        raise BinariesError(f"The index of envtest releases ({index_url()}) lists none.")
    if version is not None:
        wanted = version if version.startswith("v") else f"v{version}"
        if wanted not in releases:
            newest = sorted(releases, key=version_key, reverse=True)[:5]
            raise BinariesError(f"There is no envtest release {wanted} in {index_url()}; "
                                f"the newest are {', '.join(newest)}.")
    else:
        wanted = max(releases, key=version_key)
    archive = f"{PREFIX}{wanted}-{this_platform()}.tar.gz"
    entry = (releases[wanted] or {}).get(archive)
    if not entry or "selfLink" not in entry or "hash" not in entry:
        raise BinariesError(f"The envtest release {wanted} has no archive for {this_platform()} ({archive}).")
    return wanted, str(entry["selfLink"]), str(entry["hash"]).lower()


def download(version: str | None = None, say: Callable[[str], None] = print) -> Path:
    """Download an envtest release into the cache (unless there already); its folder of programs."""
    import yaml

    with _fetch(index_url()) as response:
        try:
            index = yaml.safe_load(response.read())
        except yaml.YAMLError as error:
            raise BinariesError(f"The index of envtest releases ({index_url()}) is not YAML: {error}") from None
    releases = index.get("releases") if isinstance(index, dict) else None
    if not isinstance(releases, dict):
        raise BinariesError(f"The index of envtest releases ({index_url()}) has no 'releases' map.")
    wanted, url, expected = choose(releases, version)
    target = cache_root() / f"{PREFIX}{wanted}-{this_platform()}" / "bin"
    with locked(cache_root() / ".download.lock"):
        if all((target / name).is_file() for name in ENVTEST):
            say(f"envtest {wanted} is in the cache already: {target}")
            return target
        say(f"downloading {url}")
        cache_root().mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory(prefix="download.", dir=cache_root()) as scratch:
            archive = Path(scratch) / "envtest.tar.gz"
            digest = hashlib.sha512()
            with _fetch(url, timeout=600) as response, open(archive, "wb") as file:
                while chunk := response.read(1 << 20):
                    digest.update(chunk)
                    file.write(chunk)
            if digest.hexdigest() != expected:
                raise BinariesError(f"The archive {url} does not match its SHA-512 in the index "
                                    f"(expected {expected[:16]}…, got {digest.hexdigest()[:16]}…); nothing installed.")
            staging = Path(scratch) / "bin"
            staging.mkdir()
            _extract(archive, staging, url)
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.rmtree(target, ignore_errors=True)
            os.replace(staging, target)
    say(f"envtest {wanted} installed: {target}")
    return target


def _extract(archive: Path, into: Path, url: str) -> None:
    """Only the three programs, by their base names (wherever the archive keeps them): nothing
    else of the archive is written, and no path of it is trusted."""
    try:
        with tarfile.open(archive) as tar:
            for member in tar.getmembers():
                name = Path(member.name).name
                if member.isfile() and name in ENVTEST:
                    source = tar.extractfile(member)
                    if source is not None:
                        with source, open(into / name, "wb") as file:
                            shutil.copyfileobj(source, file)
                        (into / name).chmod(0o755)
    except (tarfile.TarError, OSError) as error:
        raise BinariesError(f"The archive {url} cannot be read: {error}") from None
    missing = [name for name in ENVTEST if not (into / name).is_file()]
    if missing:
        raise BinariesError(f"The archive {url} lacks {', '.join(missing)}; nothing installed.")
