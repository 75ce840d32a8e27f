"""The decorators that register handlers: ``@kopf.on.create(...)`` and the like.

Each returns the function unchanged, so handlers stay plain functions to test.
"""

from __future__ import annotations

import re
import warnings
from collections.abc import Callable, Collection
from typing import TYPE_CHECKING, Any, TypeVar

from kopf._bridge import services
from kopf._handling import callbacks as _callbacks
from kopf._handling import models as _models
from kopf._handling import subhandling as _subhandling
from kopf._handling.handlers import (
    Activity,
    ActivityHandler,
    ChangingHandler,
    ConversionHandler,
    DaemonHandler,
    IndexingHandler,
    LogHandler,
    MetaFilter,
    OperatorRegistry,
    Reason,
    ReconcilingHandler,
    RelatingHandler,
    SpawningHandler,
    TimerHandler,
    WatchingHandler,
    WebhookHandler,
    WebhookType,
    generate_id,
    get_default_registry,
)
from kopf._structures import errors as _errors
from kopf._structures import parameters as _parameters
from kopf._structures.dicts import parse_field
from kopf._structures.errors import ErrorsMode
from kopf._structures.references import Marker, Resource, Selector

FnT = TypeVar('FnT', bound=Callable[..., Any])
# What each decorator accepts (checked as Kopf checks it) and gives back unchanged.
ActivityFnT = TypeVar('ActivityFnT', bound='_callbacks.ActivityFn')
ChangingFnT = TypeVar('ChangingFnT', bound='_callbacks.ChangingFn')
WatchingFnT = TypeVar('WatchingFnT', bound='_callbacks.WatchingFn')
IndexingFnT = TypeVar('IndexingFnT', bound='_callbacks.IndexingFn')
WebhookFnT = TypeVar('WebhookFnT', bound='_callbacks.WebhookFn')
DaemonFnT = TypeVar('DaemonFnT', bound='_callbacks.DaemonFn')
TimerFnT = TypeVar('TimerFnT', bound='_callbacks.TimerFn')
LoggingFnT = TypeVar('LoggingFnT', bound='_callbacks.LoggingFn')
ConversionFnT = TypeVar('ConversionFnT', bound='_callbacks.ConversionFn')
ReconcilingFnT = TypeVar('ReconcilingFnT', bound='_callbacks.ReconcilingFn')
RelatingFnT = TypeVar('RelatingFnT', bound='_callbacks.IndexingFn')
ResourceArg = str | Marker | Callable[[Resource], bool] | None
FieldSpec = str | list[str] | tuple[str, ...] | None


def _verify_filters(labels: MetaFilter | None, annotations: MetaFilter | None) -> None:
    for what, pattern in (('label', labels), ('annotation', annotations)):
        for value in (pattern or {}).values():
            if value is None:
                raise ValueError(f"`None` for {what} filters is not supported; use kopf.PRESENT or kopf.ABSENT.")


def _verify_values(field: FieldSpec, value: Any, old: Any = None, new: Any = None) -> None:
    if field is None and (value is not None or old is not None or new is not None):
        raise TypeError("Value/old/new filters are specified without a mandatory field.")
    if value is not None and (old is not None or new is not None):
        raise TypeError("Either value= or old=/new= can be defined, not both.")


def _checked(registry: OperatorRegistry | None, field: FieldSpec, value: Any, labels: MetaFilter | None,
             annotations: MetaFilter | None) -> tuple[OperatorRegistry, tuple[str, ...] | None]:
    """A resource handler's filters, checked; its registry and field, as the handler keeps them."""
    _verify_values(field, value)
    _verify_filters(labels, annotations)
    real_registry = registry if registry is not None else get_default_registry()
    return real_registry, parse_field(field) or None


def _activity(activity: Activity, *, id: str | None, param: Any, errors: ErrorsMode | None,
              timeout: float | None, retries: int | None, backoff: float | None,
              registry: OperatorRegistry | None) -> Callable[[FnT], FnT]:
    def decorator(fn: FnT) -> FnT:
        real_registry = registry if registry is not None else get_default_registry()
        real_registry._activities.append(ActivityHandler(
            fn=fn, id=generate_id(fn=fn, id=id), param=param, errors=errors, timeout=timeout,
            retries=retries, backoff=backoff, activity=activity,
        ))
        return fn
    return decorator


@_parameters.described
def startup(*, id: str | None = None, param: Any | None = None, errors: ErrorsMode | None = None,
            timeout: float | None = None, retries: int | None = None, backoff: float | None = None,
            registry: OperatorRegistry | None = None) -> Callable[[ActivityFnT], ActivityFnT]:
    """``@kopf.on.startup()``: run before the operator starts handling objects."""
    return _activity(Activity.STARTUP, id=id, param=param, errors=errors, timeout=timeout,
                     retries=retries, backoff=backoff, registry=registry)


@_parameters.described
def cleanup(*, id: str | None = None, param: Any | None = None, errors: ErrorsMode | None = None,
            timeout: float | None = None, retries: int | None = None, backoff: float | None = None,
            registry: OperatorRegistry | None = None) -> Callable[[ActivityFnT], ActivityFnT]:
    """``@kopf.on.cleanup()``: run when the operator is exiting."""
    return _activity(Activity.CLEANUP, id=id, param=param, errors=errors, timeout=timeout,
                     retries=retries, backoff=backoff, registry=registry)


@_parameters.described
def login(*, id: str | None = None, param: Any | None = None, errors: ErrorsMode | None = None,
          timeout: float | None = None, retries: int | None = None, backoff: float | None = None,
          registry: OperatorRegistry | None = None) -> Callable[[ActivityFnT], ActivityFnT]:
    """``@kopf.on.login()``: return ``kopf.ConnectionInfo`` for the API access."""
    return _activity(Activity.AUTHENTICATION, id=id, param=param, errors=errors, timeout=timeout,
                     retries=retries, backoff=backoff, registry=registry)


