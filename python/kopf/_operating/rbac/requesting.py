"""The operator's own requests as rules: what its handlers' code makes (`introspecting`) and
what it declares (`declaring`), resolved with the cluster's resources and placed in the
namespaces they go to. What cannot be resolved from the code becomes a warning with its place;
a declaration that names no served resource is an error."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from kopf._handling.handlers import Activity, ActivityHandler, BaseHandler, OperatorRegistry
from kopf._operating.rbac import declaring, introspecting
from kopf._operating.rbac.rules import Plan
from kopf._operating.rbac.uses import Scope, Use
from kopf._running import kinds as _kinds
from kopf._structures.references import Resource

SHOWN = 3  # handlers named in a rule's comment; the rest counted


def label(handler: BaseHandler, registry: OperatorRegistry) -> str:
    """How a handler is named in the rules' comments and the warnings."""
    if isinstance(handler, ActivityHandler):
        return f"{handler.activity or 'activity'} handler {handler.id!r}"
    what = 'conversion handler' if handler in registry._conversions else _kinds.label_of(handler, registry)
    return f"{what or 'handler'} {handler.id!r}"


def handlers(registry: OperatorRegistry) -> list[tuple[str, Callable[..., Any]]]:
    """Every handler whose code may make requests, by its label: all but the logins (the engine's own)."""
    found: list[BaseHandler] = [handler for kind in _kinds.KINDS for handler in kind.handlers(registry)]
    found += registry._conversions
    found += [h for h in registry._activities if h.activity != Activity.AUTHENTICATION]
    return [(label(handler, registry), handler.fn) for handler in found]


def add(result: Plan, *, registry: OperatorRegistry, resources: Sequence[Resource],
        in_namespaces: list[str | None]) -> None:
    """What the handlers' code and the declarations need, into the plan, in these namespaces by
    default (the operator's; ``[None]`` when it serves them all); the warnings too."""
    roots = handlers(registry)
    findings = introspecting.analyze(roots)
    declared = [d.filename for d in registry._permissions]
    display = introspecting.Code([fn for _, fn in roots], files=declared).display
    specific = [namespace for namespace in in_namespaces if namespace is not None]

    # The same request (a site, its verbs, where it goes) reached from several handlers: one reason.
    reached: dict[Use, set[str]] = {}
    for name, uses in findings.uses.items():
        for use in uses:
            reached.setdefault(use, set()).add(name)
    # A function's own declarations answer what it leaves unknown: no warning for them.
    answered = {(display(fn.__code__.co_filename), fn.__qualname__) for fn in declaring.DECORATED
                if hasattr(fn, '__code__')}
    unresolved: dict[str, set[str]] = {}
    for name, items in findings.unresolved.items():
        for item in items:
            if (item.site.file, item.site.function) not in answered:
                unresolved.setdefault(str(item), set()).add(name)

    # A call whose resource may be one of several names: those that the cluster serves are it.
    resolved = {(use.site, use.via, use.verbs) for use in reached if use.target.resolve(resources)[1] is None}
    for use, names in sorted(reached.items(), key=lambda item: (str(item[0].site), item[0].via)):
        found, said = use.target.resolve(resources)
        if said is not None:
            if (use.site, use.via, use.verbs) in resolved:
                continue  # (another of its names is served)
            unresolved.setdefault(f"{use.site} (in {use.site.function if use.site else '?'}): {use.via}: "
                                  f"{said}", set()).update(names)
        who = f"{use.via} at {use.site}, from {_named(names)}"
        from_data = use.namespace.scope is Scope.DATA
        if from_data and use.site is not None and (use.site.file, use.site.function) in answered:
            continue  # its function declares where it goes: that, not every namespace
        for resource, subresource in found:
            places = _places(resource, use.namespace.scope, use.namespace.name, in_namespaces)
            if from_data and resource.namespaced and specific:
                result.warnings.append(
                    f"{use.site} (in {use.site.function if use.site else '?'}): {use.via}: the namespace "
                    f"({use.namespace.text or '?'}) is read from the object's data: granted in every "
                    f"namespace, as its users may name any (reached from {_named(names)}); to narrow it, "
                    f"declare the namespaces on {use.site.function if use.site else 'its function'} with "
                    f"kopf.rbac.needs(..., namespace=...)")
            plural = f"{resource.plural}/{subresource}" if subresource else resource.plural
            result.need(resource.group, plural, places, use.verbs, who)
            _escalation(result, resource, subresource, places, use.verbs, who)
            if use.namespace.scope is Scope.UNKNOWN and resource.namespaced and specific:
                result.warnings.append(
                    f"{use.site} (in {use.site.function if use.site else '?'}): {use.via}: the namespace "
                    f"({use.namespace.text or '?'}) is not known statically: granted in "
                    f"{', '.join(repr(n) for n in specific)} only (reached from {_named(names)}); "
                    f"another one needs kopf.rbac.needs(..., namespace=...)")
    for text, names in sorted(unresolved.items()):
        result.warnings.append(f"{text} (reached from {_named(names)})")
    # One warning per file: shared modules may hold many a request that this operator never makes.
    unreached: dict[str, list[str]] = {}
    for item in sorted(findings.unreached, key=lambda item: (item.site.file, item.site.line)):
        if (item.site.file, item.site.function) not in answered:
            unreached.setdefault(item.site.file, []).append(f"{item.text} at line {item.site.line} "
                                                            f"in {item.site.function}")
    for file, spots in unreached.items():
        result.warnings.append(
            f"{file}: request methods that no handler is seen to reach, not granted: {'; '.join(spots)}. "
            f"If the operator makes these requests, declare them with @kopf.rbac.needs() on their functions")

    # On functions: for the handlers that reach them (a handler's own function reaches itself);
    # on functions that no handler is seen to call, for the operator as a whole.
    reaching: dict[Any, set[str]] = {}
    for name, functions in findings.reached.items():
        for function in functions:
            reaching.setdefault(function, set()).add(name)
    for name, fn in roots:
        reaching.setdefault(introspecting.unwrapped(fn), set()).add(name)
    for function in declaring.DECORATED:
        reachers = reaching.get(function)
        for declaration in declaring.of_function(function):
            if reachers:
                who = f"{declaration.described(display)} for {_named(reachers)}"
            else:
                who = f"{declaration.described(display)} (on {function.__qualname__}, which no handler is seen " \
                      f"to call: for the operator)"
            _declared(result, declaration, resources, in_namespaces, who, display)
    for declaration in registry._permissions:
        reason = f": {declaration.reason}" if declaration.reason else ''
        _declared(result, declaration, resources, in_namespaces, f"{declaration.described(display)}{reason}", display)


