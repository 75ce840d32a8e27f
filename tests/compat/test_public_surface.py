"""Kopf 1.45.2's public surface, walked from its sdist's sources (parsed, never imported):
its `__all__`, `kopf.on`'s decorators and their parameters, `OperatorSettings`' fields and the
CLI's options. Each must exist in ours, and each settings field must act (reach the engine or
the Python side that uses it) or fail at once with a clear error: none may be accepted and
ignored. The counts are printed."""

from __future__ import annotations

import ast
import collections
import dataclasses
import inspect
import json
import re
import time
from pathlib import Path
from typing import Any

import click
import kopf
import kopf.on
import pytest
from kopf import _engine, cli
from kopf._structures.errors import UnsupportedError
from kopf._structures.references import Selector
from kopf._structures.selectors import SelectorMapping

# Settings that act on the Python side of the engine, and where (so that they are not mistaken
# for ignored ones by the check below, which only sees what reaches the core).
PYTHON_SIDE = {
    "process.ultimate_exiting_timeout": "_running: how long the exit waits for the engine",
    "posting.loggers": "_logging.K8sPoster: log lines as Events",
    "posting.level": "_posting/_logging: the lowest level posted",
    "posting.default_backoffs": "_posting: backoffs of kopf.event/info/warn/exception",
    "execution.default_backoff": "_execution: retry delay after arbitrary errors",
    "execution.executor": "_bridge: where sync handlers run",
    "execution.max_workers": "_settings: the executor's size",
    "networking.trust_env": "_credentials: the login functions' ConnectionInfo.trust_env",
    "admission.server": "_running/_webhooks: the webhook server",
    "admission.managed": "_running/_webhooks: the managed webhook configurations",
    "queueing.batch_window": "deprecated in Kopf as here: warns, no effect in either",
}

# Fields that are refused with a clear error until their feature lands (none now).
REFUSED: set[str] = set()


def kopf_all(kopf_source: Path) -> list[str]:
    tree = ast.parse((kopf_source / "kopf" / "__init__.py").read_text())
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(getattr(t, "id", None) == "__all__" for t in node.targets):
            return [ast.literal_eval(element) for element in node.value.elts]  # type: ignore[attr-defined]
    raise AssertionError("no __all__ in Kopf's __init__.py")


def kopf_decorators(kopf_source: Path) -> dict[str, list[str]]:
    tree = ast.parse((kopf_source / "kopf" / "on.py").read_text())
    found = {}
    for node in tree.body:
        if isinstance(node, ast.FunctionDef) and not node.name.startswith("_"):
            args = node.args
            found[node.name] = [a.arg for a in args.posonlyargs + args.args + args.kwonlyargs]
            found[node.name] += [f"*{args.vararg.arg}"] if args.vararg else []
    return found


def kopf_settings_fields(kopf_source: Path) -> dict[str, list[str]]:
    source = kopf_source / "kopf" / "_cogs" / "configs" / "configuration.py"
    classes: dict[str, list[str]] = {}
    for node in ast.parse(source.read_text()).body:
        if isinstance(node, ast.ClassDef) and node.name.endswith("Settings"):
            names = [n.target.id for n in node.body if isinstance(n, ast.AnnAssign)
                     and isinstance(n.target, ast.Name) and not n.target.id.startswith("_")]
            names += [n.name for n in node.body if isinstance(n, ast.FunctionDef) and not n.name.startswith("_")
                      and any(getattr(d, "id", None) == "property" for d in n.decorator_list)]
            classes[node.name] = names
    return classes


def kopf_cli_options(kopf_source: Path) -> set[str]:
    source = (kopf_source / "kopf" / "cli.py").read_text()
    return set(re.findall(r"['\"](--?[a-z][a-z0-9-]*(?:/--[a-z0-9-]+)?)['\"]", source))


def our_cli_options() -> set[str]:
    options: set[str] = set()
    commands = [cli.main, *cli.main.commands.values()]  # type: ignore[attr-defined]
    for command in commands:
        for param in command.params:
            if isinstance(param, click.Option):
                options.update(param.opts)
                options.update(param.secondary_opts)
                if param.secondary_opts:
                    options.add(f"{param.opts[0]}/{param.secondary_opts[0]}")
    return options


def test_every_public_name(kopf_source: Path) -> None:
    names = kopf_all(kopf_source)
    missing = [name for name in names if not hasattr(kopf, name)]
    print(f"\n__all__: {len(names) - len(missing)} of {len(names)} present")
    assert missing == []


def test_every_decorator_with_kopfs_parameters(kopf_source: Path) -> None:
    decorators = kopf_decorators(kopf_source)
    problems = {}
    for name, params in decorators.items():
        ours = getattr(kopf.on, name, None)
        if ours is None:
            problems[name] = "missing"
            continue
        signature = inspect.signature(ours).parameters
        our_params = [p if signature[p].kind is not inspect.Parameter.VAR_POSITIONAL else f"*{p}" for p in signature]
        lacking = [p for p in params if p not in our_params]
        positional = [p for p in params if not p.startswith("*")][:3]
        if lacking or our_params[:len(positional)] != positional:
            problems[name] = f"lacks {lacking}, positional {our_params[:3]} vs {positional}"
    count = sum(len(params) for params in decorators.values())
    print(f"\nkopf.on: {len(decorators) - len(problems)} of {len(decorators)} decorators with all of "
          f"Kopf's {count} parameters")
    assert problems == {}


