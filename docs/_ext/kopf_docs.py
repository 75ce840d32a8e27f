"""The documentation's pages made from the code, so that they cannot drift from it: the public
API (every name, by autodoc; one without a docstring fails the build), the settings
(``kopf.OperatorSettings``, with their defaults and their attribute docstrings), the metrics (as
the core describes them), the keyword arguments of each kind of handler (the callback protocols
of ``kopf._handling.callbacks``), what of the surface is Kopf's and what is new, and the differences from
Kopf that the corpus of real operators accepts (``tests/compat/corpus/accepted.toml``)."""

from __future__ import annotations

import dataclasses
import enum
import inspect
import tomllib
from pathlib import Path
from typing import Any

from docutils import nodes
from docutils.statemachine import StringList
from sphinx.application import Sphinx
from sphinx.pycode import ModuleAnalyzer
from sphinx.util.docutils import SphinxDirective

ROOT = Path(__file__).parents[2]


class Generated(SphinxDirective):
    """A directive whose content is the reStructuredText that its ``lines()`` make (each
    directive below has its own)."""

    def run(self) -> list[nodes.Node]:
        # The pages are Markdown (MyST), whose parser reads the nested text: reStructuredText
        # goes in MyST's block for it.
        text = ['```{eval-rst}', *self.lines(), '```']  # type: ignore[attr-defined]
        container = nodes.container()
        self.state.nested_parse(StringList(text, source=type(self).__name__), self.content_offset, container)
        return container.children


def _cell(text: str) -> str:
    return ' '.join(text.split()) or ' '


def _table(header: list[str], rows: list[list[str]], widths: str = 'auto') -> list[str]:
    out = ['.. list-table::', '   :header-rows: 1', f'   :widths: {widths}', '']
    for row in [header, *rows]:
        out.append(f'   * - {_cell(row[0])}')
        out += [f'     - {_cell(cell)}' for cell in row[1:]]
    return out + ['']


def _default(field: dataclasses.Field[Any]) -> str:
    if field.default is not dataclasses.MISSING:
        value = field.default
    elif field.default_factory is not dataclasses.MISSING:
        value = field.default_factory()
    else:
        return '(required)'
    if isinstance(value, enum.Enum):
        return f'``{type(value).__name__}.{value.name}``'
    if dataclasses.is_dataclass(value) or callable(value) and not isinstance(value, type):
        return f'``{type(value).__name__}()``'
    return f'``{value!r}``'


class Settings(Generated):
    """``kopf.OperatorSettings``: every group and field, its default, and its docstring (a field
    without one fails the build, naming it)."""

    def lines(self) -> list[str]:
        import kopf
        out: list[str] = []
        undocumented: list[str] = []
        for group in dataclasses.fields(kopf.OperatorSettings):
            cls = type(getattr(kopf.OperatorSettings(), group.name))
            docs = ModuleAnalyzer.for_module(cls.__module__).find_attr_docs()
            out += [f'.. rubric:: settings.{group.name}', '']
            if cls.__doc__ and not cls.__doc__.startswith(f'{cls.__name__}('):
                out += [inspect.cleandoc(cls.__doc__), '']
            rows = []
            for field in dataclasses.fields(cls):
                if field.name.startswith('_'):
                    continue
                doc = ' '.join(docs.get((cls.__name__, field.name), []))
                if not doc:
                    undocumented.append(f'settings.{group.name}.{field.name}')
                rows.append([f'``{field.name}``', _default(field), doc])
            out += _table(['setting', 'default', 'what it does'], rows, '20 20 60')
        if undocumented:
            raise self.error(f"Settings without a docstring: {', '.join(undocumented)}")
        return out


