"""Custom resources declared as pydantic models (`kopf.CustomResource`): the CRD written from
them (structural schemas, versions, names), what cannot be written refused with the field's
path, the comparison of `kopf crd verify`, and handlers' arguments validated into models."""

from __future__ import annotations

import asyncio
import datetime
from collections.abc import Iterator
from pathlib import Path
from typing import Annotated, Any, Literal

import kopf
import pydantic
import pytest
import yaml
from kopf._handling import models as handling
from kopf._operating import crds, schemas
from kopf._structures import models
from kopf._structures.models import ModelError
from kopf._structures.references import Selector
from pydantic import BaseModel, Field


@pytest.fixture(autouse=True)
def fresh_models() -> Iterator[None]:
    """Each test declares its own models (the CLI sees the operator's only)."""
    kept = list(models.MODELS)
    models.MODELS.clear()
    yield
    models.MODELS[:] = kept


def schema_of(spec: type[BaseModel]) -> dict[str, Any]:
    class Thing(kopf.CustomResource, group='test.kopf.dev', version='v1'):
        spec: spec  # type: ignore[valid-type]

    [crd] = crds.documents([Thing])
    return crd['spec']['versions'][0]['schema']['openAPIV3Schema']['properties']['spec']  # type: ignore[no-any-return]


def test_fields_become_a_structural_schema_with_their_checks_and_descriptions() -> None:
    class Inner(BaseModel):
        """An inner part."""
        name: str

    class Spec(BaseModel):
        """The spec."""
        who: str = Field(description="Whom to greet.", min_length=1, max_length=63, pattern='^[a-z]+$')
        count: int | None = Field(None, gt=0, le=10)
        ratio: float = Field(0.5, ge=0, lt=1)
        mode: Literal['a', 'b'] = 'a'
        port: int | str = 80
        labels: dict[str, int] = {}
        free: dict[str, Any] = {}
        anything: Any = None
        tags: set[str] = set()
        parts: list[Inner] = []
        when: datetime.datetime | None = None
        ruled: Annotated[int, Field(json_schema_extra={'x-kubernetes-validations': [
            {'rule': 'self % 2 == 0', 'message': 'must be even'}]})] = 0

    assert schema_of(Spec) == {
        'type': 'object', 'description': 'The spec.',
        'properties': {
            'who': {'type': 'string', 'description': 'Whom to greet.', 'minLength': 1, 'maxLength': 63,
                    'pattern': '^[a-z]+$'},
            'count': {'type': 'integer', 'maximum': 10, 'minimum': 0, 'exclusiveMinimum': True, 'nullable': True},
            'ratio': {'type': 'number', 'minimum': 0, 'maximum': 1, 'exclusiveMaximum': True, 'default': 0.5},
            'mode': {'type': 'string', 'enum': ['a', 'b'], 'default': 'a'},
            'port': {'x-kubernetes-int-or-string': True, 'default': 80},
            'labels': {'type': 'object', 'default': {}, 'additionalProperties': {'type': 'integer'}},
            'free': {'type': 'object', 'default': {}, 'x-kubernetes-preserve-unknown-fields': True},
            'anything': {'x-kubernetes-preserve-unknown-fields': True},
            'tags': {'type': 'array', 'default': [], 'items': {'type': 'string'}, 'x-kubernetes-list-type': 'set'},
            'parts': {'type': 'array', 'default': [], 'items': {
                'type': 'object', 'description': 'An inner part.', 'properties': {'name': {'type': 'string'}},
                'required': ['name']}},
            'when': {'type': 'string', 'format': 'date-time', 'nullable': True},
            'ruled': {'type': 'integer', 'default': 0,
                      'x-kubernetes-validations': [{'rule': 'self % 2 == 0', 'message': 'must be even'}]},
        },
        'required': ['who'],
    }


def test_extra_keys_allowed_by_the_model_are_kept_by_the_server() -> None:
    class Spec(BaseModel):
        model_config = pydantic.ConfigDict(extra='allow')
        known: str = ''

    assert schema_of(Spec)['x-kubernetes-preserve-unknown-fields'] is True


@pytest.mark.parametrize('annotation, error', [
    (dict[str, int] | list[int], "spec.field: a union of several types has no structural schema"),
    (tuple[int, str], "spec.field: prefixItems has no structural form"),
])
def test_a_type_without_a_structural_schema_fails_with_its_path(annotation: Any, error: str) -> None:
    spec = pydantic.create_model('Spec', field=(annotation, ...))
    with pytest.raises(schemas.SchemaError, match=error):
        schema_of(spec)


