"""Where the control plane's programs come from, in this order:

1. ``$KUBEBUILDER_ASSETS``: a folder of ``etcd``, ``kube-apiserver`` and ``kubectl``, as
   controller-runtime's ``setup-envtest`` makes it (so its users' binaries work as they are);
2. the user's cache, filled by ``kopf testing install``, which builds them from the Go module
   proxy with the Go modules in ``modules/`` (Kubernetes' own sources, pinned by ``go.sum``);
3. the user's cache, filled by ``kopf testing install --download`` with the official envtest
   release (``downloads``: etcd, kube-apiserver, kubectl, checked by their SHA-512).

The optional components (kube-controller-manager, kube-scheduler, kwok) are built only: envtest
has none of them. When a program is found nowhere, one error names the ways.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
import platform
import re
import shutil
import subprocess
import sys
import tempfile
import time
import warnings
from collections.abc import Callable, Collection, Iterator
from pathlib import Path

KUBERNETES_VERSION = "v1.36.3"
ETCD_VERSION = "v3.6.8"  # the version k8s.io/kubernetes itself requires
GO_MINIMUM = (1, 26)

HERE = Path(__file__).resolve().parent

# The programs of each Go module (a folder of ``modules/``), by their Go packages.
MODULES: dict[str, dict[str, str]] = {
    "build": {
        "etcd": "go.etcd.io/etcd/server/v3",
        "kube-apiserver": "k8s.io/kubernetes/cmd/kube-apiserver",
        "kube-controller-manager": "k8s.io/kubernetes/cmd/kube-controller-manager",
        "kubectl": "k8s.io/kubernetes/cmd/kubectl",
    },
    "nodes": {
        "kube-scheduler": "k8s.io/kubernetes/cmd/kube-scheduler",
        "kwok": "sigs.k8s.io/kwok/cmd/kwok",
    },
}
KWOK_MODULE = "sigs.k8s.io/kwok"
# kwok's own resources that it reads from the cluster: the logs of pods (by their names).
KWOK_CRDS = ("kwok.x-k8s.io_logs.yaml",)
# What setup-envtest puts in a KUBEBUILDER_ASSETS folder.
ENVTEST = ("etcd", "kube-apiserver", "kubectl")
PREFIX = "envtest-"  # the cache's folders of downloaded releases: envtest-v1.33.0-linux-amd64/bin


class BinariesError(Exception):
    """A program of the control plane cannot be found or built; the message says what to do."""


def cache_root() -> Path:
    default = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "kopf-rs/cluster"
    return Path(os.environ.get("KOPF_CLUSTER_CACHE", default)).resolve()


def module_of(name: str) -> str:
    return next(module for module, programs in MODULES.items() if name in programs)


def cache_dir(module: str = "build") -> Path:
    """Keyed by the versions and the Go module's files, so that a change builds afresh."""
    digest = hashlib.sha256()
    for name in ("go.mod", "go.sum"):
        digest.update((HERE / "modules" / module / name).read_bytes())
    prefix = f"k8s-{KUBERNETES_VERSION}" if module == "build" else module
    return cache_root() / f"{prefix}-{digest.hexdigest()[:12]}" / "bin"


def built_name(package: str) -> str:
    """The file that ``go build -o folder/`` names a main package's program: its path's last
    element, or the one before a major version's suffix (``go.etcd.io/etcd/server/v3``: server)."""
    parts = package.split("/")
    return parts[-2] if len(parts) > 1 and re.fullmatch(r"v\d+", parts[-1]) else parts[-1]


def this_platform() -> str:
    """As envtest's release archives are named: linux-amd64, darwin-arm64, ..."""
    machine = platform.machine().lower()
    arch = {"x86_64": "amd64", "amd64": "amd64", "aarch64": "arm64", "arm64": "arm64"}.get(machine, machine)
    return f"{sys.platform}-{arch}"


def version_key(version: str) -> tuple[int, ...]:
    return tuple(int(part) for part in re.findall(r"\d+", version)[:3])


def downloaded() -> list[Path]:
    """The cache's downloaded envtest releases for this platform (``downloads``), the newest first."""
    folders = [path / "bin" for path in cache_root().glob(f"{PREFIX}v*-{this_platform()}")
               if (path / "bin").is_dir()]
    return sorted(folders, key=lambda path: version_key(path.parent.name), reverse=True)


def find(names: Collection[str]) -> dict[str, Path]:
    """Each program's path, from ``$KUBEBUILDER_ASSETS`` or the cache; the error names the ways."""
    assets = os.environ.get("KUBEBUILDER_ASSETS")
    found: dict[str, Path] = {}
    releases = downloaded()  # (listed once: a folder per downloaded release)
    for name in names:
        candidates = [Path(assets) / name] if assets and name in ENVTEST else []
        candidates.append(cache_dir(module_of(name)) / name)
        candidates += [folder / name for folder in releases] if name in ENVTEST else []
        path = next((path for path in candidates if path.is_file() and os.access(path, os.X_OK)), None)
        if path is not None:
            found[name] = path
    elsewhere = [name for name in names if assets and name in ENVTEST and name in found
                 and found[name].parent != Path(assets)]
    if elsewhere:
        # Set, but not what it should be (a wrong folder, an old setup-envtest's): not silently.
        reason = "is not a folder" if not Path(assets or "").is_dir() else f"has no {', '.join(elsewhere)}"
        warnings.warn(f"KUBEBUILDER_ASSETS={assets} {reason}: using "
                      f"{', '.join(str(found[name]) for name in elsewhere)} instead.", UserWarning, stacklevel=2)
    missing = [name for name in names if name not in found]
    if missing:
        where = f"$KUBEBUILDER_ASSETS ({assets})" if assets else "$KUBEBUILDER_ASSETS (not set)"
        raise BinariesError(
            f"The control plane's programs are not found: {', '.join(missing)}. Either "
            f"(1) set KUBEBUILDER_ASSETS to a folder with {', '.join(ENVTEST)} (as controller-runtime's "
            f"setup-envtest makes it; the other components are not in it), or "
            f"(2) run `kopf testing install` once to build them into {cache_root()} from the Go module "
            f"proxy (Go {GO_MINIMUM[0]}.{GO_MINIMUM[1]} or newer; about 5 minutes on 2 cores; all the "
            f"components), or (3) run `kopf testing install --download` once to fetch the official envtest "
            f"release of {', '.join(ENVTEST)} (checked by its SHA-512). Looked in {where} and the cache."
        )
    return found


