"""`kopf crd generate` and `kopf crd verify`: the CRDs of the operator's models
(``kopf.CustomResource``), written from the code, and compared with a file or the cluster.

The models of one group and plural are the versions of one CRD; exactly one of several is
stored. The schema is the models' own (``schemas``): descriptions from their docstrings and
fields (so ``kubectl explain`` teaches them), the bounds, patterns and enums the API server
then checks, and the status subresource where a model has a ``status`` field.
"""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import yaml

from kopf._handling.conversions import ConversionError, Converting
from kopf._handling.handlers import ConversionHandler, OperatorRegistry
from kopf._operating import schemas
from kopf._operating.rbac.commands import _connect, _read, crd_path
from kopf._structures.errors import OperatorError
from kopf._structures.memos import ObjectMemos
from kopf._structures.models import MODELS, CustomResource, Declaration, ModelError, described
from kopf._structures.references import Resource
from kopf._structures.settings import OperatorSettings
from kopf._structures.structs import Memo

ENVELOPE = {
    'apiVersion': {'type': 'string', 'description': "The object's API group and version."},
    'kind': {'type': 'string', 'description': "The object's kind."},
    'metadata': {'type': 'object'},
}


def models() -> list[type[CustomResource]]:
    """The models declared so far (by the operator's modules, once imported)."""
    return list(MODELS)


def documents(declared: Sequence[type[CustomResource]]) -> list[dict[str, Any]]:
    """One CRD per group and plural, its versions from the models of that resource."""
    by_name: dict[str, list[type[CustomResource]]] = {}
    for model in declared:
        by_name.setdefault(model.__kopf_resource__.name, []).append(model)
    return [_crd(name, found) for name, found in sorted(by_name.items())]


def _crd(name: str, found: list[type[CustomResource]]) -> dict[str, Any]:
    found = sorted(found, key=lambda model: _priority(model.__kopf_resource__.version))
    first = found[0].__kopf_resource__
    for model in found[1:]:
        other = model.__kopf_resource__
        for what in ('kind', 'scope', 'singular', 'short_names', 'categories'):
            if getattr(other, what) != getattr(first, what):
                raise ModelError(f"{name}: the versions disagree on {what}: {_where(found[0])} says "
                                 f"{getattr(first, what)!r}, {_where(model)} says {getattr(other, what)!r}")
    versions = [model.__kopf_resource__.version for model in found]
    duplicated = sorted({version for version in versions if versions.count(version) > 1})
    if duplicated:
        raise ModelError(f"{name}: version {duplicated[0]} is declared by several models: "
                         f"{', '.join(_where(m) for m in found if m.__kopf_resource__.version == duplicated[0])}")
    stored = [model for model in found if model.__kopf_resource__.storage]
    if len(found) == 1 and found[0].__kopf_resource__.storage is not False:
        stored = found
    if len(stored) != 1:
        listed = ', '.join(_where(model) for model in (stored or found))
        raise ModelError(f"{name}: exactly one version is stored (storage=True): {len(stored)} are ({listed})")
    names: dict[str, Any] = {'kind': first.kind, 'listKind': f"{first.kind}List", 'plural': first.plural,
                             'singular': first.singular}
    if first.short_names:
        names['shortNames'] = list(first.short_names)
    if first.categories:
        names['categories'] = list(first.categories)
    return {
        'apiVersion': 'apiextensions.k8s.io/v1',
        'kind': 'CustomResourceDefinition',
        'metadata': {'name': name},
        'spec': {
            'group': first.group,
            'names': names,
            'scope': first.scope,
            'versions': [_version(model, model is stored[0]) for model in found],
        },
    }


