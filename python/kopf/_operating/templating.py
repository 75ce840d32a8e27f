"""The charts of ``kopf deploy generate`` rendered without Helm (``kopf deploy manifests``): plain
manifests for those who apply YAML (``kubectl apply``, a kustomize base) rather than install
charts. Only what those templates use is known here: Go templates' ``{{ }}`` actions with
``{{-`` trimming; ``if``/``else``/``with``/``range``/``end``; the fields of ``.Values``,
``.Release`` and ``$``; and Helm's functions ``quote``, ``toJson``, ``toYaml``, ``nindent``,
``int``, ``gt``, ``not`` and ``(.Files.Glob "...").AsConfig``. Anything else (a template
edited by hand) is refused by name, not rendered wrongly. The values are checked by the chart's
``values.schema.json`` first, as Helm checks them (``check``: the parts of JSON Schema that the
generated schemas use). The tests compare the output with
``helm template``'s for the charts that the generator makes.
"""

from __future__ import annotations

import fnmatch
import json
import re
import shlex
from collections.abc import Mapping
from typing import Any

import yaml

ACTION = re.compile(r'\{\{(-?)\s*(.*?)\s*(-?)\}\}', re.DOTALL)
BLOCKS = ('if', 'with', 'range')


class TemplateError(ValueError):
    """A template that uses more than the generated charts do."""


def render(template: str, *, values: Mapping[str, Any], release: Mapping[str, str],
           files: Mapping[str, str], where: str = 'the template') -> str:
    """The template's text with its actions done, as Helm would do them."""
    root = {'Values': values, 'Release': release, 'Files': files}
    tree, rest = _parse(_tokens(template), where)
    if rest:
        raise TemplateError(f"{where}: {{{{ {rest[0][1]} }}}} without its block")
    try:
        return _run(tree, dot=root, root=root, where=where)
    except TemplateError:
        raise
    except (TypeError, ValueError, AttributeError) as e:  # e.g. `int` of a value that is not a number
        raise TemplateError(f"{where}: cannot be rendered with these values: {e}") from None


def _tokens(template: str) -> list[tuple[str, str]]:
    """Text and actions in order, the text trimmed where an action says ``{{-`` or ``-}}``."""
    tokens: list[tuple[str, str]] = []
    position, trim_next = 0, False
    for match in ACTION.finditer(template):
        text = template[position:match.start()]
        text = text.lstrip() if trim_next else text
        tokens.append(('text', text.rstrip() if match.group(1) else text))
        tokens.append(('action', match.group(2)))
        position, trim_next = match.end(), bool(match.group(3))
    text = template[position:]
    tokens.append(('text', text.lstrip() if trim_next else text))
    return tokens


Node = tuple[str, Any]


def _parse(tokens: list[tuple[str, str]], where: str) -> tuple[list[Node], list[tuple[str, str]]]:
    """A tree of the tokens up to an ``else``/``end`` (returned with what follows it)."""
    nodes: list[Node] = []
    while tokens:
        kind, value = tokens[0]
        if kind == 'text':
            nodes.append(('text', value))
            tokens = tokens[1:]
            continue
        word = value.split(None, 1)[0] if value else ''
        if word in ('else', 'end'):
            return nodes, tokens
        tokens = tokens[1:]
        if word in BLOCKS:
            body, tokens = _parse(tokens, where)
            otherwise: list[Node] = []
            if tokens and tokens[0][1] == 'else':
                otherwise, tokens = _parse(tokens[1:], where)
            if not tokens or tokens[0][1] != 'end':
                raise TemplateError(f"{where}: {{{{ {value} }}}} has no {{{{ end }}}}")
            tokens = tokens[1:]
            nodes.append((word, (value.split(None, 1)[1], body, otherwise)))
        else:
            nodes.append(('output', value))
    return nodes, []