class SettingsReading(Generated):
    """How each setting is read, by Kopf 1.45.2 and here (``kopf._structures.settings.READING``):
    a name there that is no setting fails the build."""

    def lines(self) -> list[str]:
        import kopf
        from kopf._structures.settings import READING, reading
        rows, names = [], set()
        for group in dataclasses.fields(kopf.OperatorSettings):
            cls = type(getattr(kopf.OperatorSettings(), group.name))
            ours_alone = 'not in Kopf' in (cls.__doc__ or '')
            for field in [f.name for f in dataclasses.fields(cls)] + [
                    name for name, value in vars(cls).items() if isinstance(value, property)]:
                if field.startswith('_') or field == 'namespaced':
                    continue
                name = f'{group.name}.{field}'
                names.add(name)
                kopfs, ours = reading(name)
                rows.append([f'``{name}``', '—' if ours_alone else kopfs, ours])
        unknown = sorted(set(READING) - names)
        if unknown:
            raise self.error(f"READING names what is no setting: {', '.join(unknown)}")
        return _table(['setting', 'Kopf 1.45.2 reads it', 'read here'], rows, '30 35 35')


class Metrics(Generated):
    """The metrics of ``kopf run --metrics``, as a fresh operator exposes them."""

    def lines(self) -> list[str]:
        from kopf import _engine
        kinds: dict[str, str] = {}
        helps: dict[str, str] = {}
        for line in _engine.metrics_described().splitlines():
            parts = line.split(' ', 3)
            if line.startswith('# TYPE '):
                kinds[parts[2]] = parts[3]
            elif line.startswith('# HELP '):
                helps[parts[2]] = parts[3] if len(parts) > 3 else ''
        # The samples' names: a counter's end in `_total`, a histogram's in `_bucket`, `_sum`, `_count`.
        rows = [[f"``{name}{'_total' if kind == 'counter' else ''}``", kind, helps.get(name, '')]
                for name, kind in kinds.items()]
        return _table(['metric', 'type', 'what it counts'], rows, '35 10 55')


# The decorators of each kind of handler, by the protocol its functions follow.
_KINDS = {
    'ActivityFn': '``@kopf.on.startup``, ``@kopf.on.cleanup``, ``@kopf.on.login``, ``@kopf.on.probe``',
    'ChangingFn': '``@kopf.on.create``, ``@kopf.on.update``, ``@kopf.on.delete``, ``@kopf.on.resume``, '
                  '``@kopf.on.field``',
    'WatchingFn': '``@kopf.on.event``',
    'DaemonFn': '``@kopf.daemon``',
    'TimerFn': '``@kopf.timer``',
    'IndexingFn': '``@kopf.index``',
    'WebhookFn': '``@kopf.on.validate``, ``@kopf.on.mutate``',
    'LoggingFn': '``@kopf.on.log``',
    'ConversionFn': '``@kopf.on.convert``',
    'ReconcilingFn': '``@kopf.on.reconcile``',
}


class Kwargs(Generated):
    """The keyword arguments that each kind of handler gets (``kopf._handling.callbacks``), and what each one is
    (``kopf._handling.callbacks.KWARGS``; one described nowhere fails the build, naming it)."""

    def lines(self) -> list[str]:
        from kopf._handling import callbacks as _callbacks
        rows = []
        received: dict[str, list[str]] = {}
        for name, decorators in _KINDS.items():
            protocol = getattr(_callbacks, name)
            signature = inspect.signature(protocol.__call__)
            kwargs = [p.name for p in signature.parameters.values() if p.kind is p.KEYWORD_ONLY]
            rows.append([decorators, ', '.join(f'``{kwarg}``' for kwarg in kwargs)])
            for kwarg in kwargs:
                received.setdefault(kwarg, []).append(decorators)
        known = {name for name in _KINDS}
        protocols = {name for name, value in vars(_callbacks).items() if name.endswith('Fn') and inspect.isclass(value)
                     and getattr(value, '__module__', '') == _callbacks.__name__}
        if protocols - known:
            unknown = sorted(protocols - known)
            raise self.error(f"kopf._handling.callbacks has protocols this page does not know: {unknown}")
        undescribed = sorted(set(received) - set(_callbacks.KWARGS))
        if undescribed:
            raise self.error(f"Keyword arguments without a description in "
                             f"kopf._handling.callbacks.KWARGS: {undescribed}")
        everyone = len(received['param'])
        described = [[f'``{kwarg}``', _callbacks.KWARGS[kwarg],
                      'all' if len(kinds) == everyone else '; '.join(kinds)]
                     for kwarg, kinds in sorted(received.items())]
        return (_table(['handlers', 'keyword arguments'], rows, '30 70') + ['.. rubric:: What each one is', ''] +
                _table(['keyword argument', 'what it is', 'given to'], described, '15 50 35'))


