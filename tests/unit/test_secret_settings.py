"""`settings.secrets` as the core reads it: field paths as dotted strings or sequences of keys,
and one that is not a path refused with the setting's name, not taken as nothing."""

from __future__ import annotations

import itertools

import kopf
import pytest


def test_fields_and_digests_reach_the_core() -> None:
    settings = kopf.OperatorSettings()
    settings.secrets.fields = ['spec.password', ('spec', 'dotted.key')]
    settings.secrets.diffbase_digests = True
    engine = settings.for_engine()
    assert engine['secrets'] == {'fields': [['spec', 'password'], ['spec', 'dotted.key']],
                                 'diffbase_digests': True}
    assert engine['peering']['diffbase_digests'] is True  # said in the peering record


@pytest.mark.parametrize("field", ["", "spec..password", ("spec", "")])
def test_a_field_that_is_not_a_path_is_refused(field: object) -> None:
    settings = kopf.OperatorSettings()
    settings.secrets.fields = [field]  # type: ignore[list-item]
    with pytest.raises(ValueError, match=r"settings.secrets.fields: .* is not a field path"):
        settings.for_engine()


def test_endless_fields_are_refused_not_read_for_ever() -> None:
    settings = kopf.OperatorSettings()
    settings.secrets.fields = (f"spec.field{n}" for n in itertools.count())
    with pytest.raises(ValueError, match=r"settings.secrets.fields: more than 10000 field paths"):
        settings.for_engine()
    settings.secrets.fields = (f"spec.field{n}" for n in range(3))  # a finite generator: read once
    assert settings.for_engine()['secrets']['fields'] == [['spec', 'field0'], ['spec', 'field1'], ['spec', 'field2']]
