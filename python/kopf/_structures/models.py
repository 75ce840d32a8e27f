"""Custom resources declared as Python classes (pydantic models): ``kopf.CustomResource``.

A model names its resource (group, version, kind, plural, scope, ...) in its class statement
and describes its ``spec`` and ``status`` with pydantic's fields; ``kopf crd generate`` writes
the CRD from it (``kopf._operating.crds``). Not in Kopf: pydantic is needed only by operators
that declare models (``pip install pydantic``), and Kopf's scripts never import this module.
"""

from __future__ import annotations

import dataclasses
import os
import re
import sys
from collections.abc import Iterable, Sequence
from typing import Any, ClassVar

try:
    import pydantic
except ImportError as e:  # pragma: no cover (the message is what a user sees)
    raise ImportError("kopf.CustomResource needs pydantic 2: pip install 'pydantic>=2'") from e

SCOPES = ('Namespaced', 'Cluster')
NAME = re.compile(r'[a-z0-9]([-a-z0-9]*[a-z0-9])?')
GROUP = re.compile(r'[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)+')
VERSION = re.compile(r'v[1-9][0-9]*((alpha|beta)[1-9][0-9]*)?')
KIND = re.compile(r'[A-Z][A-Za-z0-9]*')


class ModelError(ValueError):
    """A model that cannot be a custom resource: said when its class is defined."""


@dataclasses.dataclass(frozen=True)
class PrinterColumn:
    """A column of ``kubectl get`` (``additionalPrinterColumns``): its name, the JSON path of
    its value (``.spec.who``), and its type (``string``, ``integer``, ``number``, ``boolean``,
    ``date``); optionally a description, a format, and a priority (0: always shown)."""
    name: str
    json_path: str
    type: str = 'string'
    description: str | None = None
    format: str | None = None
    priority: int = 0


@dataclasses.dataclass(frozen=True)
class CEL:
    """A validation rule in CEL that the API server checks (``x-kubernetes-validations``), for
    a field's annotation: ``Annotated[int, kopf.CEL('self % 2 == 0', message='even only')]``,
    or on a field that holds a model, for rules across its fields
    (``Annotated[Spec, kopf.CEL('self.low <= self.high')]``). ``message``: what the server says
    when it fails (or ``message_expression``, a CEL expression of it); ``reason``: the failure's
    reason (``FieldValueInvalid``, ``FieldValueForbidden``, ...); ``field_path``: the field it
    is about; ``optional_old_self``: a transition rule also checked on creation. Not checked by
    the operator: pydantic does not run CEL."""
    rule: str
    message: str | None = None
    message_expression: str | None = None
    reason: str | None = None
    field_path: str | None = None
    optional_old_self: bool | None = None

    def __get_pydantic_json_schema__(self, schema: Any, handler: Any) -> dict[str, Any]:
        found: dict[str, Any] = dict(handler(schema))
        rule: dict[str, Any] = {'rule': self.rule}
        for key, value in (('message', self.message), ('messageExpression', self.message_expression),
                           ('reason', self.reason), ('fieldPath', self.field_path),
                           ('optionalOldSelf', self.optional_old_self)):
            if value is not None:
                rule[key] = value
        # Beside a model's reference (not in it): the rule is this field's, not every use's.
        found['x-kubernetes-validations'] = [*found.get('x-kubernetes-validations', []), rule]
        return found


@dataclasses.dataclass(frozen=True)
class Declaration:
    """What a model's class statement says of its resource."""
    group: str
    version: str
    kind: str
    plural: str
    singular: str
    scope: str
    short_names: tuple[str, ...]
    categories: tuple[str, ...]
    printer_columns: tuple[PrinterColumn, ...]
    storage: bool | None  # None: not said (the only version, or an error among several)
    served: bool

    @property
    def name(self) -> str:
        """The CRD's name: ``plural.group``."""
        return f"{self.plural}.{self.group}"


def pluralized(kind: str) -> str:
    """The plural that Kubernetes' tools give a kind by default, in lower case."""
    lower = kind.lower()
    if re.search(r'(s|x|z|ch|sh)$', lower):
        return f"{lower}es"
    if re.search(r'[^aeiou]y$', lower):
        return f"{lower[:-1]}ies"
    return f"{lower}s"