@contextlib.contextmanager
def locked(path: Path) -> Iterator[None]:
    """Serialise concurrent builds (e.g. parallel test sessions) of one cache."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def go_version() -> tuple[int, int]:
    go = shutil.which("go")
    if go is None:
        raise BinariesError(
            f"The Go toolchain is not on PATH; it is needed once to build the control plane (Kubernetes "
            f"{KUBERNETES_VERSION}, Go {GO_MINIMUM[0]}.{GO_MINIMUM[1]} or newer). Install Go from go.dev or "
            f"your package manager, or set KUBEBUILDER_ASSETS to a folder of {', '.join(ENVTEST)}."
        )
    out = subprocess.run([go, "env", "GOVERSION"], capture_output=True, text=True, check=False).stdout
    match = re.match(r"go(\d+)\.(\d+)", out.strip())
    if not match:
        raise BinariesError(f"Cannot tell the Go version from `go env GOVERSION`: {out.strip()!r}")
    return int(match.group(1)), int(match.group(2))


def install(modules: Collection[str] = tuple(MODULES), say: Callable[[str], None] = print) -> dict[str, Path]:
    """Build what the cache lacks of these Go modules' programs; the cache's folders."""
    return {module: _build(module, say) for module in modules}


def _build(module: str, say: Callable[[str], None]) -> Path:
    target = cache_dir(module)
    programs = MODULES[module]
    module_dir = HERE / "modules" / module
    with locked(target.parent.parent / ".build.lock"):
        missing = [name for name in programs if not (target / name).is_file()]
        crds = module == "nodes" and not all((target / crd).is_file() for crd in KWOK_CRDS)
        if not missing and not crds:
            return target
        found = go_version()
        if found < GO_MINIMUM:
            raise BinariesError(f"Go {found[0]}.{found[1]} is too old to build Kubernetes {KUBERNETES_VERSION}: "
                                f"it needs Go {GO_MINIMUM[0]}.{GO_MINIMUM[1]} or newer.")
        major, minor = KUBERNETES_VERSION.lstrip("v").split(".")[:2]
        ldflags = ["-s", "-w"]
        for package in ("k8s.io/component-base/version", "k8s.io/client-go/pkg/version"):
            for key, value in (("gitVersion", KUBERNETES_VERSION), ("gitMajor", major), ("gitMinor", minor),
                               ("gitTreeState", "clean"), ("buildDate", "1970-01-01T00:00:00Z")):
                ldflags.append(f"-X {package}.{key}={value}")
        env = dict(os.environ, CGO_ENABLED="0", GOTOOLCHAIN="local", GOFLAGS="-mod=readonly -buildvcs=false")
        staging = Path(tempfile.mkdtemp(prefix="bin.", dir=target.parent.parent))
        started = time.monotonic()
        say(f"building {', '.join(missing) or 'kwok resources'} (Kubernetes {KUBERNETES_VERSION}, "
            f"etcd {ETCD_VERSION}) into {target}; a cold build takes about 5 minutes on 2 cores")
        try:
            # One `go build` for all of them: the shared packages compile once and the programs
            # link side by side (a link is mostly one core's work), not one after another.
            if missing:
                say(f"  go build {' '.join(programs[name] for name in missing)}")
                result = subprocess.run(
                    # No debug information: the programs are stripped (`-s -w`) anyway, and
                    # making it is a good part of compiling Kubernetes.
                    ["go", "build", "-trimpath", "-tags", "selinux,notest", "-gcflags", "all=-dwarf=false",
                     "-ldflags", " ".join(ldflags),
                     "-o", f"{staging}/", *(programs[name] for name in missing)],
                    cwd=module_dir, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                    check=False,
                )
                if result.returncode != 0:
                    raise BinariesError(f"Building {', '.join(missing)} failed:\n{result.stdout[-4000:]}")
            for name in missing:
                os.replace(staging / built_name(programs[name]), staging / name)
            kept = list(missing)
            if module == "nodes":
                # kwok's resource definitions, as its module (downloaded for the build) has them.
                result = subprocess.run(["go", "list", "-m", "-f", "{{.Dir}}", KWOK_MODULE], cwd=module_dir,
                                        env=env, capture_output=True, text=True, check=False)
                if result.returncode != 0:
                    raise BinariesError(f"Cannot find kwok's module: {result.stderr.strip()}")
                for crd in KWOK_CRDS:
                    shutil.copyfile(Path(result.stdout.strip()) / "kustomize/crd/bases" / crd, staging / crd)
                kept += KWOK_CRDS
            target.mkdir(parents=True, exist_ok=True)
            for name in kept:
                os.replace(staging / name, target / name)
        finally:
            shutil.rmtree(staging, ignore_errors=True)
        say(f"built in {time.monotonic() - started:.0f}s")
        return target
