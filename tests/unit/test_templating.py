"""`kopf deploy manifests`' rendering of the generated charts' templates (without Helm): what
those templates use, and a clear refusal of the rest. (tests/engine/test_helm_charts.py compares
whole charts with `helm template`.)"""

from __future__ import annotations

import pytest
from kopf._operating.templating import TemplateError, render

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