@_parameters.described
def probe(*, id: str | None = None, param: Any | None = None, errors: ErrorsMode | None = None,
          timeout: float | None = None, retries: int | None = None, backoff: float | None = None,
          registry: OperatorRegistry | None = None) -> Callable[[ActivityFnT], ActivityFnT]:
    """``@kopf.on.probe()``: a value reported by the liveness endpoint."""
    return _activity(Activity.PROBE, id=id, param=param, errors=errors, timeout=timeout,
                     retries=retries, backoff=backoff, registry=registry)


def _changing(
        arg1: ResourceArg, arg2: str | Marker | None, arg3: str | Marker | None, *,
        group: str | None, version: str | None, kind: str | None, plural: str | None,
        singular: str | None, shortcut: str | None, category: str | None,
        id: str | None, param: Any, errors: ErrorsMode | None, timeout: float | None,
        retries: int | None, backoff: float | None,
        labels: MetaFilter | None, annotations: MetaFilter | None, when: Callable[..., bool] | None,
        field: FieldSpec, value: Any, old: Any, new: Any,
        registry: OperatorRegistry | None,
        reason: Reason | None, initial: bool | None, deleted: bool | None,
        requires_finalizer: bool | None, field_needs_change: bool,
) -> Callable[[FnT], FnT]:
    def decorator(fn: FnT) -> FnT:
        _verify_values(field, value, old, new)
        _verify_filters(labels, annotations)
        real_registry = registry if registry is not None else get_default_registry()
        real_field = parse_field(field) or None
        selector = Selector(arg1, arg2, arg3, group=group, version=version, kind=kind, plural=plural,
                            singular=singular, shortcut=shortcut, category=category)
        _refuse_both_styles(real_registry, selector, reconciling=False)
        real_registry._changing.append(ChangingHandler(
            fn=_models.typed(fn), id=generate_id(fn=fn, id=id, suffix='.'.join(real_field or [])), param=param,
            errors=errors, timeout=timeout, retries=retries, backoff=backoff,
            selector=selector, labels=labels, annotations=annotations, when=when,
            field=real_field, value=value, old=old, new=new, field_needs_change=field_needs_change,
            initial=initial, deleted=deleted, requires_finalizer=requires_finalizer, reason=reason,
        ))
        return fn
    return decorator


@_parameters.described
def resume(
        arg1: ResourceArg = None, arg2: str | Marker | None = None, arg3: str | Marker | None = None, /, *,
        group: str | None = None, version: str | None = None, kind: str | None = None,
        plural: str | None = None, singular: str | None = None, shortcut: str | None = None,
        category: str | None = None, id: str | None = None, param: Any | None = None,
        errors: ErrorsMode | None = None, timeout: float | None = None, retries: int | None = None,
        backoff: float | None = None, deleted: bool | None = None,
        labels: MetaFilter | None = None, annotations: MetaFilter | None = None,
        when: Callable[..., bool] | None = None, field: FieldSpec = None, value: Any | None = None,
        registry: OperatorRegistry | None = None,
) -> Callable[[ChangingFnT], ChangingFnT]:
    """``@kopf.on.resume()``: for objects that exist when the operator starts."""
    return _changing(arg1, arg2, arg3, group=group, version=version, kind=kind, plural=plural,
                     singular=singular, shortcut=shortcut, category=category, id=id, param=param,
                     errors=errors, timeout=timeout, retries=retries, backoff=backoff, labels=labels,
                     annotations=annotations, when=when, field=field, value=value, old=None, new=None,
                     registry=registry, reason=None, initial=True, deleted=deleted,
                     requires_finalizer=None, field_needs_change=False)


@_parameters.described
def create(
        arg1: ResourceArg = None, arg2: str | Marker | None = None, arg3: str | Marker | None = None, /, *,
        group: str | None = None, version: str | None = None, kind: str | None = None,
        plural: str | None = None, singular: str | None = None, shortcut: str | None = None,
        category: str | None = None, id: str | None = None, param: Any | None = None,
        errors: ErrorsMode | None = None, timeout: float | None = None, retries: int | None = None,
        backoff: float | None = None,
        labels: MetaFilter | None = None, annotations: MetaFilter | None = None,
        when: Callable[..., bool] | None = None, field: FieldSpec = None, value: Any | None = None,
        registry: OperatorRegistry | None = None,
) -> Callable[[ChangingFnT], ChangingFnT]:
    """``@kopf.on.create()``: for newly created objects."""
    return _changing(arg1, arg2, arg3, group=group, version=version, kind=kind, plural=plural,
                     singular=singular, shortcut=shortcut, category=category, id=id, param=param,
                     errors=errors, timeout=timeout, retries=retries, backoff=backoff, labels=labels,
                     annotations=annotations, when=when, field=field, value=value, old=None, new=None,
                     registry=registry, reason=Reason.CREATE, initial=None, deleted=None,
                     requires_finalizer=None, field_needs_change=False)


@_parameters.described
def update(
        arg1: ResourceArg = None, arg2: str | Marker | None = None, arg3: str | Marker | None = None, /, *,
        group: str | None = None, version: str | None = None, kind: str | None = None,
        plural: str | None = None, singular: str | None = None, shortcut: str | None = None,
        category: str | None = None, id: str | None = None, param: Any | None = None,
        errors: ErrorsMode | None = None, timeout: float | None = None, retries: int | None = None,
        backoff: float | None = None,
        labels: MetaFilter | None = None, annotations: MetaFilter | None = None,
        when: Callable[..., bool] | None = None, field: FieldSpec = None, value: Any | None = None,
        old: Any | None = None, new: Any | None = None,
        registry: OperatorRegistry | None = None,
) -> Callable[[ChangingFnT], ChangingFnT]:
    """``@kopf.on.update()``: for essential changes of existing objects."""
    return _changing(arg1, arg2, arg3, group=group, version=version, kind=kind, plural=plural,
                     singular=singular, shortcut=shortcut, category=category, id=id, param=param,
                     errors=errors, timeout=timeout, retries=retries, backoff=backoff, labels=labels,
                     annotations=annotations, when=when, field=field, value=value, old=old, new=new,
                     registry=registry, reason=Reason.UPDATE, initial=None, deleted=None,
                     requires_finalizer=None, field_needs_change=True)