def test_a_recursive_model_fails_with_what_to_write_instead() -> None:
    class Node(BaseModel):
        children: list[Node] = []

    with pytest.raises(schemas.SchemaError, match=r"spec.children.\[\]: Node contains itself"):
        schema_of(Node)


def test_the_class_statement_names_the_resource() -> None:
    class Spec(BaseModel):
        who: str

    class Policy(kopf.CustomResource, group='test.kopf.dev', version='v1beta1', scope='Cluster',
                 short_names=['pol'], categories=['all'],
                 printer_columns=[kopf.PrinterColumn('Who', '.spec.who', description="whom")]):
        """A policy."""
        spec: Spec
        status: dict[str, Any] | None = None

    [crd] = crds.documents([Policy])
    assert crd['metadata'] == {'name': 'policies.test.kopf.dev'}
    assert crd['spec']['names'] == {'kind': 'Policy', 'listKind': 'PolicyList', 'plural': 'policies',
                                    'singular': 'policy', 'shortNames': ['pol'], 'categories': ['all']}
    assert crd['spec']['scope'] == 'Cluster'
    [version] = crd['spec']['versions']
    assert version['name'] == 'v1beta1' and version['served'] and version['storage']
    assert version['subresources'] == {'status': {}}
    assert version['additionalPrinterColumns'] == [
        {'name': 'Who', 'type': 'string', 'jsonPath': '.spec.who', 'description': 'whom'}]
    top = version['schema']['openAPIV3Schema']
    assert top['description'] == 'A policy.' and top['required'] == ['spec']
    assert list(top['properties']) == ['apiVersion', 'kind', 'metadata', 'spec', 'status']
    assert top['properties']['metadata'] == {'type': 'object'}
    # Kopf keeps its progress and the handlers' results in the status: not pruned.
    assert top['properties']['status']['x-kubernetes-preserve-unknown-fields'] is True
    assert Selector(Policy) == Selector('test.kopf.dev', 'v1beta1', 'policies')


def test_several_versions_make_one_crd_with_one_stored() -> None:
    class Old(kopf.CustomResource, group='test.kopf.dev', version='v1alpha1', kind='Widget'):
        spec: dict[str, Any]

    class New(kopf.CustomResource, group='test.kopf.dev', version='v1', kind='Widget', storage=True):
        spec: dict[str, Any]

    [crd] = crds.documents([Old, New])
    assert [(v['name'], v['storage']) for v in crd['spec']['versions']] == [('v1', True), ('v1alpha1', False)]
    assert crds.render([crd]) == crds.render(crds.documents([New, Old]))  # the same models, the same bytes


@pytest.mark.parametrize('storages, error', [
    ((None, None), r"exactly one version is stored \(storage=True\): 0 are"),
    ((True, True), r"exactly one version is stored \(storage=True\): 2 are"),
])
def test_the_stored_version_must_be_one(storages: tuple[bool | None, bool | None], error: str) -> None:
    class A(kopf.CustomResource, group='test.kopf.dev', version='v1', kind='Gadget', storage=storages[0]):
        pass

    class B(kopf.CustomResource, group='test.kopf.dev', version='v2', kind='Gadget', storage=storages[1]):
        pass

    with pytest.raises(ModelError, match=error):
        crds.documents([A, B])


@pytest.mark.parametrize('keywords, error', [
    ({'version': 'v1'}, "needs group= and version="),
    ({'group': 'nodots', 'version': 'v1'}, "group='nodots' is not valid"),
    ({'group': 'test.kopf.dev', 'version': '1'}, "version='1' is not valid"),
    ({'group': 'test.kopf.dev', 'version': 'v1', 'scope': 'Global'}, "scope='Global' is neither"),
    ({'group': 'test.kopf.dev', 'version': 'v1', 'plural': 'Things'}, "plural='Things' is not valid"),
])
def test_a_bad_declaration_fails_where_the_class_is_defined(keywords: dict[str, Any], error: str) -> None:
    with pytest.raises(ModelError, match=error):
        type('Bad', (kopf.CustomResource,), {}, **keywords)


