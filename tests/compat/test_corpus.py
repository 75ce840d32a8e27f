"""Third-party operators built on Kopf (tests/compat/corpus), run unchanged on PyPI's Kopf
and on ours against the same control plane: any difference a user could see fails the
test, unless `corpus/accepted.toml` lists it with its reason."""

from __future__ import annotations

import pytest
from corpus import differing, environments, operators

OPERATORS = {operator.name: operator for operator in operators.OPERATORS}


@pytest.mark.parametrize("name", sorted(OPERATORS))
def test_operator_behaves_as_on_kopf(name: str, cluster: dict[str, str]) -> None:
    operator = OPERATORS[name]
    source = operator.source()
    operator.install_crds(source)
    recordings = {}
    for engine in environments.ENGINES:
        recordings[engine] = operator.record(engine, environments.environment(name, engine), source)
    kopf, ours = recordings["kopf"], recordings["ours"]
    assert not kopf.timeouts, f"the scenario does not complete on Kopf itself: {kopf.timeouts}\n{kopf.output[-5000:]}"
    lines = differing.differences(kopf, ours)
    unaccepted = differing.unaccepted(name, lines, differing.accepted())
    print(f"\n{name}: {len(lines)} differences, {len(lines) - len(unaccepted)} accepted")
    assert not unaccepted, "\n".join(["Not accepted (corpus/accepted.toml):", *unaccepted,
                                      "--- ours:", ours.output[-6000:], "--- kopf:", kopf.output[-3000:]])