@_parameters.described
def delete(
        arg1: ResourceArg = None, arg2: str | Marker | None = None, arg3: str | Marker | None = None, /, *,
        group: str | None = None, version: str | None = None, kind: str | None = None,
        plural: str | None = None, singular: str | None = None, shortcut: str | None = None,
        category: str | None = None, id: str | None = None, param: Any | None = None,
        errors: ErrorsMode | None = None, timeout: float | None = None, retries: int | None = None,
        backoff: float | None = None, optional: bool | None = None,
        labels: MetaFilter | None = None, annotations: MetaFilter | None = None,
        when: Callable[..., bool] | None = None, field: FieldSpec = None, value: Any | None = None,
        registry: OperatorRegistry | None = None,
) -> Callable[[ChangingFnT], ChangingFnT]:
    """``@kopf.on.delete()``: for objects being deleted (blocked by a finalizer unless optional)."""
    return _changing(arg1, arg2, arg3, group=group, version=version, kind=kind, plural=plural,
                     singular=singular, shortcut=shortcut, category=category, id=id, param=param,
                     errors=errors, timeout=timeout, retries=retries, backoff=backoff, labels=labels,
                     annotations=annotations, when=when, field=field, value=value, old=None, new=None,
                     registry=registry, reason=Reason.DELETE, initial=None, deleted=None,
                     requires_finalizer=bool(not optional), field_needs_change=False)


@_parameters.described
def field(
        arg1: ResourceArg = None, arg2: str | Marker | None = None, arg3: str | Marker | None = None, /, *,
        group: str | None = None, version: str | None = None, kind: str | None = None,
        plural: str | None = None, singular: str | None = None, shortcut: str | None = None,
        category: str | None = None, id: str | None = None, param: Any | None = None,
        errors: ErrorsMode | None = None, timeout: float | None = None, retries: int | None = None,
        backoff: float | None = None,
        labels: MetaFilter | None = None, annotations: MetaFilter | None = None,
        when: Callable[..., bool] | None = None, field: str | list[str] | tuple[str, ...],
        value: Any | None = None, old: Any | None = None, new: Any | None = None,
        registry: OperatorRegistry | None = None,
) -> Callable[[ChangingFnT], ChangingFnT]:
    """``@kopf.on.field()``: for changes of one field, whatever the cause."""
    return _changing(arg1, arg2, arg3, group=group, version=version, kind=kind, plural=plural,
                     singular=singular, shortcut=shortcut, category=category, id=id, param=param,
                     errors=errors, timeout=timeout, retries=retries, backoff=backoff, labels=labels,
                     annotations=annotations, when=when, field=field, value=value, old=old, new=new,
                     registry=registry, reason=None, initial=None, deleted=None,
                     requires_finalizer=None, field_needs_change=True)


@_parameters.described
def event(
        arg1: ResourceArg = None, arg2: str | Marker | None = None, arg3: str | Marker | None = None, /, *,
        group: str | None = None, version: str | None = None, kind: str | None = None,
        plural: str | None = None, singular: str | None = None, shortcut: str | None = None,
        category: str | None = None, id: str | None = None, param: Any | None = None,
        labels: MetaFilter | None = None, annotations: MetaFilter | None = None,
        when: Callable[..., bool] | None = None, field: FieldSpec = None, value: Any | None = None,
        registry: OperatorRegistry | None = None,
) -> Callable[[WatchingFnT], WatchingFnT]:
    """``@kopf.on.event()``: for every raw watch event, silently; errors are logged and ignored."""
    def decorator(fn: WatchingFnT) -> WatchingFnT:
        real_registry, real_field = _checked(registry, field, value, labels, annotations)
        selector = Selector(arg1, arg2, arg3, group=group, version=version, kind=kind, plural=plural,
                            singular=singular, shortcut=shortcut, category=category)
        real_registry._watching.append(WatchingHandler(
            fn=_models.typed(fn), id=generate_id(fn=fn, id=id, suffix='.'.join(real_field or [])), param=param,
            errors=None, timeout=None, retries=None, backoff=None,
            selector=selector, labels=labels, annotations=annotations, when=when,
            field=real_field, value=value,
        ))
        return fn
    return decorator