def test_an_abstract_base_holds_common_fields_without_a_resource() -> None:
    class Base(kopf.CustomResource, abstract=True):
        spec: dict[str, Any]

    class Real(Base, group='test.kopf.dev', version='v1'):
        pass

    assert models.MODELS == [Real]


def test_differences_are_named_by_their_path() -> None:
    class Spec(BaseModel):
        who: str = Field(max_length=10)

    class Thing(kopf.CustomResource, group='test.kopf.dev', version='v1'):
        spec: Spec

    [expected] = crds.documents([Thing])
    same = yaml.safe_load(crds.render([expected]))
    same['spec']['conversion'] = {'strategy': 'None'}  # what the server adds: not a difference
    assert crds.differences(expected, same) == []
    changed = yaml.safe_load(crds.render([expected]))
    spec = changed['spec']['versions'][0]['schema']['openAPIV3Schema']['properties']['spec']
    spec['properties']['who']['maxLength'] = 20
    spec['properties']['extra'] = {'type': 'string'}
    path = "things.test.kopf.dev: spec.versions[v1].schema.openAPIV3Schema.properties.spec.properties"
    assert crds.differences(expected, changed) == [
        f"{path}.who.maxLength: 10 in the code, 20 there",
        f"{path}.extra: {{'type': 'string'}} there, absent in the code"]
    assert crds.differences(expected, None) == ["things.test.kopf.dev: absent"]


class Spec(BaseModel):
    who: str = Field(min_length=1)
    times: int = 1


class Status(BaseModel):
    said: str | None = None


def test_a_handlers_typed_arguments_are_validated_models() -> None:
    def handler(spec: Spec, status: Status | None, body: dict[str, Any], **_: Any) -> Status:
        return Status(said=f"{spec.who} x{spec.times}; before: {status.said if status else None}")

    wrapped = handling.typed(handler)
    result = wrapped(spec={'who': 'world'}, status={}, body={'spec': {'who': 'world'}})
    assert result == Status(said="world x1; before: None")
    assert handling.plain(result) == {'said': "world x1; before: None"}  # (as its result: what was set)
    with pytest.raises(kopf.PermanentError, match=r"spec is not a valid Spec: spec.who: String should have at "
                                                  r"least 1 character"):
        wrapped(spec={'who': ''}, status={}, body={})


def test_an_async_handler_stays_async_and_an_untyped_one_is_itself() -> None:
    async def handler(spec: Spec, **_: Any) -> str:
        return spec.who

    def untyped(spec: Any, **_: Any) -> None:
        pass

    wrapped = handling.typed(handler)
    assert asyncio.iscoroutinefunction(wrapped) and wrapped.__wrapped__ is handler  # type: ignore[attr-defined]
    assert asyncio.run(wrapped(spec={'who': 'x'})) == 'x'
    assert handling.typed(untyped) is untyped


def test_cel_rules_are_the_fields_own() -> None:
    class Range(BaseModel):
        low: int = 0
        high: int = 1

    class Spec(BaseModel):
        even: Annotated[int, kopf.CEL('self % 2 == 0', message='even only')] = 0
        range: Annotated[Range, kopf.CEL('self.low <= self.high', reason='FieldValueInvalid')]
        other: Range = Range()

    schema = schema_of(Spec)['properties']
    assert schema['even']['x-kubernetes-validations'] == [{'rule': 'self % 2 == 0', 'message': 'even only'}]
    assert schema['range']['x-kubernetes-validations'] == [{'rule': 'self.low <= self.high',
                                                            'reason': 'FieldValueInvalid'}]
    assert schema['range']['properties'] == schema['other']['properties']
    assert 'x-kubernetes-validations' not in schema['other']  # (the model's other use: not its rule)


class NameSpec(BaseModel):
    name: str
    email: str = ''


class PartsSpec(BaseModel):
    first: str = Field(min_length=1)
    last: str = ''


def split(spec: NameSpec, **_: Any) -> dict[str, Any]:
    first, _, last = spec.name.partition(' ')
    return {'spec': PartsSpec(first=first, last=last).model_dump()}  # the email is lost


def join(spec: PartsSpec, **_: Any) -> dict[str, Any]:
    return {'spec': NameSpec(name=f"{spec.first} {spec.last}".strip()).model_dump(exclude_defaults=True)}


