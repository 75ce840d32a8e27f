"""RBAC rules that the operator states for what ``kopf rbac generate`` cannot see in its code
(not in Kopf).

``kopf rbac generate``, ``kopf rbac verify`` and ``kopf olm generate`` give an operator the
rules the engine needs, and those its handlers' own API calls need as read from their source.
A request whose resource is only known at run time (a plural in a variable, objects read from
a file) is printed as a warning; these declarations add what such code needs::

    import kopf

    @kopf.on.create('kopfexamples')
    @kopf.rbac.needs('apps', 'v1', 'deployments', verbs=['create', 'patch'])
    def create_fn(spec, **_):
        ...

    kopf.rbac.declare('secrets', verbs=['get'], namespace='vault', reason="the vault's token")

Both accept Kopf's resource specifications, as ``@kopf.on.create(...)`` does: a plural, a
kind, a short name, ``'deployments.apps'``, ``('apps', 'v1', 'deployments')``, or the same by
keywords. They only state rules: the operator's behaviour does not change.
"""

from __future__ import annotations

from collections.abc import Callable, Collection
from typing import TYPE_CHECKING, Any, TypeVar

if TYPE_CHECKING:
    from kopf._handling.handlers import OperatorRegistry

FnT = TypeVar('FnT', bound=Callable[..., Any])


def needs(
        arg1: str | None = None, arg2: str | None = None, arg3: str | None = None, /, *,
        verbs: Collection[str],
        subresource: str | None = None,
        namespace: str | None = None,
        group: str | None = None, version: str | None = None, kind: str | None = None,
        plural: str | None = None, singular: str | None = None, shortcut: str | None = None,
) -> Callable[[FnT], FnT]:
    """``@kopf.rbac.needs(...)``: a function makes these requests itself.

    On a handler's function, stacked with the handler's decorators (above or below them): every
    handler of the function gets the rule, named in the rule's comments. On a function of the
    operator's that handlers call: the handlers that are seen to call it get it; if none is
    seen to, the operator as a whole gets it.

    :param arg1: the resource, as Kopf's handlers take it (with ``arg2`` and ``arg3``): a name
        (``'deployments'``, ``'deployments.apps'``, ``'pods/log'`` with a subresource), a group
        and a name, or a group, a version and a plural.
    :param arg2: see ``arg1``.
    :param arg3: see ``arg1``.
    :param verbs: the RBAC verbs: ``get``, ``list``, ``watch``, ``create``, ``update``,
        ``patch``, ``delete``, ``deletecollection`` (and ``impersonate``, ``bind``,
        ``escalate``, ``approve``, ``sign``, ``use`` for the resources that have them).
    :param subresource: a subresource (``'status'``, ``'log'``, ``'exec'``), if the requests go
        to it rather than to the objects.
    :param namespace: where the requests go: by default the namespaces the operator serves
        (``kopf run -n``; everywhere with ``-A``); a namespace's name for one other namespace
        (a Role there); ``'*'`` for every namespace (a ClusterRole).
    :param group: the resource's API group, by keyword.
    :param version: the resource's API version, by keyword.
    :param kind: the resource's kind (``'Deployment'``), by keyword.
    :param plural: the resource's plural name, by keyword.
    :param singular: the resource's singular name, by keyword.
    :param shortcut: one of the resource's short names (``'deploy'``), by keyword.
    """
    from kopf._operating.rbac import declaring

    declaration = declaring.make((arg1, arg2, arg3), verbs=verbs, subresource=subresource, namespace=namespace,
                                 reason=None, what='kopf.rbac.needs', depth=1,
                                 names=dict(group=group, version=version, kind=kind, plural=plural,
                                            singular=singular, shortcut=shortcut))

    def decorator(fn: FnT) -> FnT:
        declaring.attach(fn, declaration)
        return fn

    return decorator


def declare(
        arg1: str | None = None, arg2: str | None = None, arg3: str | None = None, /, *,
        verbs: Collection[str],
        subresource: str | None = None,
        namespace: str | None = None,
        reason: str | None = None,
        group: str | None = None, version: str | None = None, kind: str | None = None,
        plural: str | None = None, singular: str | None = None, shortcut: str | None = None,
        registry: OperatorRegistry | None = None,
) -> None:
    """``kopf.rbac.declare(...)``: the operator as a whole makes these requests (its own code
    outside the handlers, a library it runs, a background thread).

    Called at the module's top level, as the handlers' decorators are; a file of such calls can
    be given to ``kopf rbac generate`` beside an operator that cannot be changed.

    :param arg1: the resource, as Kopf's handlers take it (with ``arg2`` and ``arg3``); see
        ``kopf.rbac.needs``.
    :param arg2: see ``arg1``.
    :param arg3: see ``arg1``.
    :param verbs: the RBAC verbs (see ``kopf.rbac.needs``).
    :param subresource: a subresource, if the requests go to it.
    :param namespace: where the requests go: the operator's namespaces by default, one named
        namespace, or ``'*'`` for every namespace.
    :param reason: why the operator needs it: shown in the rule's comment.
    :param group: the resource's API group, by keyword.
    :param version: the resource's API version, by keyword.
    :param kind: the resource's kind, by keyword.
    :param plural: the resource's plural name, by keyword.
    :param singular: the resource's singular name, by keyword.
    :param shortcut: one of the resource's short names, by keyword.
    :param registry: the registry to keep it in (the default one if not given), as handlers'.
    """
    from kopf._handling.handlers import get_default_registry
    from kopf._operating.rbac import declaring

    declaration = declaring.make((arg1, arg2, arg3), verbs=verbs, subresource=subresource, namespace=namespace,
                                 reason=reason, what='kopf.rbac.declare', depth=1,
                                 names=dict(group=group, version=version, kind=kind, plural=plural,
                                            singular=singular, shortcut=shortcut))
    registry = registry if registry is not None else get_default_registry()
    registry._permissions.append(declaration)


__all__ = ['declare', 'needs']
