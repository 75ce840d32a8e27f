"""Kopf's ``kopf._kits.hierarchies``: parents and children among objects."""

from kopf._structures.hierarchies import (
    adjust_namespace,
    adopt,
    append_owner_reference,
    harmonize_naming,
    label,
    remove_owner_reference,
)

__all__ = ['adjust_namespace', 'adopt', 'append_owner_reference', 'harmonize_naming', 'label',
           'remove_owner_reference']