def test_samples_convert_to_every_other_version_and_back() -> None:
    class Contact(kopf.CustomResource, group='test.kopf.dev', version='v1', storage=True):
        spec: NameSpec

    class ContactV2(kopf.CustomResource, group='test.kopf.dev', version='v2', kind='Contact'):
        spec: PartsSpec

    class ContactV3(kopf.CustomResource, group='test.kopf.dev', version='v3', kind='Contact'):
        spec: PartsSpec

    def sample(called: str, **spec: Any) -> dict[str, Any]:
        return {'apiVersion': 'test.kopf.dev/v1', 'kind': 'Contact', 'metadata': {'name': called}, 'spec': spec}

    declared = [Contact, ContactV2, ContactV3]
    registry = kopf.OperatorRegistry()
    kopf.on.convert(source=Contact, target=ContactV2, registry=registry)(split)
    kopf.on.convert(source=ContactV2, target=Contact, registry=registry)(join)
    assert crds.round_trips(registry, [sample('ada', name='Ada Lovelace')], declared) == [
        "Contact ada (test.kopf.dev/v1): no conversion handlers lead from v1 to v3"]
    kopf.on.convert(source=ContactV2, target=ContactV3, registry=registry)(lambda body, **_: {'spec': body['spec']})
    kopf.on.convert(source=ContactV3, target=ContactV2, registry=registry)(lambda body, **_: {'spec': body['spec']})
    assert crds.round_trips(registry, [sample('ada', name='Ada Lovelace')], declared) == []
    assert crds.round_trips(registry, [sample('alan', name='Alan Turing', email='alan@example.com')], declared) == [
        "Contact alan (test.kopf.dev/v1): to v2 and back: spec.email: 'alan@example.com' before, absent after",
        "Contact alan (test.kopf.dev/v1): to v3 and back: spec.email: 'alan@example.com' before, absent after"]
    # A step that makes what the next version's model refuses: said, with the model's errors.
    blanking = kopf.OperatorRegistry()
    kopf.on.convert(source=Contact, target=ContactV2, registry=blanking)(split)
    kopf.on.convert(source=ContactV2, target=Contact, registry=blanking)(join)
    kopf.on.convert(source=ContactV2, target=ContactV3, registry=blanking)(lambda body, **_: {'spec': {'first': ''}})
    kopf.on.convert(source=ContactV3, target=ContactV2, registry=blanking)(lambda body, **_: {'spec': body['spec']})
    [v3] = crds.round_trips(blanking, [sample('ada', name='Ada Lovelace')], declared)
    assert v3.startswith("Contact ada (test.kopf.dev/v1): to v3 and back: 1 validation error for ContactV3"), v3


def test_a_model_annotation_that_cannot_be_resolved_is_warned_about() -> None:
    class Local(BaseModel):
        who: str

    def handler(spec: Local, **_: Any) -> None:  # (a string here: `from __future__ import annotations`)
        pass

    with pytest.warns(UserWarning, match=r"handler: the annotation of spec \('Local'\) cannot be resolved"):
        assert handling.typed(handler) is handler


@pytest.mark.parametrize('code, error', [
    ("import kopf\n", "No models (subclasses of kopf.CustomResource) in the operator's code."),
    ("import kopf\nfrom pydantic import BaseModel\n\n"
     "class Node(BaseModel):\n    children: list['Node'] = []\n\n"
     "class Tree(kopf.CustomResource, group='test.kopf.dev', version='v1'):\n    spec: Node\n",
     "operator.py:Tree: spec.children.[]: Node contains itself"),
])
def test_the_command_fails_with_what_is_wrong(tmp_path: Any, code: str, error: str) -> None:
    from click.testing import CliRunner
    from kopf import cli
    (tmp_path / 'operator.py').write_text(code)
    result = CliRunner().invoke(cli.main, ['crd', 'generate', str(tmp_path / 'operator.py')])
    assert result.exit_code == 1 and error in result.output, result.output


def test_the_command_prints_the_same_bytes_for_the_same_models(tmp_path: Any) -> None:
    from click.testing import CliRunner
    from kopf import cli
    example = Path(__file__).parents[2] / 'examples' / 'typed' / 'operator.py'
    first = CliRunner().invoke(cli.main, ['crd', 'generate', str(example)])
    models.MODELS.clear()  # (as a second process would start)
    second = CliRunner().invoke(cli.main, ['crd', 'generate', str(example)])
    assert first.exit_code == 0 and first.output == second.output and 'name: beacons.typed.kopf.dev' in first.output