@_parameters.described
def log(
        arg1: ResourceArg = None, arg2: str | Marker | None = None, arg3: str | Marker | None = None, /, *,
        group: str | None = None, version: str | None = None, kind: str | None = None,
        plural: str | None = None, singular: str | None = None, shortcut: str | None = None,
        category: str | None = None, id: str | None = None, param: Any | None = None,
        errors: ErrorsMode | None = None, timeout: float | None = None, retries: int | None = None,
        backoff: float | None = None,
        regex: str | re.Pattern[str] | None = None, container: str | Collection[str] | None = None,
        labels: MetaFilter | None = None, annotations: MetaFilter | None = None,
        when: Callable[..., bool] | None = None, field: FieldSpec = None, value: Any | None = None,
        registry: OperatorRegistry | None = None,
) -> Callable[[LoggingFnT], LoggingFnT]:
    """``@kopf.on.log()``: for lines of the logs of pods' containers (not in Kopf).

    The resource is pods (``''``, ``'v1'``, ``'pods'``) unless given. Each running container
    of each matching pod is followed, from its start, line by line and in order; with
    ``regex=`` (a string or a compiled pattern, flags kept), only the lines it finds (with
    ``re.search``) reach the function. ``container=`` names the containers to follow (a name
    or several; all if unset). The function gets ``log`` (the line, without its newline),
    ``match`` (the ``re.Match``, or ``None`` without a regex), ``container``, ``timestamp``
    (the line's time, as its container runtime gave it), and the pod's kwargs, as
    ``on.event`` handlers have them; its ``patch`` is applied to the pod.
    The patterns are matched by the core: one it cannot take (look-arounds, backreferences)
    fails here. Errors are logged and the line skipped, unless ``errors=`` says otherwise:
    ``kopf.ErrorsMode.TEMPORARY`` retries the line (with ``backoff``, ``retries``,
    ``timeout``) before the pod's next lines are handled.
    """
    pattern = _log_pattern(regex)
    containers = _containers(container)
    if arg1 is None and arg2 is None and arg3 is None and group is None and version is None and kind is None \
            and plural is None and singular is None and shortcut is None and category is None:
        arg1, arg2, arg3 = '', 'v1', 'pods'

    def decorator(fn: LoggingFnT) -> LoggingFnT:
        real_registry, real_field = _checked(registry, field, value, labels, annotations)
        selector = Selector(arg1, arg2, arg3, group=group, version=version, kind=kind, plural=plural,
                            singular=singular, shortcut=shortcut, category=category)
        real_registry._logging.append(LogHandler(
            fn=fn, id=generate_id(fn=fn, id=id), param=param,
            errors=errors, timeout=timeout, retries=retries, backoff=backoff,
            selector=selector, labels=labels, annotations=annotations, when=when,
            field=real_field, value=value, regex=pattern, containers=containers,
        ))
        return fn
    return decorator


def _log_pattern(regex: str | re.Pattern[str] | None) -> re.Pattern[str] | None:
    """A log handler's pattern, compiled, if the core can match it as Python's `re` would."""
    if isinstance(regex, str):
        try:
            regex = re.compile(regex)
        except re.error as e:
            raise ValueError(f"The log handler's regex={regex!r} is not a valid pattern: {e}") from e
    if regex is None:
        return None
    if not isinstance(regex, re.Pattern):
        raise TypeError(f"A log handler's regex= is a string or a compiled pattern, not {type(regex).__name__}.")
    if not isinstance(regex.pattern, str):
        raise TypeError("A log handler's regex= is a text pattern: the lines are text, not bytes.")
    try:
        services.log_pattern_matches(regex.pattern, int(regex.flags), [])
    except ValueError as e:
        raise ValueError(f"The log handler's regex={regex.pattern!r} cannot be matched by the engine "
                         f"(it matches lines in Rust's regex syntax): {e}") from e
    return regex


def _containers(container: str | Collection[str] | None) -> tuple[str, ...] | None:
    """A log handler's containers: one name or several; none for all of them."""
    if container is None:
        return None
    containers = (container,) if isinstance(container, str) else tuple(container)
    if not containers or not all(isinstance(c, str) and c for c in containers):
        raise ValueError(f"A log handler's container= names one container or several, not {container!r}.")
    return containers


@_parameters.described
def reconcile(
        arg1: ResourceArg = None, arg2: str | Marker | None = None, arg3: str | Marker | None = None, /, *,
        group: str | None = None, version: str | None = None, kind: str | None = None,
        plural: str | None = None, singular: str | None = None, shortcut: str | None = None,
        category: str | None = None, id: str | None = None, param: Any | None = None,
        errors: ErrorsMode | None = None, timeout: float | None = None, retries: int | None = None,
        finalizer: bool = False, owns: Collection[Any] = (),
        labels: MetaFilter | None = None, annotations: MetaFilter | None = None,
        when: Callable[..., bool] | None = None, field: FieldSpec = None, value: Any | None = None,
        registry: OperatorRegistry | None = None,
) -> Callable[[ReconcilingFnT], ReconcilingFnT]:
    """``@kopf.on.reconcile()``: bring the world in line with the object, whatever changed (not
    in Kopf; level-based, as controller-runtime's and kube-rs's controllers are).

    The function gets the object as it is now, with the kwargs of ``on.event`` handlers (no
    ``reason``, ``diff``, ``old`` or ``new``: it is not told what changed) and ``deleting``
    (whether the object is being deleted). It is called when the object appears, when it
    changes (spec, labels, annotations: not its status), for every object once at the start,
    when a requeue it asked for is due, and when it is being deleted; calls for one object
    never overlap, and changes that come during a call make one more call. It returns nothing,
    a result for ``status.<id>``, or ``kopf.Requeue(after=seconds)``. A failure is retried
    after the object's own backoff (``settings.reconciling``), or a ``kopf.TemporaryError``'s
    own ``delay``; a change of the object retries at once. With ``owns=``, a change of a child
    (an object of those resources whose ``ownerReferences`` name the object, as ``kopf.adopt()``
    sets them) calls it too. A resource served by reconcile handlers has no change handlers
    (``@kopf.on.create`` & co.).
    """
    children = _owned(owns)

    def decorator(fn: ReconcilingFnT) -> ReconcilingFnT:
        real_registry, real_field = _checked(registry, field, value, labels, annotations)
        selector = Selector(arg1, arg2, arg3, group=group, version=version, kind=kind, plural=plural,
                            singular=singular, shortcut=shortcut, category=category)
        _refuse_both_styles(real_registry, selector, reconciling=True)
        real_registry._reconciling.append(ReconcilingHandler(
            fn=_models.typed(fn), id=generate_id(fn=fn, id=id), param=param,
            errors=errors, timeout=timeout, retries=retries, backoff=None,
            selector=selector, labels=labels, annotations=annotations, when=when,
            field=real_field, value=value, finalizer=bool(finalizer), owns=children,
        ))
        return fn
    return decorator


