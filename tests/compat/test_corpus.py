"""Third-party operators built on Kopf (tests/compat/corpus), run unchanged on PyPI's Kopf
and on ours against the same control plane: any difference a user could see fails the
test, unless `corpus/accepted.toml` lists it with its reason. An operator that Kopf itself
cannot run (`Operator.kopf_bug`) must complete its scenario on ours.

Kopf runs as the cluster's admin; ours under exactly the RBAC that `kopf rbac generate` gives
the operator (corpus/restricting.py), recorded by `kopf rbac record`: the same outcome, and no
request refused. A line per operator tells where its rules came from and what was unused."""

from __future__ import annotations

import re

import pytest
from corpus import differing, environments, operators, restricting
from corpus.recording import Recording
from support.operators import refused

OPERATORS = {operator.name: operator for operator in operators.OPERATORS}
# A rule's reason for a call made later by what a function was handed to, or a method named without a call.
FUNCTION_VALUES = r"(?: handed to \S+| named without a call) at \S+:\d+, from "


@pytest.mark.parametrize("name", sorted(OPERATORS))
def test_operator_behaves_as_on_kopf(name: str, cluster: dict[str, str]) -> None:
    operator = OPERATORS[name]
    source = operator.source()
    operator.install_crds(source)
    recordings = {}
    for engine in environments.ENGINES:
        recordings[engine] = operator.record(engine, environments.environment(name, engine), source)
    kopf, ours = recordings["kopf"], recordings["ours"]
    check_restriction(name, ours)
    if operator.kopf_bug:
        # Kopf itself cannot run it: its scenario must complete on ours, with nothing to compare.
        pattern, why = operator.kopf_bug
        assert re.search(pattern, kopf.output), f"Kopf no longer fails with {pattern!r}: compare the runs\n" \
                                                f"{kopf.output[-3000:]}"
        assert not ours.timeouts and not re.search(pattern, ours.output), \
            f"the scenario does not complete on ours: {ours.timeouts}\n{ours.output[-5000:]}"
        print(f"\n{name}: fails on Kopf ({why}); its scenario completes on ours")
        return
    assert not kopf.timeouts, f"the scenario does not complete on Kopf itself: {kopf.timeouts}\n{kopf.output[-5000:]}"
    lines = differing.differences(kopf, ours)
    unaccepted = differing.unaccepted(name, lines, differing.accepted())
    print(f"\n{name}: {len(lines)} differences, {len(lines) - len(unaccepted)} accepted")
    assert not unaccepted, "\n".join(["Not accepted (corpus/accepted.toml):", *unaccepted,
                                      "--- ours:", ours.output[-6000:], "--- kopf:", kopf.output[-3000:]])


def check_restriction(name: str, ours: Recording) -> None:
    """Ours ran under the generated RBAC: nothing refused; and where its rules came from."""
    restriction = ours.rbac
    assert restriction is not None
    assert not restriction.refused() and not refused(ours.output), \
        "\n".join(["Refused under the generated RBAC:", *restriction.refused(), "--- ours:", ours.output[-6000:]])
    # Counted as (group, resource, verb), wherever granted: comparable across Roles and the ClusterRole.
    generated = {origin: restricting.verbs(rules) for origin, rules in
                 restricting.sources(restriction.generated_text).items()}
    recorded = restricting.verbs(restricting.rules_of(restriction.recorded_text))
    total = restricting.verbs(restricting.rules_of(restriction.generated_text))
    print(f"\n{name} rbac: {len(total)} rules generated (engine {len(generated['engine'])}, introspection "
          f"{len(generated['introspection'])}, declaration {len(generated['declaration'])}); recorded "
          f"{len(recorded)}, of which not generated: {sorted(recorded - total)}; request methods in its code "
          f"{restriction.sites}, neither granted nor warned about {len(restriction.silent)}; calls found through "
          f"function values {len(re.findall(FUNCTION_VALUES, restriction.generated_text))}; warnings "
          f"{len(restriction.warnings)}; granted, not used {len(restriction.unused())}")
    for line in restriction.unused():
        print(f"  unused: {line}")
    # Its chart (kopf deploy generate, the same options), as the API server took it in a dry run.
    print(f"{name} chart: {', '.join(ours.charted)}")
    assert any(item.startswith("deployment.apps/") for item in ours.charted), ours.charted
    for line in restriction.warnings:
        print(f"  warning: {line}")
    # What a run needed is what the generator says it needs: nothing found only by running it.
    assert not recorded - total, f"recorded, not generated: {sorted(recorded - total)}"
    # Every request method its code names is a rule or a warning: nothing dropped in silence.
    assert not restriction.silent, "\n".join(["Neither granted nor warned about:", *restriction.silent])