class CustomResource(pydantic.BaseModel):
    """A custom resource's object as a model: subclass it with the resource's names, and give it
    ``spec`` and ``status`` fields of your own models::

        class Greeting(kopf.CustomResource, group='demo.kopf.dev', version='v1'):
            '''A greeting, said by the operator.'''
            spec: GreetingSpec
            status: GreetingStatus | None = None

    The class statement's keywords:

    - ``group``, ``version``: the API group and the version (required);
    - ``kind``: the class's name unless given; ``plural`` and ``singular``: the kind in lower
      case, pluralized as Kubernetes' tools do, unless given;
    - ``scope``: ``'Namespaced'`` (the default) or ``'Cluster'``;
    - ``short_names``, ``categories``: for ``kubectl`` (``kubectl get gr``, ``kubectl get all``);
    - ``printer_columns``: ``kopf.PrinterColumn``'s for ``kubectl get``;
    - ``storage``: which of several versions of one resource is stored (exactly one);
    - ``served``: whether the API serves this version (default: True);
    - ``abstract=True``: a base class of models (their common fields), not a resource itself.

    A ``status`` field makes the status a subresource (as Kopf's operators mostly expect).
    The objects' ``apiVersion``, ``kind`` and ``metadata`` are fields of every model.
    """

    model_config = pydantic.ConfigDict(populate_by_name=True, extra='allow')

    api_version: str | None = pydantic.Field(None, alias='apiVersion')
    kind: str | None = None
    metadata: dict[str, Any] = pydantic.Field(default_factory=dict)

    __kopf_resource__: ClassVar[Declaration]

    def __init_subclass__(cls, **kwargs: Any) -> None:
        for name in _KEYWORDS:
            kwargs.pop(name, None)  # (read in __pydantic_init_subclass__, once the fields are known)
        super().__init_subclass__(**kwargs)

    @classmethod
    def __pydantic_init_subclass__(cls, **kwargs: Any) -> None:
        super().__pydantic_init_subclass__(**{k: v for k, v in kwargs.items() if k not in _KEYWORDS})
        if kwargs.get('abstract'):
            return  # a base of models, with their common fields: no resource of its own
        if 'group' not in kwargs and 'version' not in kwargs and hasattr(cls, '__kopf_resource__'):
            return  # a subclass of a declared model, for another purpose: it keeps its parent's names
        kwargs.pop('abstract', None)
        cls.__kopf_resource__ = _declared(cls, **{k: v for k, v in kwargs.items() if k in _KEYWORDS})
        MODELS.append(cls)


_KEYWORDS = frozenset({'group', 'version', 'kind', 'plural', 'singular', 'scope', 'short_names', 'categories',
                       'printer_columns', 'storage', 'served', 'abstract'})

# Every declared model, in the order of their definitions: what `kopf crd generate` writes.
MODELS: list[type[CustomResource]] = []


def described(cls: type) -> str:
    """A model as messages name it: its module's (a handlers' file's name for `kopf run FILE`)."""
    module = cls.__module__
    if module.startswith('__kopf_script_'):  # (a pseudo-name of a file's module: its path)
        module = os.path.basename(getattr(sys.modules.get(module), '__file__', None) or module)
    return f"{module}:{cls.__qualname__}"


def _declared(cls: type, *, group: str | None = None, version: str | None = None, kind: str | None = None,
              plural: str | None = None, singular: str | None = None, scope: str = 'Namespaced',
              short_names: Iterable[str] = (), categories: Iterable[str] = (),
              printer_columns: Sequence[PrinterColumn] = (), storage: bool | None = None,
              served: bool = True) -> Declaration:
    where = described(cls)
    if group is None or version is None:
        raise ModelError(f"{where}: a custom resource needs group= and version= in its class statement")
    kind = kind if kind is not None else cls.__name__
    plural = plural if plural is not None else pluralized(kind)
    singular = singular if singular is not None else kind.lower()
    checks = [(GROUP, group, 'group', "a DNS subdomain with a dot: 'demo.example.com'"),
              (VERSION, version, 'version', "'v1', 'v1beta2', 'v2alpha1'"),
              (KIND, kind, 'kind', "CamelCase, starting with a capital letter"),
              (NAME, plural, 'plural', "lower case letters, digits and dashes"),
              (NAME, singular, 'singular', "lower case letters, digits and dashes")]
    for pattern, value, what, like in checks:
        if not isinstance(value, str) or pattern.fullmatch(value) is None:
            raise ModelError(f"{where}: {what}={value!r} is not valid: {like}")
    if scope not in SCOPES:
        raise ModelError(f"{where}: scope={scope!r} is neither of {', '.join(map(repr, SCOPES))}")
    names = tuple(short_names) if not isinstance(short_names, str) else (short_names,)
    groups = tuple(categories) if not isinstance(categories, str) else (categories,)
    for name in (*names, *groups):
        if NAME.fullmatch(name) is None:
            raise ModelError(f"{where}: {name!r} is not a valid short name or category: lower case letters, "
                             f"digits and dashes")
    for column in printer_columns:
        if not isinstance(column, PrinterColumn):
            raise ModelError(f"{where}: printer_columns= takes kopf.PrinterColumn's, not {column!r}")
    if storage is not None and not isinstance(storage, bool):
        raise ModelError(f"{where}: storage= is True or False, not {storage!r}")
    return Declaration(group=group, version=version, kind=kind, plural=plural, singular=singular, scope=scope,
                       short_names=names, categories=groups, printer_columns=tuple(printer_columns),
                       storage=storage, served=bool(served))