@_parameters.described
def related(
        arg1: ResourceArg = None, arg2: str | Marker | None = None, arg3: str | Marker | None = None, /, *,
        owners: Any,
        group: str | None = None, version: str | None = None, kind: str | None = None,
        plural: str | None = None, singular: str | None = None, shortcut: str | None = None,
        category: str | None = None, id: str | None = None, param: Any | None = None,
        labels: MetaFilter | None = None, annotations: MetaFilter | None = None,
        when: Callable[..., bool] | None = None, field: FieldSpec = None, value: Any | None = None,
        registry: OperatorRegistry | None = None,
) -> Callable[[RelatingFnT], RelatingFnT]:
    """``@kopf.related()``: tell which owners an object of another resource concerns, so that its
    changes call their ``@kopf.on.reconcile`` handlers (not in Kopf; controller-runtime's map
    functions, kube-rs's ``watches``).

    The function gets an object of its resource (the kwargs of ``@kopf.index`` functions, the
    indices too) whenever it appears, changes or is deleted, and returns the owners it concerns:
    a name (in the object's namespace), a dict with ``name`` and ``namespace``, an owner's body,
    a list of those, or ``None``. The owners named now and those named for the object before are
    called, once each however many of their related objects changed. An error is logged and
    keeps the owners named before. The resource is watched once for all owners.
    """
    owner = _resource_named(owners, 'owners')

    def decorator(fn: RelatingFnT) -> RelatingFnT:
        real_registry, real_field = _checked(registry, field, value, labels, annotations)
        selector = Selector(arg1, arg2, arg3, group=group, version=version, kind=kind, plural=plural,
                            singular=singular, shortcut=shortcut, category=category)
        real_registry._relating.append(RelatingHandler(
            fn=_models.typed(fn), id=generate_id(fn=fn, id=id), param=param,
            errors=None, timeout=None, retries=None, backoff=None,
            selector=selector, labels=labels, annotations=annotations, when=when,
            field=real_field, value=value, owners=owner,
        ))
        return fn
    return decorator


def _owned(owns: Collection[Any]) -> tuple[Selector, ...]:
    """The children's resources of ``owns=``."""
    if isinstance(owns, str | bytes) or not isinstance(owns, Collection):
        raise TypeError(f"owns= takes a list of resources, each as a handler's would be named "
                        f"(e.g. ['deployments', ('', 'v1', 'services')]), not {owns!r}.")
    return tuple(_resource_named(owned, 'owns') for owned in owns)


def _resource_named(named: Any, option: str) -> Selector:
    """A resource named in an option (``owns=``, ``owners=``) as a handler's resource is: a name,
    a tuple of its positional parts, or a model class."""
    parts = named if isinstance(named, tuple) else (named,)
    if not parts or not all(isinstance(p, str) or isinstance(p, type) for p in parts) or len(parts) > 3:
        raise TypeError(f"{option}=: {named!r} names no resource (a name like 'deployments', a tuple like "
                        f"('apps', 'v1', 'deployments'), or a model class).")
    return Selector(*parts)


def _refuse_both_styles(registry: OperatorRegistry, selector: Selector | None, *, reconciling: bool) -> None:
    """Reconcile handlers and change handlers of one resource would both act on each change, each
    believing it owns the object: refused at the declaration where the selectors say it (the core
    refuses it for the resources they share in other spellings). Checked before the handler is added."""
    others = registry._changing if reconciling else registry._reconciling
    if selector is not None and any(handler.selector == selector for handler in others):
        raise TypeError(f"@kopf.on.reconcile and change handlers (@kopf.on.create, update, delete, resume, "
                        f"field) cannot serve the same resource ({selector}): a reconcile handler sees every "
                        f"change itself. Choose one style per resource.")


@_parameters.described
def index(
        arg1: ResourceArg = None, arg2: str | Marker | None = None, arg3: str | Marker | None = None, /, *,
        group: str | None = None, version: str | None = None, kind: str | None = None,
        plural: str | None = None, singular: str | None = None, shortcut: str | None = None,
        category: str | None = None, id: str | None = None, param: Any | None = None,
        errors: ErrorsMode | None = None, timeout: float | None = None, retries: int | None = None,
        backoff: float | None = None,
        labels: MetaFilter | None = None, annotations: MetaFilter | None = None,
        when: Callable[..., bool] | None = None, field: FieldSpec = None, value: Any | None = None,
        registry: OperatorRegistry | None = None,
) -> Callable[[IndexingFnT], IndexingFnT]:
    """``@kopf.index()``: index the objects in memory, by what the function returns for each.

    A dict's keys and values go into the index (anything else goes under the key ``None``;
    ``None`` indexes nothing). Handlers get the index as a kwarg named by the id (the
    function's name by default), a ``kopf.Index``; they start once the objects that exist
    at the operator's start are indexed.
    """
    def decorator(fn: IndexingFnT) -> IndexingFnT:
        real_registry, real_field = _checked(registry, field, value, labels, annotations)
        selector = Selector(arg1, arg2, arg3, group=group, version=version, kind=kind, plural=plural,
                            singular=singular, shortcut=shortcut, category=category)
        real_registry._indexing.append(IndexingHandler(
            fn=_models.typed(fn), id=generate_id(fn=fn, id=id), param=param,
            errors=errors, timeout=timeout, retries=retries, backoff=backoff,
            selector=selector, labels=labels, annotations=annotations, when=when,
            field=real_field, value=value,
        ))
        return fn
    return decorator


