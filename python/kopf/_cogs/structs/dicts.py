"""Kopf's ``kopf._cogs.structs.dicts``: fields of nested dicts, by paths like ``spec.x``."""

from kopf._structures.dicts import (
    FieldPath,
    FieldSpec,
    MappingView,
    MutableMappingView,
    cherrypick,
    ensure,
    parse_field,
    remove,
    resolve,
    resolve_obj,
    walk,
)

__all__ = ['FieldPath', 'FieldSpec', 'MappingView', 'MutableMappingView', 'cherrypick', 'ensure',
           'parse_field', 'remove', 'resolve', 'resolve_obj', 'walk']
