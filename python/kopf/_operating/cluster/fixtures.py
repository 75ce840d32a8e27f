"""The pytest plugin of ``kopf.testing`` (registered as ``pytest11``: installed with the wheel):

- ``kopf_cluster``: one control plane for the test session (``KopfCluster``), its kubeconfig in
  ``KUBECONFIG`` for the session, so that ``KopfRunner``, kubectl and the clients find it;
- ``kopf_namespace``: a namespace of each test's own, deleted after it.

Options: ``--kopf-crd PATH`` (repeatable) or the ini setting ``kopf_crds`` (lines of paths)
name the CRDs to install; ``--kopf-nodes`` and ``--kopf-controller-manager`` (or the ini
settings of the same names) start those components too.

Uses: ``session``.
"""

from __future__ import annotations

import contextlib
import os
import signal
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("kopf", "kopf.testing's control plane")
    group.addoption("--kopf-crd", action="append", default=[], metavar="PATH",
                    help="A CRD file to install in the kopf_cluster control plane (repeatable).")
    group.addoption("--kopf-nodes", action="store_true", default=None,
                    help="Also run kube-scheduler and kwok in the kopf_cluster control plane: pods run and log.")
    group.addoption("--kopf-controller-manager", action="store_true", default=None,
                    help="Also run kube-controller-manager (garbage collection) in the kopf_cluster control plane.")
    parser.addini("kopf_crds", type="paths", default=[], help="CRD files to install in the kopf_cluster control plane.")
    parser.addini("kopf_nodes", type="bool", default=False, help="As --kopf-nodes.")
    parser.addini("kopf_controller_manager", type="bool", default=False, help="As --kopf-controller-manager.")


def _flag(config: pytest.Config, name: str) -> bool:
    given = config.getoption(f"--kopf-{name.replace('_', '-')}")
    return bool(given if given is not None else config.getini(f"kopf_{name}"))


@pytest.fixture(scope="session")
def kopf_cluster(pytestconfig: pytest.Config) -> Iterator[Any]:
    """A local control plane for the session; ``KUBECONFIG`` points at it meanwhile."""
    from kopf._operating.cluster.session import KopfCluster
    crds = [*pytestconfig.getini("kopf_crds"), *(Path(path) for path in pytestconfig.getoption("--kopf-crd"))]
    cluster = KopfCluster(crds=crds, nodes=_flag(pytestconfig, "nodes"),
                          controller_manager=_flag(pytestconfig, "controller_manager"))
    with _terminated_as_interrupted(), cluster:
        before = os.environ.get("KUBECONFIG")
        os.environ["KUBECONFIG"] = str(cluster.kubeconfig)
        try:
            yield cluster
        finally:
            if before is None:
                os.environ.pop("KUBECONFIG", None)
            else:
                os.environ["KUBECONFIG"] = before


@contextlib.contextmanager
def _terminated_as_interrupted() -> Iterator[None]:
    """SIGTERM (a CI job's timeout) ends the session as Ctrl-C does: pytest then tears the
    fixtures down, the control plane with them, where it would die at once otherwise (the
    plane's programs end anyway: they are tied to this process). Only where nobody else has
    a handler for it."""
    if threading.current_thread() is not threading.main_thread() or \
            signal.getsignal(signal.SIGTERM) not in (signal.SIG_DFL, None):
        yield
        return

    def interrupted(signum: int, frame: object) -> None:
        raise KeyboardInterrupt("SIGTERM")

    signal.signal(signal.SIGTERM, interrupted)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)


@pytest.fixture
def kopf_namespace(kopf_cluster: Any) -> Iterator[str]:
    """A namespace of this test's own in the session's control plane."""
    with kopf_cluster.namespace() as name:
        yield name