def _verify_operations(operation: str | None, operations: Collection[str] | None) -> Collection[str] | None:
    if operation is not None:
        warnings.warn("operation= is deprecated, use operations={...}.", DeprecationWarning, stacklevel=3)
        operations = frozenset(operations or ()) | {operation}
    if operations is not None and not operations:
        raise ValueError(f"Operations should be either None or non-empty. Got empty {operations}.")
    return operations


def _webhook(reason: WebhookType, selector: Selector, *, id: str | None, param: Any,
             operation: str | None, operations: Collection[str] | None, subresource: str | None,
             persistent: bool | None, side_effects: bool | None, ignore_failures: bool | None,
             labels: MetaFilter | None, annotations: MetaFilter | None, when: Callable[..., bool] | None,
             field: FieldSpec, value: Any, registry: OperatorRegistry | None) -> Callable[[FnT], FnT]:
    def decorator(fn: FnT) -> FnT:
        real_operations = _verify_operations(operation, operations)
        _verify_values(field, value)
        _verify_filters(labels, annotations)
        real_registry = registry if registry is not None else get_default_registry()
        real_field = parse_field(field) or None
        real_registry._webhooks.append(WebhookHandler(
            fn=_models.typed(fn), id=generate_id(fn=fn, id=id, suffix='.'.join(real_field or [])), param=param,
            errors=None, timeout=None, retries=None, backoff=None,
            selector=selector, labels=labels, annotations=annotations, when=when,
            field=real_field, value=value, reason=reason, operations=real_operations,
            subresource=subresource, persistent=persistent, side_effects=side_effects,
            ignore_failures=ignore_failures,
        ))
        return fn
    return decorator


@_parameters.described
def validate(
        arg1: ResourceArg = None, arg2: str | Marker | None = None, arg3: str | Marker | None = None, /, *,
        group: str | None = None, version: str | None = None, kind: str | None = None,
        plural: str | None = None, singular: str | None = None, shortcut: str | None = None,
        category: str | None = None, id: str | None = None, param: Any | None = None,
        operation: str | None = None, operations: Collection[str] | None = None,
        subresource: str | None = None, persistent: bool | None = None,
        side_effects: bool | None = None, ignore_failures: bool | None = None,
        labels: MetaFilter | None = None, annotations: MetaFilter | None = None,
        when: Callable[..., bool] | None = None, field: FieldSpec = None, value: Any | None = None,
        registry: OperatorRegistry | None = None,
) -> Callable[[WebhookFnT], WebhookFnT]:
    """``@kopf.on.validate()``: a validating admission webhook's handler.

    It is called for each admission request of the resource (served by
    ``settings.admission.server``); raising ``kopf.AdmissionError`` (or any error)
    rejects the request with its message; ``warnings`` are shown to the client.
    """
    selector = Selector(arg1, arg2, arg3, group=group, version=version, kind=kind, plural=plural,
                        singular=singular, shortcut=shortcut, category=category)
    return _webhook(WebhookType.VALIDATING, selector, id=id, param=param, operation=operation,
                    operations=operations, subresource=subresource, persistent=persistent,
                    side_effects=side_effects, ignore_failures=ignore_failures, labels=labels,
                    annotations=annotations, when=when, field=field, value=value, registry=registry)


@_parameters.described
def mutate(
        arg1: ResourceArg = None, arg2: str | Marker | None = None, arg3: str | Marker | None = None, /, *,
        group: str | None = None, version: str | None = None, kind: str | None = None,
        plural: str | None = None, singular: str | None = None, shortcut: str | None = None,
        category: str | None = None, id: str | None = None, param: Any | None = None,
        operation: str | None = None, operations: Collection[str] | None = None,
        subresource: str | None = None, persistent: bool | None = None,
        side_effects: bool | None = None, ignore_failures: bool | None = None,
        labels: MetaFilter | None = None, annotations: MetaFilter | None = None,
        when: Callable[..., bool] | None = None, field: FieldSpec = None, value: Any | None = None,
        registry: OperatorRegistry | None = None,
) -> Callable[[WebhookFnT], WebhookFnT]:
    """``@kopf.on.mutate()``: a mutating admission webhook's handler.

    Its changes to the ``patch`` kwarg go back to the apiserver as a JSON-patch of the
    object under admission; errors reject the request as in validating handlers.
    """
    selector = Selector(arg1, arg2, arg3, group=group, version=version, kind=kind, plural=plural,
                        singular=singular, shortcut=shortcut, category=category)
    return _webhook(WebhookType.MUTATING, selector, id=id, param=param, operation=operation,
                    operations=operations, subresource=subresource, persistent=persistent,
                    side_effects=side_effects, ignore_failures=ignore_failures, labels=labels,
                    annotations=annotations, when=when, field=field, value=value, registry=registry)


