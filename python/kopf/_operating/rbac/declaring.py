"""Rules that the operator's code states itself (``@kopf.rbac.needs``, ``kopf.rbac.declare``),
for what `introspecting` cannot see: kept on the handler's function or in the registry,
resolved with the cluster's resources when the rules are planned."""

from __future__ import annotations

import dataclasses
import sys
from collections.abc import Callable, Collection
from typing import Any

from kopf._operating.rbac.uses import VERBS
from kopf._structures.references import Marker, Resource, Selector

ATTRIBUTE = '_kopf_rbac_needs'  # on a function: its declarations
DECORATED: list[Any] = []  # every function with declarations, handler or not, in declaring order


class DeclarationError(ValueError):
    """A declaration that names no resource the cluster serves."""


@dataclasses.dataclass(frozen=True)
class Declaration:
    """Verbs on a resource (Kopf's resource specification), where, why, and where it is stated."""
    selector: Selector
    verbs: tuple[str, ...]
    subresource: str
    namespace: str | None  # None: the operator's namespaces; '*': every namespace
    reason: str | None
    filename: str  # where it is declared
    line: int
    what: str  # how it is declared: 'kopf.rbac.needs' (a handler's) or 'kopf.rbac.declare' (the operator's)

    def described(self, display: Callable[[str], str] = str) -> str:
        """As it is declared, with its place (the file named by ``display``)."""
        return f"{self.what}({self.spec}, verbs={list(self.verbs)!r}) at {display(self.filename)}:{self.line}"

    @property
    def spec(self) -> str:
        names = {f.name: getattr(self.selector, f.name) for f in dataclasses.fields(self.selector)}
        shown = ', '.join(f"{key}={value!r}" for key, value in names.items() if value is not None)
        return shown + (f", subresource={self.subresource!r}" if self.subresource else '')

    def resolve(self, resources: Collection[Resource], display: Callable[[str], str] = str) -> list[Resource]:
        """The served resources it names (one per group and plural); an error if none."""
        found: dict[tuple[str, str], Resource] = {}
        for resource in resources:
            if self.selector.check(resource):
                found.setdefault((resource.group, resource.plural), resource)
        if not found:
            raise DeclarationError(f"{self.described(display)}: no such resource is served by the cluster.")
        if self.subresource:
            for resource in found.values():
                if self.subresource not in resource.subresources:
                    has = ', '.join(sorted(resource.subresources)) or 'none'
                    raise DeclarationError(f"{self.described(display)}: {resource.plural} has no subresource "
                                           f"{self.subresource!r} (it has: {has}).")
        return list(found.values())


def make(resource: tuple[Any, ...], *, verbs: Collection[str], subresource: str | None, namespace: str | None,
         reason: str | None, names: dict[str, str | None], what: str, depth: int) -> Declaration:
    """A declaration, checked now: its verbs known, its resource specification valid."""
    if isinstance(verbs, str):
        raise TypeError(f"verbs must be a collection of verbs, not a string: verbs=[{verbs!r}]")
    unknown = sorted(set(verbs) - VERBS)
    if unknown or not verbs:
        raise ValueError(f"Unknown RBAC verbs {unknown!r}: use some of {', '.join(sorted(VERBS))}." if unknown
                         else "No verbs are given: use some of " + ', '.join(sorted(VERBS)) + ".")
    args = list(resource)
    while args and args[-1] is None:  # (the positional arguments not given)
        args.pop()
    if args and isinstance(args[-1], str) and '/' in args[-1]:
        *rest, last = args  # 'pods/log': the plural and a subresource
        plural, _, sub = last.partition('/')
        if subresource is not None and subresource != sub:
            raise ValueError(f"Two subresources are given: {sub!r} and {subresource!r}.")
        args, subresource = [*rest, plural], sub
    first, second, third, *_ = [*args, None, None, None]
    selector = Selector(first, second, third, group=names.get('group'), version=names.get('version'),
                        kind=names.get('kind'), plural=names.get('plural'), singular=names.get('singular'),
                        shortcut=names.get('shortcut'))
    if namespace is not None and namespace != '*' and any(c in namespace for c in '*?[]'):
        raise ValueError(f"RBAC rules cannot name namespaces by a pattern ({namespace!r}): "
                         f"name one namespace, or '*' for every namespace.")
    if selector.fn is not None or selector.any_name is Marker.EVERYTHING:
        raise ValueError("An RBAC declaration names one resource (not a callable or kopf.EVERYTHING).")
    frame = sys._getframe(depth + 1)
    return Declaration(selector=selector, verbs=tuple(sorted(set(verbs))), subresource=subresource or '',
                       namespace=namespace, reason=reason, filename=frame.f_code.co_filename, line=frame.f_lineno,
                       what=what)


def of_function(fn: Any) -> list[Declaration]:
    return list(getattr(getattr(fn, '__func__', fn), ATTRIBUTE, ()))


def attach(fn: Any, declaration: Declaration) -> None:
    target = getattr(fn, '__func__', fn)
    if not of_function(target):
        DECORATED.append(target)
    setattr(target, ATTRIBUTE, [*of_function(target), declaration])
