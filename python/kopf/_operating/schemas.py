"""A pydantic model's JSON Schema as a CRD's structural OpenAPI v3 schema.

Kubernetes takes a subset of OpenAPI v3.0 for custom resources ("structural" schemas): every
field typed, no references, no ``uniqueItems``, ``nullable`` instead of a null type, v3.0's
boolean ``exclusiveMinimum``. What pydantic writes (JSON Schema 2020-12) is turned into that
subset here; what has no structural form (a union of two models, a recursive model) fails
with the field's path and what to write instead, never turned into something looser.

Keys that start with ``x-kubernetes-`` (CEL rules, list types) pass through as they are given
in a field's ``json_schema_extra``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

# String formats that the API server checks as pydantic means them; others (pydantic's
# ``duration`` is ISO 8601's, the server's is Go's) are left out rather than mis-checked.
FORMATS = frozenset({'date-time', 'date', 'uri', 'email', 'hostname', 'ipv4', 'ipv6', 'uuid', 'byte'})
COPIED = ('description', 'minimum', 'maximum', 'minLength', 'maxLength', 'pattern', 'minItems', 'maxItems',
          'minProperties', 'maxProperties', 'multipleOf')
DROPPED = frozenset({'title', 'examples', 'readOnly', 'writeOnly', 'deprecated', '$defs', 'discriminator'})


class SchemaError(ValueError):
    """A model's field that has no structural schema."""


def structural(schema: Mapping[str, Any], where: str) -> dict[str, Any]:
    """The structural form of a model's JSON Schema (with its ``$defs``); ``where`` names the
    model in the errors."""
    return _Converter(schema.get('$defs', {}), where).convert(schema, ())


class _Converter:
    def __init__(self, defs: Mapping[str, Any], where: str) -> None:
        self.defs = defs
        self.where = where
        self.resolving: list[str] = []

    def fail(self, path: tuple[str, ...], why: str) -> SchemaError:
        field = '.'.join(path) or '(the model itself)'
        return SchemaError(f"{self.where}: {field}: {why}")

    def convert(self, schema: Mapping[str, Any], path: tuple[str, ...]) -> dict[str, Any]:
        if '$ref' in schema:
            name = schema['$ref'].rpartition('/')[2]
            if name in self.resolving:
                raise self.fail(path, f"{name} contains itself: a CRD's schema cannot be recursive "
                                      f"(type the field as dict[str, Any] to keep it unchecked)")
            self.resolving.append(name)
            try:
                inner = self.convert(self.defs[name], path)
            finally:
                self.resolving.pop()
            # The field's own keys (its description, default) win over the model's.
            rest = self.convert({k: v for k, v in schema.items() if k != '$ref'}, path) if len(schema) > 1 else {}
            rest.pop('x-kubernetes-preserve-unknown-fields', None)
            return {**inner, **rest}
        for key in ('anyOf', 'oneOf'):
            if key in schema:
                return self.union(schema, schema[key], path)
        if 'allOf' in schema:
            if len(schema['allOf']) != 1:
                raise self.fail(path, "an intersection of several schemas (allOf) has no structural form")
            merged = {**schema['allOf'][0], **{k: v for k, v in schema.items() if k != 'allOf'}}
            return self.convert(merged, path)
        return self.plain(schema, path)

    def union(self, schema: Mapping[str, Any], options: list[Mapping[str, Any]],
              path: tuple[str, ...]) -> dict[str, Any]:
        own = {k: v for k, v in schema.items() if k not in ('anyOf', 'oneOf')}
        values = [option for option in options if option.get('type') != 'null']
        nullable = len(values) < len(options)
        types = sorted(option.get('type', '') for option in values)
        if types == ['integer', 'string'] and all(len(option) == 1 for option in values):
            found: dict[str, Any] = {'x-kubernetes-int-or-string': True}
        elif len(values) == 1:
            found = self.convert(values[0], path)
        elif values and all(option.get('type') == values[0].get('type') and 'enum' in option for option in values):
            found = {'type': values[0]['type'], 'enum': [v for option in values for v in option['enum']]}
        else:
            raise self.fail(path, "a union of several types has no structural schema: use one model with optional "
                                  "fields, int | str, or dict[str, Any] to keep it unchecked")
        if 'description' in own:
            found['description'] = own['description']
        if own.get('default') is not None:
            found['default'] = own['default']
        found.update({key: value for key, value in own.items() if key.startswith('x-kubernetes-')})
        if nullable:
            found['nullable'] = True
        return found

    def plain(self, schema: Mapping[str, Any], path: tuple[str, ...]) -> dict[str, Any]:
        found: dict[str, Any] = {}
        kind = schema.get('type')
        if isinstance(kind, list):
            raise self.fail(path, f"several types at once ({kind}) have no structural schema")
        if kind is not None:
            found['type'] = kind
        for key in COPIED:
            if key in schema:
                found[key] = schema[key]
        for key, flag in (('exclusiveMinimum', 'minimum'), ('exclusiveMaximum', 'maximum')):
            if key in schema:  # JSON Schema's number, OpenAPI v3.0's flag beside the bound
                found[flag] = schema[key]
                found[key] = True
        if 'const' in schema:
            found['enum'] = [schema['const']]
        if 'enum' in schema:
            found['enum'] = list(schema['enum'])
        if schema.get('format') in FORMATS:
            found['format'] = schema['format']
        if 'default' in schema and schema['default'] is not None:
            found['default'] = schema['default']
        if kind == 'array':
            found['items'] = self.convert(schema.get('items', {}), (*path, '[]'))
            if schema.get('uniqueItems'):
                if found['items'].get('type') not in ('string', 'integer', 'number', 'boolean'):
                    raise self.fail(path, "a set of non-scalar items has no structural schema: use a list")
                found['x-kubernetes-list-type'] = 'set'  # (the server refuses uniqueItems)
        if kind == 'object' or 'properties' in schema:
            found['type'] = 'object'
            self.object(schema, path, found)
        if kind is None and 'x-kubernetes-int-or-string' not in schema and not found.get('enum'):
            found['x-kubernetes-preserve-unknown-fields'] = True  # Any: kept as it is, unchecked
        for key, value in schema.items():
            if key.startswith('x-kubernetes-'):
                found[key] = value
        unknown = set(schema) - set(found) - set(COPIED) - DROPPED - {
            'type', 'exclusiveMinimum', 'exclusiveMaximum', 'const', 'enum', 'format', 'default', 'items',
            'uniqueItems', 'properties', 'required', 'additionalProperties'}
        if unknown:
            raise self.fail(path, f"{', '.join(sorted(unknown))} has no structural form")
        return found

    def object(self, schema: Mapping[str, Any], path: tuple[str, ...], found: dict[str, Any]) -> None:
        properties = schema.get('properties', {})
        if properties:
            found['properties'] = {name: self.convert(value, (*path, name)) for name, value in properties.items()}
        required = [name for name in schema.get('required', []) if name in properties]
        if required:
            found['required'] = required
        extra = schema.get('additionalProperties')
        if isinstance(extra, Mapping) and extra:
            if properties:
                raise self.fail(path, "a model with both fields and typed extra keys has no structural schema")
            found['additionalProperties'] = self.convert(extra, (*path, '*'))
        elif extra is True or (extra is None and not properties) or extra == {}:
            found['x-kubernetes-preserve-unknown-fields'] = True  # extra keys kept: extra='allow', dict[str, Any]