@_parameters.described
def convert(
        arg1: str | None = None, arg2: str | None = None, /, *,
        source: str | type, target: str | type,
        group: str | None = None, kind: str | None = None, plural: str | None = None,
        singular: str | None = None, shortcut: str | None = None,
        id: str | None = None, param: Any | None = None,
        registry: OperatorRegistry | None = None,
) -> Callable[[ConversionFnT], ConversionFnT]:
    """``@kopf.on.convert()``: one step between two versions of a custom resource (not in Kopf).

    The resource is a CRD's, named without a version (``'greetings.demo.kopf.dev'``, or
    ``'demo.kopf.dev', 'greetings'``): ``source=`` and ``target=`` are the versions the step
    converts from and to. The function gets the object in the source version (``body``,
    ``spec``, ``meta``, ``status``, ``labels``, ``annotations``, ``name``, ``namespace``,
    ``uid``, ``logger``, ``memo``, ``resource``, ``patch``, ``param``, ``source``, ``target``)
    and either returns the converted object's fields (a dict: each top-level field replaced,
    ``metadata``'s given keys only), or fills ``patch`` (a merge-patch of the object), or both;
    the core sets ``apiVersion``. Only labels and annotations of the metadata may change.

    The API server asks for conversions through the operator's webhook server
    (``settings.admission.server``); ``settings.conversion.managed = True`` points the CRD's
    ``spec.conversion`` at it. Steps chain: with ``v1 → v2`` and ``v2 → v3`` declared, a
    ``v1`` object is read as ``v3`` through both. Every served version must lead to every
    other one, or the operator does not start. Any error fails the conversion, with its
    message shown to the API server's client.

    ``source=`` and ``target=`` may be the models of the two versions (``kopf.CustomResource``'s
    subclasses, not in Kopf): the resource is then theirs and need not be named, and the
    function's ``body`` or ``spec`` annotated with the source's models gets them validated; a
    model returned is the converted object's fields that it was given.
    """
    if isinstance(source, type) or isinstance(target, type):
        declared = [getattr(model, '__kopf_resource__', None) for model in (source, target)]
        if declared[0] is None or declared[1] is None:
            raise TypeError(f"A conversion handler's source= and target= are both versions or both models "
                            f"(kopf.CustomResource); got {source!r} and {target!r}.")
        if (declared[0].group, declared[0].plural) != (declared[1].group, declared[1].plural):
            raise ValueError(f"A conversion handler converts between versions of one resource: {declared[0].name} "
                             f"and {declared[1].name} are two.")
        if arg1 is None and arg2 is None and group is None and plural is None and kind is None:
            arg1, arg2 = declared[0].group, declared[0].plural
        source, target = declared[0].version, declared[1].version
    selector = Selector(arg1, arg2, group=group, kind=kind, plural=plural, singular=singular, shortcut=shortcut)
    if selector.version is not None:
        raise TypeError(f"A conversion handler's resource names no version ({selector.version!r} given): "
                        f"the versions are source= and target=.")
    if not isinstance(selector.any_name or '', str):
        raise TypeError("A conversion handler's resource is one custom resource, named: not a marker.")
    for what, version in (('source', source), ('target', target)):
        if not isinstance(version, str) or not _VERSION.fullmatch(version):
            raise ValueError(f"A conversion handler's {what}= is a version of the resource, "
                             f"such as 'v1' or 'v2beta1'; got {version!r}.")
    if source == target:
        raise ValueError(f"A conversion handler converts between two versions; source= and target= "
                         f"are both {source!r}.")
    source_version, target_version = str(source), str(target)  # (versions by now: checked above)

    def decorator(fn: ConversionFnT) -> ConversionFnT:
        real_registry = registry if registry is not None else get_default_registry()
        for other in real_registry._conversions:
            if other.selector == selector and (other.source, other.target) == (source_version, target_version):
                raise ValueError(f"{other} already converts {selector!r} from {source} to {target}: "
                                 f"one step per pair of versions.")
        real_registry._conversions.append(ConversionHandler(
            fn=_models.typed(fn), id=generate_id(fn=fn, id=id), param=param,
            errors=None, timeout=None, retries=None, backoff=None,
            selector=selector, source=source_version, target=target_version,
        ))
        return fn
    return decorator


# What the API server takes as a version's name (a DNS label: `v1`, `v2beta1`, `v1alpha2`).
_VERSION = re.compile(r'[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?')


def _spawning(selector: Selector, *, id: str | None, field: FieldSpec, value: Any,
              labels: MetaFilter | None, annotations: MetaFilter | None,
              registry: OperatorRegistry | None,
              make: Callable[..., SpawningHandler], **options: Any) -> Callable[[FnT], FnT]:
    def decorator(fn: FnT) -> FnT:
        _verify_values(field, value)
        _verify_filters(labels, annotations)
        real_registry = registry if registry is not None else get_default_registry()
        real_field = parse_field(field) or None
        real_registry._spawning.append(make(
            fn=_models.typed(fn), id=generate_id(fn=fn, id=id, suffix='.'.join(real_field or [])),
            selector=selector, labels=labels, annotations=annotations,
            field=real_field, value=value, requires_finalizer=True, **options,
        ))
        return fn
    return decorator


@_parameters.described
def daemon(
        arg1: ResourceArg = None, arg2: str | Marker | None = None, arg3: str | Marker | None = None, /, *,
        group: str | None = None, version: str | None = None, kind: str | None = None,
        plural: str | None = None, singular: str | None = None, shortcut: str | None = None,
        category: str | None = None, id: str | None = None, param: Any | None = None,
        errors: ErrorsMode | None = None, timeout: float | None = None, retries: int | None = None,
        backoff: float | None = None, initial_delay: float | Callable[..., float] | None = None,
        cancellation_backoff: float | None = None, cancellation_timeout: float | None = None,
        cancellation_polling: float | None = None,
        labels: MetaFilter | None = None, annotations: MetaFilter | None = None,
        when: Callable[..., bool] | None = None, field: FieldSpec = None, value: Any | None = None,
        registry: OperatorRegistry | None = None,
) -> Callable[[DaemonFnT], DaemonFnT]:
    """``@kopf.daemon()``: a function that runs for as long as each matching object exists.

    It gets a ``stopped`` kwarg: truthy when the daemon should exit (the object is deleted,
    stops matching the filters, or the operator exits). Async daemons are also cancelled
    after ``cancellation_backoff`` seconds, and abandoned after ``cancellation_timeout`` more.
    A daemon that returns is not restarted; one that fails is retried as other handlers are.
    """
    selector = Selector(arg1, arg2, arg3, group=group, version=version, kind=kind, plural=plural,
                        singular=singular, shortcut=shortcut, category=category)
    return _spawning(
        selector, id=id, field=field, value=value, labels=labels, annotations=annotations, registry=registry,
        make=DaemonHandler, param=param, errors=errors, timeout=timeout, retries=retries,
        backoff=backoff, when=when, initial_delay=initial_delay,
        cancellation_backoff=cancellation_backoff, cancellation_timeout=cancellation_timeout,
        cancellation_polling=cancellation_polling)


