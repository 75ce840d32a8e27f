"""`kopf deploy manifests`' rendering of the generated charts' templates (without Helm): what
those templates use, and a clear refusal of the rest. (tests/engine/test_helm_charts.py compares
whole charts with `helm template`.)"""

from __future__ import annotations

import pytest
from kopf._operating.templating import TemplateError, check, render

RELEASE = {'Name': 'rel', 'Namespace': 'ns1'}


def rendered(template: str, **values: object) -> str:
    return render(template, values=values, release=RELEASE, files={'files/a.py': 'x = 1\n', 'other/b': 'b'})


def test_values_release_and_pipelines() -> None:
    assert rendered('image: {{ .Values.image | quote }}\nns: {{ .Release.Namespace }}', image='i:1') == \
        'image: "i:1"\nns: ns1'
    assert rendered('args: {{ .Values.names | toJson }}', names=['a', 'b']) == 'args: ["a","b"]'
    assert rendered('r:\n  {{- toYaml .Values.r | nindent 2 }}', r={'b': 1, 'a': {'c': 2}}) == \
        'r:\n  a:\n    c: 2\n  b: 1'


def test_trimming_and_blocks() -> None:
    template = 'a\n{{- if gt (int .Values.n) 1 }}\nmany\n{{- else }}\none\n{{- end }}\nz'
    assert rendered(template, n=2) == 'a\nmany\nz'
    assert rendered(template, n=1) == 'a\none\nz'
    assert rendered('{{- if not .Values.x }}none{{- end }}', x={}) == 'none'
    assert rendered('e:{{- with .Values.env }} {{ . }}{{- end }}', env=[]) == 'e:'


def test_range_sees_the_root_as_dollar() -> None:
    template = '{{- range .Values.ns }}\n- {{ . }} in {{ $.Release.Name }}{{- end }}'
    assert rendered(template, ns=['a', 'b']) == '\n- a in rel\n- b in rel'


def test_files_as_config() -> None:
    assert rendered('data:\n  {{- (.Files.Glob "files/*").AsConfig | nindent 2 }}') == "data:\n  a.py: |\n    x = 1"


@pytest.mark.parametrize('template, expected', [
    ('{{ .Values.x | upper }}', "the generated charts use no function 'upper'"),
    ('{{ include "helper" . }}', "the generated charts use no function 'include'"),
    ('{{- if .Values.x }}never closed', "has no {{ end }}"),
    ('{{ end }}', "without its block"),
])
def test_what_the_charts_do_not_use_is_refused(template: str, expected: str) -> None:
    with pytest.raises(TemplateError) as e:
        rendered(template, x=1)
    assert expected in str(e.value)


SCHEMA = {'type': 'object', 'additionalProperties': False, 'required': ['image'], 'properties': {
    'image': {'type': 'string', 'minLength': 1},
    'replicas': {'type': 'integer', 'minimum': 1},
    'names': {'type': 'array', 'minItems': 1, 'uniqueItems': True, 'items': {'type': 'string', 'pattern': '^[a-z]+$'}},
    'issuer': {'type': 'object', 'properties': {'name': {'type': 'string'}, 'kind': {'enum': ['A', 'B']}},
               'anyOf': [{'maxProperties': 0}, {'required': ['name', 'kind']}]},
}}


def test_values_that_fit_the_schema() -> None:
    assert check({'image': 'i:1', 'replicas': 2, 'names': ['a', 'b'], 'issuer': {}}, SCHEMA) == []
    assert check({'image': 'i:1', 'issuer': {'name': 'x', 'kind': 'A'}}, SCHEMA) == []


@pytest.mark.parametrize('values, expected', [
    ({'replicas': 1}, "(the values): 'image' is required"),
    ({'image': 'i', 'replicas': 'two'}, "replicas: 'two' is not an integer"),
    ({'image': 'i', 'replicas': True}, "replicas: True is not an integer"),
    ({'image': 'i', 'replicas': 0}, "replicas: 0 is below 1"),
    ({'image': 'i', 'names': ['a', 'a']}, "names: items repeat"),
    ({'image': 'i', 'names': ['A']}, "names[0]: 'A' does not match ^[a-z]+$"),
    ({'image': 'i', 'extra': 1}, "extra: not a value of this chart"),
    ({'image': 'i', 'issuer': {'name': 'x'}}, "issuer: fits none of: issuer: more than 0 fields; issuer: 'kind' is "
                                              "required"),
    ({'image': 'i', 'issuer': {'name': 'x', 'kind': 'C'}}, "issuer.kind: 'C' is not one of 'A', 'B'"),
])
def test_values_that_do_not_fit_are_named(values: dict[str, object], expected: str) -> None:
    assert expected in check(values, SCHEMA)


def test_a_value_that_a_function_cannot_take_names_the_template() -> None:
    with pytest.raises(TemplateError) as e:
        render('{{- if gt (int .Values.n) 1 }}x{{- end }}', values={'n': 'many'}, release=RELEASE, files={},
               where='templates/pdb.yaml')
    assert str(e.value).startswith("templates/pdb.yaml: cannot be rendered with these values: invalid literal")