def different(value: Any) -> Any:
    """A value of the same kind that no default has."""
    if isinstance(value, bool):
        return not value
    if isinstance(value, int | float):
        return value + 7
    if isinstance(value, str):
        return value + "-changed"
    if isinstance(value, tuple | list):
        return [9.5]
    if isinstance(value, SelectorMapping):
        return SelectorMapping({Selector("pods"): "app=x"})
    return 7  # None: an optional number


def test_every_settings_field_acts_or_is_refused(kopf_source: Path) -> None:
    classes = kopf_settings_fields(kopf_source)
    groups = classes["OperatorSettings"]
    outcomes: dict[str, str] = {}
    for group in groups:
        if group == "batching":
            with pytest.warns(DeprecationWarning):
                assert kopf.OperatorSettings().batching is not None
            outcomes[group] = "acts"
            continue
        class_name = type(getattr(kopf.OperatorSettings(), group)).__name__
        for field in classes[f"{group.capitalize()}Settings"]:
            name = f"{group}.{field}"
            settings = kopf.OperatorSettings()
            section = getattr(settings, group)
            if name in REFUSED:
                with pytest.raises(UnsupportedError, match=re.escape(f"settings.{name}")):
                    setattr(section, field, {})
                outcomes[name] = "refused"
                continue
            assert hasattr(section, field), f"{class_name} has no {field}"
            if name in PYTHON_SIDE:
                outcomes[name] = "acts"
                continue
            before = settings.for_engine()
            if field == "namespaced":  # derived from clusterwide
                outcomes[name] = "acts"
                continue
            if group == "persistence" and field.endswith("_storage"):
                setattr(section, field, type(getattr(section, field))(prefix="other.example.com")
                        if field == "progress_storage" else kopf.StatusDiffBaseStorage())
            else:
                setattr(section, field, different(getattr(section, field)))
            given = settings.for_engine()
            outcomes[name] = "acts" if given != before else "IGNORED"
            # And the core reads the value as given (crates/core/src/settings.rs; `identity`: added at run).
            read = json.loads(_engine.settings_as_read(json.dumps(given)))
            read["peering"].pop("identity")
            assert read == given, f"settings.{name}: the core does not read what it is given"
    counts = collections.Counter(outcomes.values())
    print(f"\nsettings: {counts['acts']} act, {counts['refused']} refused clearly, "
          f"{counts['IGNORED']} accepted and ignored (of {len(outcomes)})")
    assert [name for name, outcome in outcomes.items() if outcome == "IGNORED"] == []
    assert set(PYTHON_SIDE) <= set(outcomes) | {"queueing.batch_window"}


def test_a_settings_key_the_core_does_not_know_is_refused() -> None:
    """Never taken as its default: a misspelt key in the settings' mapping fails at start-up."""
    given = kopf.OperatorSettings().for_engine()
    given["watching"]["inactivity_timout"] = 1
    with pytest.raises(ValueError, match="unknown field `inactivity_timout`"):
        _engine.settings_as_read(json.dumps(given))


def test_every_cli_option(kopf_source: Path) -> None:
    kopfs = kopf_cli_options(kopf_source)
    ours = our_cli_options()
    missing = sorted(kopfs - ours)
    print(f"\nCLI: {len(kopfs) - len(missing)} of {len(kopfs)} of Kopf's options present")
    assert missing == []


def test_dataclass_fields_are_kopfs(kopf_source: Path) -> None:
    """Nothing of ours pretends to be a Kopf setting that Kopf does not have."""
    classes = kopf_settings_fields(kopf_source)
    extra = {}
    for field in dataclasses.fields(kopf.OperatorSettings):
        section = type(getattr(kopf.OperatorSettings(), field.name))
        # Ours (--lease, --shards, --metrics, @kopf.on.log, @kopf.on.convert, secrets), each
        # saying so in its docstring, as the settings' reference shows it.
        if "not in Kopf" in (section.__doc__ or ""):
            assert section.__name__ not in classes, f"{section.__name__} is Kopf's"
            continue
        kopfs = set(classes[section.__name__])
        ours = {f.name for f in dataclasses.fields(section) if not f.name.startswith("_")}
        if ours - kopfs:
            extra[field.name] = sorted(ours - kopfs)
    assert extra == {}


def test_an_unknown_name_says_what_this_package_is() -> None:
    with pytest.raises(AttributeError, match=r"no attribute 'no_such_helper': .* Kopf 1\.45\.2"):
        kopf.no_such_helper  # noqa: B018
    with pytest.raises(kopf.PermanentError, match=r"module 'kopf.on' has no attribute 'someday'"):
        kopf.on.someday  # noqa: B018
    assert not hasattr(kopf, "no_such_helper") and hasattr(kopf, "Patch")


def test_a_handler_using_an_unknown_name_fails_permanently(
        crd: None, namespace: str, tmp_path: Path) -> None:
    from support.cluster import kubectl
    from support.operators import OperatorProcess, write_script
    script = write_script(tmp_path, """
        import kopf

        @kopf.on.create('greetings')
        def newer(body, **_):
            kopf.some_future_helper(body)
    """)
    operator = OperatorProcess(["run", "-n", namespace, str(script)], cwd=tmp_path)
    try:
        kubectl("create", "-f", "-", input='{"apiVersion": "demo.kopf.dev/v1", "kind": "Greeting", '
                f'"metadata": {{"name": "u1", "namespace": "{namespace}"}}}}')
        operator.wait_for(r"Handler 'newer' failed permanently: module 'kopf' has no attribute 'some_future_helper'")
        time.sleep(2)
    finally:
        operator.stop()
    assert operator.output.count("Handler 'newer' failed") == 1  # not retried
    assert "will retry" not in operator.output