class Accepted(Generated):
    """The differences from PyPI's Kopf that the corpus of real operators accepts, with reasons."""

    def lines(self) -> list[str]:
        data = tomllib.loads((ROOT / 'tests' / 'compat' / 'corpus' / 'accepted.toml').read_text())
        kinds = {'kopf-bug': "Kopf's bug, fixed here", 'engine-detail': 'an engine detail'}
        rows = [[f"``{entry['operator']}``", kinds.get(entry['kind'], entry['kind']), entry['reason']]
                for entry in data['accepted']]
        return _table(['operators', 'kind', 'why'], rows, '15 15 70')


def _origin(text: str | None) -> str:
    return "this engine's own" if 'not in Kopf' in (text or '') else 'Kopf 1.45.2'


class Compatibility(Generated):
    """What of the public surface is Kopf's and what is this engine's own, from the code: the
    decorators', settings groups', commands' and options' own words ("not in Kopf")."""

    def lines(self) -> list[str]:
        import click
        import kopf
        import kopf.on
        from kopf.cli import main
        rows = []
        for name, value in sorted(vars(kopf.on).items()):
            if not name.startswith('_') and inspect.isfunction(value) and value.__module__ == 'kopf.on':
                # (the summary line says so; a parameter's own "not in Kopf" is the parameter's)
                rows.append(['handlers', f'``@kopf.on.{name}``', _origin((value.__doc__ or '').split('\n')[0])])
        for name in kopf.rbac.__all__:
            rows.append(['RBAC', f'``kopf.rbac.{name}``', _origin(kopf.rbac.__doc__)])
        settings = kopf.OperatorSettings()
        for group in dataclasses.fields(settings):
            doc = type(getattr(settings, group.name)).__doc__
            rows.append(['settings', f'``settings.{group.name}``', _origin(doc)])
        for name, command in main.commands.items():
            rows.append(['commands', f'``kopf {name}``', _origin(command.help)])
            for param in command.params if name == 'run' else []:
                if isinstance(param, click.Option):
                    rows.append(['options', f"``kopf run {param.opts[0]}``", _origin(getattr(param, 'help', None))])
        return _table(['kind', 'name', 'from'], rows, '15 45 40')


def _own_doc(cls: type, name: str) -> str | None:
    """A member's docstring, its own or that of the member it overrides (as autodoc shows it)."""
    for base in inspect.getmro(cls):
        value = base.__dict__.get(name)
        if value is None:
            continue
        function = value.fget if isinstance(value, property) else getattr(value, '__func__', value)
        if getattr(function, '__doc__', None):
            return str(function.__doc__)
    return None


def _alias_doc(name: str) -> str | None:
    """The attribute docstring of a public alias, in whichever of the package's modules assigns it."""
    import pkgutil

    import kopf
    modules = ['kopf']
    for module in pkgutil.iter_modules(kopf.__path__, 'kopf.'):
        modules.append(module.name)
        if module.ispkg:  # the package's groups (``kopf._structures`` & co.), one level down
            path = [str(Path(kopf.__path__[0]) / module.name.removeprefix('kopf.'))]
            modules += [sub.name for sub in pkgutil.iter_modules(path, module.name + '.')]
    for module in modules:
        try:
            docs = ModuleAnalyzer.for_module(module).find_attr_docs()
        except Exception:
            continue  # (the compiled core has no source to read)
        if ('', name) in docs:
            return '\n'.join(docs[('', name)])
    return None


