"""``kopf.testing.KopfCluster``: a control plane for a test session, in a temporary folder, with
the CRDs it is given installed and a namespace per test.

Uses: ``plane``.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import shutil
import tempfile
import time
import types
import warnings
from collections.abc import Collection, Iterator
from pathlib import Path
from typing import Any

import yaml

from kopf._operating.cluster import plane


class LeftoverWarning(UserWarning):
    """A test left objects that its namespace's deletion waits for (finalizers)."""


def _crd_names(path: Path) -> list[str]:
    """The names of the CRDs in a file; an error naming the file if it is not YAML, or holds none
    (a file given as a CRD that holds none would otherwise be applied and waited for in vain)."""
    try:
        documents = [doc for doc in yaml.safe_load_all(path.read_text()) if doc]
    except yaml.YAMLError as e:
        raise plane.ControlPlaneError(f"The CRD file {path} is not valid YAML: {e}") from None
    except OSError as e:
        raise plane.ControlPlaneError(f"The CRD file {path} cannot be read: {e}") from None
    kinds = [doc.get("kind") if isinstance(doc, dict) else type(doc).__name__ for doc in documents]
    names = [doc.get("metadata", {}).get("name") for doc in documents
             if isinstance(doc, dict) and doc.get("kind") == "CustomResourceDefinition"]
    if not names:
        found = ", ".join(str(kind) for kind in kinds) or "no documents"
        raise plane.ControlPlaneError(f"The CRD file {path} holds no CustomResourceDefinition ({found}).")
    return names


class KopfCluster(contextlib.AbstractContextManager["KopfCluster"]):
    """A local Kubernetes control plane (etcd and kube-apiserver; on request the controller
    manager and simulated nodes), started on entry and torn down on exit, with no Docker
    (not in Kopf).

    The programs come from ``$KUBEBUILDER_ASSETS`` (as controller-runtime's ``setup-envtest``
    makes it) or the cache that ``kopf testing install`` fills.

    :param crds: CRD files (YAML, one or more documents each) to install and wait for.
    :param controller_manager: also run kube-controller-manager (garbage collection, namespaces'
        deletion, service accounts).
    :param nodes: also run kube-scheduler and kwok: pods are scheduled, run and log.
    :param home: the state folder (default: a temporary one, removed on exit).

    Its programs end with the thread that starts it, however that ends (the kernel sends them
    SIGTERM): start it in a thread that lives as long as it is used.
    :param port: the API server's port (default: a free one).
    """

    def __init__(self, *, crds: Collection[str | os.PathLike[str]] = (), controller_manager: bool = False,
                 nodes: bool = False, home: str | os.PathLike[str] | None = None, port: int | None = None) -> None:
        self.crds = [Path(crd) for crd in crds]
        self._own_home = home is None
        self.home = Path(home) if home is not None else Path(tempfile.mkdtemp(prefix="kopf-cluster-"))
        # Its programs end with this process, however it ends (a killed test session leaves
        # no servers holding the ports behind).
        self.plane = plane.ControlPlane(home=self.home, port=port or plane.free_port(),
                                        controller_manager=controller_manager, nodes=nodes, tied=True)
        self.startup_time: float | None = None

    @property
    def kubeconfig(self) -> Path:
        """The admin's kubeconfig: for ``KUBECONFIG``, kubectl and the clients."""
        return self.plane.kubeconfig

    @property
    def env(self) -> dict[str, str]:
        """The environment variables that point kubectl, the clients and ``KopfRunner`` here."""
        return {"KUBECONFIG": str(self.kubeconfig)}

    def __enter__(self) -> KopfCluster:
        for crd in self.crds:  # a wrong file fails at once, before anything is started
            _crd_names(crd)
        self.startup_time = self.plane.start()
        try:
            self.install(*self.crds)
        except BaseException:
            self.plane.stop()
            raise
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc_val: BaseException | None,
                 exc_tb: types.TracebackType | None) -> None:
        self.plane.stop()
        if self._own_home:
            shutil.rmtree(self.home, ignore_errors=True)

    def kubectl(self, *args: str, input: str | None = None) -> str:
        """Run kubectl against this control plane; its output (an error with its stderr if it fails)."""
        return self.plane.kubectl(*args, input=input)

    def install(self, *crds: str | os.PathLike[str], timeout: float = 30) -> None:
        """Apply the CRD files and wait until each is established (the error names one that is not,
        with its conditions). With the controller manager, it is restarted then (a second or two),
        so that its garbage collector collects the children of the new CRDs' objects at once:
        by itself, it would notice the new CRDs only within 30 seconds."""
        names = []
        for crd in crds:
            names += _crd_names(Path(crd))
        for crd in crds:
            self.kubectl("apply", "-f", str(crd))
        deadline = time.monotonic() + timeout
        for name in names:
            while True:
                crd = json.loads(self.kubectl("get", "crd", name, "-o", "json"))
                conditions = {c["type"]: c for c in crd.get("status", {}).get("conditions", [])}
                if conditions.get("Established", {}).get("status") == "True":
                    break
                if time.monotonic() > deadline:
                    said = "; ".join(f"{c['type']}={c['status']} ({c.get('message', '')})"
                                     for c in conditions.values()) or "no conditions"
                    raise plane.ControlPlaneError(f"The CRD {name} is not established in {timeout:.0f}s: {said}")
                time.sleep(0.1)
        if names:
            self.plane.restart_controller_manager()

    @contextlib.contextmanager
    def namespace(self, prefix: str = "test") -> Iterator[str]:
        """A namespace of its own, deleted afterwards; objects that keep it (finalizers) are named
        in a warning, and the teardown goes on."""
        name = f"{prefix}-{secrets.token_hex(4)}"
        self.kubectl("create", "namespace", name)
        try:
            yield name
        finally:
            self.kubectl("delete", "namespace", name, "--wait=false")
            stuck = self._finalized(name)
            if stuck:
                warnings.warn(f"Objects with finalizers are left in the namespace {name}: {', '.join(stuck)}",
                              LeftoverWarning, stacklevel=3)

    def _finalized(self, namespace: str) -> list[str]:
        """The objects of the namespace that have finalizers (they hold its deletion)."""
        kinds = self.kubectl("api-resources", "--namespaced", "--verbs=list", "-o", "name").split()
        found: list[str] = []
        if not kinds:
            return found
        # With nothing found, --ignore-not-found makes kubectl print nothing at all, not a list.
        text = self.kubectl("get", ",".join(kinds), "-n", namespace, "-o", "json", "--ignore-not-found")
        listed: Any = json.loads(text) if text.strip() else {}
        for item in listed.get("items", []):
            if item["metadata"].get("finalizers"):
                found.append(f"{item['kind']}/{item['metadata']['name']}")
        return found
