"""The pytest plugin of ``kopf.testing.Simulation`` (registered as ``pytest11``: installed with
the wheel): the ``kopf_simulation`` fixture starts simulated operators for a test, with the
CRDs that ``--kopf-crd`` or the ini setting ``kopf_crds`` name (as for ``kopf_cluster``),
and stops them after it.

Uses: ``simulation``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml


def _crds(config: pytest.Config) -> list[Path]:
    # Both options belong to the cluster's plugin (kopf._operating.cluster.fixtures); without
    # it, there are none.
    try:
        named = [*config.getini("kopf_crds"), *(Path(path) for path in config.getoption("--kopf-crd"))]
    except (ValueError, KeyError):
        return []
    return [Path(path) for path in named]


@pytest.fixture
def kopf_simulation(pytestconfig: pytest.Config) -> Iterator[Callable[..., Any]]:
    """Start a simulated operator for this test: ``sim = kopf_simulation(paths=['handlers.py'])``
    is a started ``kopf.testing.SyncSimulation`` (the arguments are ``Simulation``'s), with the
    CRDs of ``--kopf-crd``/``kopf_crds`` created; it is stopped after the test."""
    from kopf._operating.simulation import Simulation, SyncSimulation
    crds = [document for path in _crds(pytestconfig)
            for document in yaml.safe_load_all(path.read_text()) if document]
    started: list[SyncSimulation] = []

    def start(**kwargs: Any) -> SyncSimulation:
        simulation = Simulation(**kwargs)
        try:
            for crd in crds:
                simulation.create(crd)
        except BaseException:
            simulation._api.stop()
            raise
        stepped = SyncSimulation(simulation)
        stepped.start()
        started.append(stepped)
        return stepped

    yield start
    for stepped in reversed(started):
        stepped.stop()