def _version(model: type[CustomResource], storage: bool) -> dict[str, Any]:
    declared: Declaration = model.__kopf_resource__
    where = _where(model)
    schema = schemas.structural(model.model_json_schema(mode='validation'), where)
    properties = {**schema.get('properties', {}), **ENVELOPE}
    ordered = {key: properties[key] for key in ENVELOPE}
    ordered.update({key: value for key, value in properties.items() if key not in ENVELOPE})
    if 'status' in ordered:
        # Kopf writes its own there (handlers' results under their ids, the progress): kept.
        ordered['status'] = {**ordered['status'], 'x-kubernetes-preserve-unknown-fields': True}
    top: dict[str, Any] = {'type': 'object'}
    if schema.get('description'):
        top['description'] = schema['description']
    top['properties'] = ordered
    required = [name for name in schema.get('required', []) if name not in ENVELOPE]
    if required:
        top['required'] = required
    for key, value in schema.items():
        if key.startswith('x-kubernetes-') and key != 'x-kubernetes-preserve-unknown-fields':
            top[key] = value
    version: dict[str, Any] = {'name': declared.version, 'served': declared.served, 'storage': storage,
                               'schema': {'openAPIV3Schema': top}}
    if 'status' in model.model_fields:
        version['subresources'] = {'status': {}}
    if declared.printer_columns:
        version['additionalPrinterColumns'] = [_column(column) for column in declared.printer_columns]
    return version


def _column(column: Any) -> dict[str, Any]:
    found: dict[str, Any] = {'name': column.name, 'type': column.type, 'jsonPath': column.json_path}
    for key, value in (('description', column.description), ('format', column.format)):
        if value is not None:
            found[key] = value
    if column.priority:
        found['priority'] = column.priority
    return found


def _priority(version: str) -> tuple[int, int, int]:
    """Kubernetes' order of versions: GA before beta before alpha, higher numbers first."""
    match = re.fullmatch(r'v(\d+)(?:(alpha|beta)(\d+))?', version)
    if match is None:
        return (3, 0, 0)
    stability = {'alpha': 2, 'beta': 1, None: 0}[match[2]]
    return (stability, -int(match[1]), -int(match[3] or 0))


def _where(model: type) -> str:
    return described(model)


def render(crds: Iterable[Mapping[str, Any]]) -> str:
    """The CRDs as one YAML stream: the same models, the same bytes."""
    return ''.join(f"---\n{yaml.safe_dump(dict(crd), sort_keys=False, width=100)}" for crd in crds)


def differences(expected: Mapping[str, Any], actual: Mapping[str, Any] | None) -> list[str]:
    """What differs between the CRD the code gives and one found (a file's, the cluster's), by
    path; what the server adds by default to what the code does not say is not a difference."""
    name = expected['metadata']['name']
    if actual is None:
        return [f"{name}: absent"]
    found: list[str] = []
    _compare(expected.get('spec', {}), actual.get('spec', {}), f"{name}: spec", found, strict=False)
    return found


def _compare(expected: Any, actual: Any, path: str, found: list[str], *, strict: bool,
             sides: tuple[str, str] = ('in the code', 'there')) -> None:
    if isinstance(expected, Mapping) and isinstance(actual, Mapping):
        for key, value in expected.items():
            if key not in actual:
                found.append(f"{path}.{key}: {_short(value)} {sides[0]}, absent {sides[1]}")
            else:
                _compare(value, actual[key], f"{path}.{key}", found,
                         strict=strict or key == 'openAPIV3Schema', sides=sides)
        if strict:  # within a schema, whatever it has more is a difference too
            for key in actual:
                if key not in expected:
                    found.append(f"{path}.{key}: {_short(actual[key])} {sides[1]}, absent {sides[0]}")
    elif isinstance(expected, list) and isinstance(actual, list) and \
            all(isinstance(item, Mapping) and 'name' in item for item in [*expected, *actual]):
        actual_by_name = {item['name']: item for item in actual}
        for item in expected:
            if item['name'] not in actual_by_name:
                found.append(f"{path}[{item['name']}]: {sides[0]}, absent {sides[1]}")
            else:
                _compare(item, actual_by_name[item['name']], f"{path}[{item['name']}]", found,
                         strict=strict, sides=sides)
        for item in actual:
            if item['name'] not in {e['name'] for e in expected}:
                found.append(f"{path}[{item['name']}]: {sides[1]}, absent {sides[0]}")
    elif expected != actual:
        found.append(f"{path}: {_short(expected)} {sides[0]}, {_short(actual)} {sides[1]}")


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 80 else f"{text[:77]}..."