def _declared(result: Plan, declaration: declaring.Declaration, resources: Sequence[Resource],
              in_namespaces: list[str | None], who: str, display: Callable[[str], str]) -> None:
    for resource in declaration.resolve(resources, display):
        if declaration.namespace == '*':
            scope, name = Scope.ALL, None
        elif declaration.namespace is not None:
            scope, name = Scope.LITERAL, declaration.namespace
        else:
            scope, name = Scope.DEFAULT, None
        plural = f"{resource.plural}/{declaration.subresource}" if declaration.subresource else resource.plural
        places = _places(resource, scope, name, in_namespaces)
        result.need(resource.group, plural, places, declaration.verbs, who)
        _escalation(result, resource, declaration.subresource, places, list(declaration.verbs), who)


RBAC = 'rbac.authorization.k8s.io'
WRITES = frozenset({'create', 'update', 'patch'})
# The API refuses to store a role with rules its writer does not hold, unless it may `escalate`
# on roles; and a binding to a role whose rules its writer does not hold, unless it may `bind`
# it (the role's rules are the data: not known statically). Where they go: each write's places.
ESCALATIONS: dict[str, list[tuple[str, str]]] = {
    'roles': [('roles', 'escalate')],
    'clusterroles': [('clusterroles', 'escalate')],
    'rolebindings': [('roles', 'bind'), ('clusterroles', 'bind')],
    'clusterrolebindings': [('clusterroles', 'bind')],
}


def _escalation(result: Plan, resource: Resource, subresource: str | None, places: list[str | None],
                verbs: Sequence[str], who: str) -> None:
    if resource.group != RBAC or subresource or not WRITES & set(verbs):
        return
    for plural, verb in ESCALATIONS.get(resource.plural, []):
        result.need(RBAC, plural, places, [verb], f"{who}: its rules are not known statically, and the API "
                                                  f"refuses ones the account does not hold without {verb!r}")


def _places(resource: Resource, scope: Scope, name: str | None, in_namespaces: list[str | None]) -> list[str | None]:
    if not resource.namespaced or scope in (Scope.ALL, Scope.DATA):
        return [None]
    if scope is Scope.LITERAL:
        return [name]
    return list(in_namespaces)


def _named(names: set[str]) -> str:
    ordered = sorted(names)
    shown = ', '.join(ordered[:SHOWN])
    return shown + (f" and {len(ordered) - SHOWN} more" if len(ordered) > SHOWN else '')