def _run(nodes: list[Node], *, dot: Any, root: Any, where: str) -> str:
    out: list[str] = []
    for kind, value in nodes:
        if kind == 'text':
            out.append(value)
        elif kind == 'output':
            out.append(_text(_pipeline(value, dot=dot, root=root, where=where)))
        else:
            expression, body, otherwise = value
            found = _pipeline(expression, dot=dot, root=root, where=where)
            if kind == 'range':
                items = list(found.values()) if isinstance(found, Mapping) else list(found or [])
                out.extend(_run(body, dot=item, root=root, where=where) for item in items)
                if not items:
                    out.append(_run(otherwise, dot=dot, root=root, where=where))
            elif _true(found):
                out.append(_run(body, dot=found if kind == 'with' else dot, root=root, where=where))
            else:
                out.append(_run(otherwise, dot=dot, root=root, where=where))
    return ''.join(out)


def _true(value: Any) -> bool:
    return bool(value) if value is not None else False  # (Go's emptiness: "", 0, [], {}, false, nil)


def _text(value: Any) -> str:
    if value is None:
        return ''
    if isinstance(value, bool):
        return 'true' if value else 'false'
    if isinstance(value, (dict, list)):
        raise TemplateError(f"a map or a list printed as text: {value!r}")
    return str(value)


def _pipeline(expression: str, *, dot: Any, root: Any, where: str) -> Any:
    stages = [stage.strip() for stage in _split(expression, '|')]
    value = _command(stages[0], None, dot=dot, root=root, where=where)
    for stage in stages[1:]:
        value = _command(stage, value, dot=dot, root=root, where=where)
    return value


def _split(expression: str, separator: str) -> list[str]:
    """Split at the separator outside quotes and parentheses."""
    parts, depth, quoted, current = [], 0, False, ''
    for char in expression:
        if char == '"':
            quoted = not quoted
        elif not quoted and char == '(':
            depth += 1
        elif not quoted and char == ')':
            depth -= 1
        if char == separator and not quoted and depth == 0:
            parts.append(current)
            current = ''
        else:
            current += char
    return [*parts, current]


def _command(text: str, piped: Any, *, dot: Any, root: Any, where: str) -> Any:
    words = _words(text)
    name, args = words[0], [_term(word, dot=dot, root=root, where=where) for word in words[1:]]
    if name in FUNCTIONS:
        return FUNCTIONS[name](*args, *([piped] if piped is not None else []))
    if piped is not None or not name.startswith(('.', '$', '(', '"')):
        raise TemplateError(f"{where}: {{{{ ... {text} }}}}: the generated charts use no function {name!r}")
    head = _term(name, dot=dot, root=root, where=where)
    if isinstance(head, _Glob) and len(args) == 1 and piped is None:
        return _glob(args[0], head)
    if args or piped is not None:
        raise TemplateError(f"{where}: {text!r}: the generated charts use no function {name!r}")
    return head


def _words(text: str) -> list[str]:
    """The command's words: fields, literals, and parenthesised pipelines (kept whole)."""
    words, depth, current = [], 0, ''
    for char in text:
        if char == '(':
            depth += 1
        elif char == ')':
            depth -= 1
        if char.isspace() and depth == 0:
            if current:
                words.append(current)
            current = ''
        else:
            current += char
    return [*words, current] if current else words


def _term(word: str, *, dot: Any, root: Any, where: str) -> Any:
    if word.startswith('('):
        inner, _, field = word[1:].rpartition(')')
        value = _pipeline(inner, dot=dot, root=root, where=where)
        if field == '.AsConfig' and isinstance(value, dict):
            return _to_yaml(value)
        if field:
            raise TemplateError(f"{where}: {word!r}: the generated charts use no {field!r}")
        return value
    if word.startswith('"'):
        return shlex.split(word)[0]
    if re.fullmatch(r'-?[0-9]+', word):
        return int(word)
    if word in ('.', '$'):
        return dot if word == '.' else root
    if word.startswith(('.', '$.')):
        value = root if word.startswith('$') else dot
        for field in word.removeprefix('$').strip('.').split('.'):
            if field == 'Glob' and value is root.get('Files'):
                return _Glob(value)
            value = value.get(field) if isinstance(value, Mapping) else None
        return value
    raise TemplateError(f"{where}: {word!r}: the generated charts use no such term")


class _Glob:
    """``.Files.Glob``, called: the chart's files whose paths match the pattern."""

    def __init__(self, files: Mapping[str, str]) -> None:
        self.files = files


def _glob(pattern: str, glob: _Glob) -> dict[str, str]:
    return {path.rpartition('/')[2]: text for path, text in sorted(glob.files.items())
            if fnmatch.fnmatch(path, pattern)}