async def read(registry: OperatorRegistry, names: Sequence[str]) -> list[dict[str, Any] | None]:
    """The CRDs of these names as the cluster has them (None: absent), with the operator's login."""
    connection = await _connect(registry, OperatorSettings())
    try:
        return await _read(connection, [crd_path(name) for name in names])
    except RuntimeError as e:
        raise OperatorError(str(e)) from None


def round_trips(registry: OperatorRegistry, samples: Sequence[Mapping[str, Any]],
                declared: Sequence[type[CustomResource]] | None = None) -> list[str]:
    """Each sample object converted by the operator's conversion handlers to every other version
    of its resource (of the models declared) and back: what does not come back the same, what
    does not fit the other version's model on the way, and what has no way there or back."""
    declared = MODELS if declared is None else declared
    problems: list[str] = []
    for sample in samples:
        group, _, version = str(sample.get('apiVersion', '')).rpartition('/')
        meta = sample.get('metadata') or {}
        what = f"{sample.get('kind')} {meta.get('name')} ({sample.get('apiVersion')})"
        own = [m for m in declared if (m.__kopf_resource__.group, m.__kopf_resource__.kind,
                                     m.__kopf_resource__.version) == (group, sample.get('kind'), version)]
        if not own:
            problems.append(f"{what}: no model of this kind and version")
            continue
        names = own[0].__kopf_resource__
        others = [m for m in declared if m.__kopf_resource__.name == names.name and m is not own[0]]
        resource = Resource(names.group, version, names.plural, kind=names.kind,
                            singular=names.singular, namespaced=names.scope == 'Namespaced')
        handlers = [h for h in registry._conversions if h.selector.check(resource)]
        for other in others:
            there, back = other.__kopf_resource__.version, version
            problems += _round_trip(what, dict(sample), handlers, resource, there, back, other)
    return problems


def _round_trip(what: str, sample: dict[str, Any], handlers: list[ConversionHandler], resource: Resource,
                there: str, back: str, model: type[CustomResource]) -> list[str]:
    forth, home = _steps(handlers, back, there), _steps(handlers, there, back)
    if forth is None or home is None:
        missing = f"{back} to {there}" if forth is None else f"{there} to {back}"
        return [f"{what}: no conversion handlers lead from {missing}"]
    try:
        converted = _converted(handlers, sample, forth, resource)
        model.model_validate(converted)
        returned = _converted(handlers, converted, home, resource)
    except (ConversionError, ValueError) as e:
        return [f"{what}: to {there} and back: {e}"]
    found: list[str] = []
    for key in ('spec', 'status'):
        _compare(sample.get(key), returned.get(key), f"{what}: to {there} and back: {key}", found, strict=True,
                 sides=('before', 'after'))
    for key in ('labels', 'annotations'):
        _compare((sample.get('metadata') or {}).get(key), (returned.get('metadata') or {}).get(key),
                 f"{what}: to {there} and back: metadata.{key}", found, strict=True, sides=('before', 'after'))
    return found


def _steps(handlers: list[ConversionHandler], source: str, target: str) -> list[int] | None:
    """The shortest chain of steps (positions in ``handlers``) from one version to another."""
    paths: dict[str, list[int]] = {source: []}
    queue = [source]
    while queue:
        version = queue.pop(0)
        if version == target:
            return paths[version]
        for index, handler in enumerate(handlers):
            if handler.source == version and handler.target not in paths:
                paths[handler.target] = [*paths[version], index]
                queue.append(handler.target)
    return None


def _converted(handlers: list[ConversionHandler], obj: dict[str, Any], chain: list[int],
               resource: Resource) -> dict[str, Any]:
    memos = ObjectMemos(Memo())  # (as the operator's memo: a fresh one)
    converting = Converting(handlers=handlers, settings=OperatorSettings(), memos=memos, indices={})
    request = {'resource': {}, 'objects': [(obj, chain)]}  # (the resource is given apart)
    answer = asyncio.run(converting.convert(request, resource))  # type: ignore[arg-type]
    if 'error' in answer:
        raise ConversionError(answer['error'])
    [converted] = json.loads(answer['converted'])
    return converted  # type: ignore[no-any-return]