class Api(Generated):
    """Every public name of a module (its ``__all__``, or its own public functions and classes), documented by
    autodoc; a name or a public member without a docstring fails the build, naming it."""

    required_arguments = 1

    def lines(self) -> list[str]:
        import importlib
        # (a public alias of a private module, such as ``kopf.lifecycles``, is reached through its parent)
        parent, _, leaf = self.arguments[0].rpartition('.')
        try:
            module = importlib.import_module(self.arguments[0])
        except ImportError:
            module = getattr(importlib.import_module(parent), leaf)
        names = getattr(module, '__all__', None) or [
            name for name, value in vars(module).items()
            if not name.startswith('_') and (inspect.isfunction(value) or inspect.isclass(value))
            and value.__module__ == module.__name__]
        out: list[str] = []
        undocumented: list[str] = []
        for name in names:
            value = getattr(module, name)
            qualified = f'{self.arguments[0]}.{name}'
            if inspect.ismodule(value):
                continue  # its own section
            if inspect.isclass(value):
                if not value.__dict__.get('__doc__'):
                    undocumented.append(qualified)
                for member, attr in vars(value).items():
                    if member.startswith('_') or not (inspect.isfunction(attr) or
                                                      isinstance(attr, (property, classmethod, staticmethod))):
                        continue
                    if _own_doc(value, member) is None:
                        undocumented.append(f'{qualified}.{member}')
                out += [f'.. autoclass:: {qualified}', '   :members:', '']
            elif inspect.isfunction(value) or inspect.isbuiltin(value):
                if not value.__doc__:
                    undocumented.append(qualified)
                out += [f'.. autofunction:: {qualified}', '']
            else:
                doc = _alias_doc(name)
                if doc is None:
                    undocumented.append(qualified)
                    continue
                out += [f'.. py:data:: {qualified}', f'   :value: {value!r}'.replace('\n', ' '), '',
                        *(f'   {line}' for line in doc.splitlines()), '']
        if undocumented:
            raise self.error(f"Public names without a docstring: {', '.join(undocumented)}")
        return out


def _undescribed_parameters() -> list[str]:
    """The decorators' parameters that their docstrings do not describe (``kopf._structures.parameters``)."""
    import kopf.on
    missing = []
    for name, value in sorted(vars(kopf.on).items()):
        if not name.startswith('_') and inspect.isfunction(value) and value.__module__ == 'kopf.on':
            missing += [f'kopf.on.{name}({param}=)' for param in inspect.signature(value).parameters
                        if f':param {param}:' not in (value.__doc__ or '')]
    return missing


def _undescribed_options() -> list[str]:
    """The commands and options of the ``kopf`` command without a help text."""
    import click
    from kopf.cli import main

    def walk(command: click.Command, path: str) -> list[str]:
        missing = [] if command.help else [path]
        missing += [f'{path} {param.opts[-1]}' for param in command.params
                    if isinstance(param, click.Option) and not param.help]
        for name, sub in sorted(getattr(command, 'commands', {}).items()):
            missing += walk(sub, f'{path} {name}')
        return missing
    return walk(main, 'kopf')


def _check_descriptions(app: Sphinx) -> None:
    """Every decorator parameter and every option of the command is described, or the build fails."""
    from sphinx.errors import ExtensionError
    missing = _undescribed_parameters() + _undescribed_options()
    if missing:
        raise ExtensionError(f"Described nowhere (kopf._structures.parameters, the click options' help=): "
                             f"{', '.join(missing)}")


def setup(app: Sphinx) -> dict[str, Any]:
    app.connect('builder-inited', _check_descriptions)
    app.add_directive('kopf-settings', Settings)
    app.add_directive('kopf-settings-reading', SettingsReading)
    app.add_directive('kopf-metrics', Metrics)
    app.add_directive('kopf-kwargs', Kwargs)
    app.add_directive('kopf-accepted', Accepted)
    app.add_directive('kopf-api', Api)
    app.add_directive('kopf-compatibility', Compatibility)
    return {'parallel_read_safe': True, 'parallel_write_safe': True}