class _Dumper(yaml.SafeDumper):
    """Multi-line strings (a handlers' file in a ConfigMap) as literal blocks, as Helm writes them."""


_Dumper.add_representer(str, lambda dumper, text: dumper.represent_scalar(
    'tag:yaml.org,2002:str', text, style='|' if '\n' in text else None))


def dump(document: Any) -> str:
    """A rendered object as YAML, in its own order, multi-line strings as literal blocks."""
    return yaml.dump(document, Dumper=_Dumper, default_flow_style=False, sort_keys=False, width=120)


def _to_yaml(value: Any) -> str:
    if value in ({}, []):
        return json.dumps(value)
    return yaml.dump(value, Dumper=_Dumper, default_flow_style=False, sort_keys=True, width=1 << 16).rstrip('\n')


def _nindent(width: int, text: Any) -> str:
    return '\n' + '\n'.join(' ' * width + line if line else line for line in str(text).split('\n'))


FUNCTIONS: dict[str, Any] = {
    'quote': lambda value: json.dumps(_text(value)),
    'toJson': lambda value: json.dumps(value, separators=(',', ':')),
    'toYaml': _to_yaml,
    'nindent': _nindent,
    'int': int,
    'gt': lambda a, b: a > b,
    'not': lambda value: not _true(value),
}


TYPES: dict[str, Any] = {'object': dict, 'array': list, 'string': str, 'boolean': bool, 'integer': int,
                         'number': (int, float)}


def check(value: Any, schema: Mapping[str, Any], where: str = '') -> list[str]:
    """What in the value the schema refuses, one line per field (empty: all fits). Only what the
    generated schemas use: type, enum, required, properties, additionalProperties, items,
    minItems, uniqueItems, minimum, maximum, minLength, maxLength, pattern, maxProperties, anyOf."""
    at = where or '(the values)'
    expected = schema.get('type')
    if expected is not None:
        kind = TYPES[expected]
        if not isinstance(value, kind) or (isinstance(value, bool) and expected in ('integer', 'number')):
            return [f"{at}: {value!r} is not {'an' if expected[0] in 'aeiou' else 'a'} {expected}"]
    errors: list[str] = []
    if 'enum' in schema and value not in schema['enum']:
        errors.append(f"{at}: {value!r} is not one of {', '.join(map(repr, schema['enum']))}")
    if isinstance(value, dict):
        errors += [f"{at}: {name!r} is required" for name in schema.get('required', []) if name not in value]
        properties = schema.get('properties', {})
        for name, item in value.items():
            field = f"{where}.{name}" if where else str(name)
            if name in properties:
                errors += check(item, properties[name], field)
            elif schema.get('additionalProperties') is False:
                errors.append(f"{field}: not a value of this chart")
        if len(value) > schema.get('maxProperties', len(value)):
            errors.append(f"{at}: more than {schema['maxProperties']} fields")
    if isinstance(value, list):
        if len(value) < schema.get('minItems', 0):
            errors.append(f"{at}: fewer than {schema['minItems']} items")
        if schema.get('uniqueItems') and len({json.dumps(item, sort_keys=True) for item in value}) < len(value):
            errors.append(f"{at}: items repeat")
        for index, item in enumerate(value):
            errors += check(item, schema.get('items', {}), f"{where}[{index}]")
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        if 'minimum' in schema and value < schema['minimum']:
            errors.append(f"{at}: {value} is below {schema['minimum']}")
        if 'maximum' in schema and value > schema['maximum']:
            errors.append(f"{at}: {value} is above {schema['maximum']}")
    if isinstance(value, str):
        if len(value) < schema.get('minLength', 0) or len(value) > schema.get('maxLength', len(value)):
            errors.append(f"{at}: {value!r} is not {schema.get('minLength', 0)}-{schema.get('maxLength', '')} long")
        if 'pattern' in schema and not re.search(schema['pattern'], value):
            errors.append(f"{at}: {value!r} does not match {schema['pattern']}")
    if 'anyOf' in schema and all(check(value, option, where) for option in schema['anyOf']):
        errors.append(f"{at}: fits none of: " + '; '.join(' and '.join(check(value, option, where))
                                                          for option in schema['anyOf']))
    return errors