@_parameters.described
def timer(
        arg1: ResourceArg = None, arg2: str | Marker | None = None, arg3: str | Marker | None = None, /, *,
        group: str | None = None, version: str | None = None, kind: str | None = None,
        plural: str | None = None, singular: str | None = None, shortcut: str | None = None,
        category: str | None = None, id: str | None = None, param: Any | None = None,
        errors: ErrorsMode | None = None, timeout: float | None = None, retries: int | None = None,
        backoff: float | None = None, interval: float | None = None,
        initial_delay: float | Callable[..., float] | None = None,
        sharp: bool | None = None, idle: float | None = None,
        labels: MetaFilter | None = None, annotations: MetaFilter | None = None,
        when: Callable[..., bool] | None = None, field: FieldSpec = None, value: Any | None = None,
        registry: OperatorRegistry | None = None,
        cron: str | None = None, timezone: str | None = None,
) -> Callable[[TimerFnT], TimerFnT]:
    """``@kopf.timer()``: a function called every ``interval`` seconds for each matching object.

    With ``idle``, only once the object has not changed for that many seconds;
    with ``sharp``, on a fixed grid of intervals however long each call takes.
    Not in Kopf: ``cron='*/5 * * * *'`` (five fields, or ``@hourly`` & co) instead of an
    interval calls it at the schedule's instants, in ``timezone`` (an IANA name; UTC if
    unset); a failed call is retried with its backoff, then the schedule goes on.
    Results and ``patch`` are applied to the object after each call.
    """
    if cron is not None:
        clashing = {'interval': interval, 'initial_delay': initial_delay, 'idle': idle, 'sharp': sharp}
        given = [name for name, option in clashing.items() if option is not None]
        if given:
            raise TypeError(f"A timer with cron= cannot have {', '.join(f'{n}=' for n in given)}: "
                            "the schedule alone says when it runs.")
        services.check_cron(cron, timezone)
    elif timezone is not None:
        raise TypeError("A timer's timezone= applies to cron= schedules only.")
    selector = Selector(arg1, arg2, arg3, group=group, version=version, kind=kind, plural=plural,
                        singular=singular, shortcut=shortcut, category=category)
    return _spawning(
        selector, id=id, field=field, value=value, labels=labels, annotations=annotations, registry=registry,
        make=TimerHandler, param=param, errors=errors, timeout=timeout, retries=retries,
        backoff=backoff, when=when, initial_delay=initial_delay, sharp=sharp, idle=idle,
        interval=interval, cron=cron, timezone=timezone)


@_parameters.described
def subhandler(
        *, id: str | None = None, param: Any | None = None,
        errors: ErrorsMode | None = None, timeout: float | None = None, retries: int | None = None,
        backoff: float | None = None,
        labels: MetaFilter | None = None, annotations: MetaFilter | None = None,
        when: Callable[..., bool] | None = None, field: FieldSpec = None, value: Any | None = None,
        old: Any | None = None, new: Any | None = None,
) -> Callable[[ChangingFnT], ChangingFnT]:
    """``@kopf.subhandler()``: a sub-handler of the change handler that is running now.

    Used inside a handler, e.g. once per item of the object's spec::

        @kopf.on.create('kopfexamples')
        def create_fn(spec, **_):
            for item in spec.get('items', []):
                @kopf.subhandler(id=item)
                def create_item(item=item, **_):
                    ...

    Its id is ``<parent id>/<its id>``; it has its own progress, retries and result, and
    runs after the handler returns (or when it calls ``await kopf.execute()``). The parent
    is not finished until all its sub-handlers are: it is called again in later cycles and
    must declare the same sub-handlers each time (keep it idempotent).
    """
    def decorator(fn: ChangingFnT) -> ChangingFnT:
        call = _subhandling.current_call("@kopf.subhandler")
        parent = call.handler
        if not isinstance(parent, ChangingHandler):
            raise TypeError("Sub-handlers are only supported for resource-changing handlers.")
        if old is not None or new is not None:
            is_on_update = parent.reason == Reason.UPDATE
            is_on_field = parent.reason is None and not parent.initial
            if not is_on_update and not is_on_field:
                raise TypeError("Filters old=/new= can only be used in update handlers.")
        _verify_values(field, value, old, new)
        _verify_filters(labels, annotations)
        call.declared.append(_subhandling.sub_handler(
            fn, parent=parent, id=id, param=param, errors=errors, timeout=timeout, retries=retries,
            backoff=backoff, labels=labels, annotations=annotations, when=when,
            field=parse_field(field) or None, value=value, old=old, new=new,
        ))
        return fn
    return decorator


@_parameters.described
def register(
        fn: ChangingFnT, *, id: str | None = None, param: Any | None = None,
        errors: ErrorsMode | None = None, timeout: float | None = None, retries: int | None = None,
        backoff: float | None = None,
        labels: MetaFilter | None = None, annotations: MetaFilter | None = None,
        when: Callable[..., bool] | None = None,
) -> ChangingFnT:
    """``kopf.register(fn, id=...)``: the same as ``@kopf.subhandler(id=...)`` on ``fn``."""
    decorator = subhandler(id=id, param=param, errors=errors, timeout=timeout, retries=retries,
                           backoff=backoff, labels=labels, annotations=annotations, when=when)
    return decorator(fn)


if not TYPE_CHECKING:  # type checkers keep reporting unknown names as such
    def __getattr__(name: str) -> Any:
        """An unknown decorator fails with what this package is, not a bare AttributeError."""
        raise _errors.missing_name(__name__, name)
