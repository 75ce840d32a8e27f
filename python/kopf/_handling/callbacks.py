"""What a type checker expects of each kind of handler: the keyword arguments it is given.

The decorators check a decorated function against these (as Kopf's do: a function that
requires an argument no call provides is reported) and keep the function's own type. So
the ``# type: ignore`` comments that operators written for Kopf carry are still needed
here, and ``mypy --strict`` reports no unused ones.

Every call also passes ``**kwargs`` (indices, and what later versions add): each protocol
accepts them, so a function taking ``**_`` matches whatever it leaves out.
"""

from __future__ import annotations

import datetime
import logging
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from kopf._connecting.webhooks import Headers, SSLPeer, UserInfo
    from kopf._handling.daemons import DaemonStopped
    from kopf._structures.references import Resource
    from kopf._structures.settings import OperatorSettings
    from kopf._structures.structs import (
        Annotations,
        Body,
        BodyEssence,
        Diff,
        Labels,
        Meta,
        Patch,
        RawEvent,
        Spec,
        Status,
    )

    Logger = logging.Logger | logging.LoggerAdapter[Any]
    Old = BodyEssence | Any | None  # a field's value, or the essence of the whole body


class ActivityFn(Protocol):
    """``on.startup``, ``on.cleanup``, ``on.login``, ``on.probe``."""

    def __call__(self, *, settings: OperatorSettings, retry: int, started: datetime.datetime,
                 runtime: datetime.timedelta, logger: Logger, memo: Any, param: Any = ...,
                 **kwargs: Any) -> object: ...


class IndexingFn(Protocol):
    """``@kopf.index``."""

    def __call__(self, *, body: Body, meta: Meta, spec: Spec, status: Status, labels: Labels,
                 annotations: Annotations, resource: Resource, uid: str, name: str, namespace: str | None,
                 patch: Patch, logger: Logger, memo: Any, param: Any = ..., **kwargs: Any) -> object: ...


class WatchingFn(Protocol):
    """``on.event``: the raw event besides the object."""

    def __call__(self, *, type: str, event: RawEvent, body: Body, meta: Meta, spec: Spec, status: Status,
                 labels: Labels, annotations: Annotations, resource: Resource, uid: str, name: str,
                 namespace: str | None, patch: Patch, logger: Logger, memo: Any, param: Any = ...,
                 **kwargs: Any) -> object: ...


class ReconcilingFn(Protocol):
    """``on.reconcile``: the object as it is now, and whether it is being deleted."""

    def __call__(self, *, deleting: bool, retry: int, started: datetime.datetime, runtime: datetime.timedelta,
                 body: Body, meta: Meta, spec: Spec, status: Status, labels: Labels, annotations: Annotations,
                 resource: Resource, uid: str, name: str, namespace: str | None, patch: Patch, logger: Logger,
                 memo: Any, param: Any = ..., **kwargs: Any) -> object: ...


class LoggingFn(Protocol):
    """``on.log``: a line of a pod's container's log, and the pod. (``match`` is a ``re.Match``
    with a regex, ``None`` without: typed loosely, so that either can be declared.)"""

    def __call__(self, *, log: str, match: Any, container: str, timestamp: datetime.datetime,
                 retry: int, started: datetime.datetime, runtime: datetime.timedelta, body: Body, meta: Meta,
                 spec: Spec, status: Status, labels: Labels, annotations: Annotations, resource: Resource,
                 uid: str, name: str, namespace: str | None, patch: Patch, logger: Logger, memo: Any,
                 param: Any = ..., **kwargs: Any) -> object: ...


class ConversionFn(Protocol):
    """``on.convert``: an object in the source version; the converted fields, or None."""

    def __call__(self, *, source: str, target: str, body: Body, meta: Meta, spec: Spec, status: Status,
                 labels: Labels, annotations: Annotations, resource: Resource, uid: str, name: str,
                 namespace: str | None, patch: Patch, logger: Logger, memo: Any, param: Any = ...,
                 **kwargs: Any) -> object: ...


class ChangingFn(Protocol):
    """``on.resume/create/update/delete/field``, sub-handlers: the change and the attempt."""

    def __call__(self, *, reason: str, diff: Diff, old: Old, new: Old, retry: int, started: datetime.datetime,
                 runtime: datetime.timedelta, body: Body, meta: Meta, spec: Spec, status: Status, labels: Labels,
                 annotations: Annotations, resource: Resource, uid: str, name: str, namespace: str | None,
                 patch: Patch, logger: Logger, memo: Any, param: Any = ..., **kwargs: Any) -> object: ...


class WebhookFn(Protocol):
    """``on.validate``, ``on.mutate``: the review's request besides the object."""

    def __call__(self, *, dryrun: bool, warnings: list[str], subresource: str | None, userinfo: UserInfo,
                 sslpeer: SSLPeer, headers: Headers, body: Body, meta: Meta, spec: Spec, status: Status,
                 labels: Labels, annotations: Annotations, resource: Resource, uid: str, name: str,
                 namespace: str | None, patch: Patch, logger: Logger, memo: Any, param: Any = ...,
                 **kwargs: Any) -> object: ...


class DaemonFn(Protocol):
    """``@kopf.daemon``: its stop flag and the attempt besides the object."""

    def __call__(self, *, stopped: DaemonStopped, retry: int, started: datetime.datetime,
                 runtime: datetime.timedelta, body: Body, meta: Meta, spec: Spec, status: Status, labels: Labels,
                 annotations: Annotations, resource: Resource, uid: str, name: str, namespace: str | None,
                 patch: Patch, logger: Logger, memo: Any, param: Any = ..., **kwargs: Any) -> object: ...


class TimerFn(Protocol):
    """``@kopf.timer``."""

    def __call__(self, *, body: Body, meta: Meta, spec: Spec, status: Status, labels: Labels,
                 annotations: Annotations, resource: Resource, uid: str, name: str, namespace: str | None,
                 patch: Patch, logger: Logger, memo: Any, param: Any = ..., **kwargs: Any) -> object: ...


# What each keyword argument is (the reference's table of keyword arguments shows it; the
# documentation's build fails on one that the protocols above pass and this leaves out).
KWARGS: dict[str, str] = {
    'body': "The whole object, as the event that caused the call has it (read-only).",
    'meta': "The object's ``metadata`` (read-only).",
    'spec': "The object's ``spec`` (read-only).",
    'status': "The object's ``status`` (read-only).",
    'labels': "The object's labels (read-only mapping).",
    'annotations': "The object's annotations (read-only mapping).",
    'resource': "The ``kopf.Resource`` served: group, version, plural.",
    'uid': "The object's ``metadata.uid``.",
    'name': "The object's ``metadata.name``.",
    'namespace': "The object's namespace (``None`` for cluster-scoped objects).",
    'patch': "A ``kopf.Patch`` to fill: merged into the object after the call (for ``on.mutate``: the changes "
             "to the admitted object; for ``on.convert``: to the converted one).",
    'logger': "A logger whose lines name the object (and, at INFO and above, can be posted as its Events: "
              "``settings.posting``).",
    'memo': "A ``kopf.Memo``: the operator's own (activities), or the object's, kept between calls in memory.",
    'param': "The decorator's ``param=`` value (``None`` if not given).",
    'settings': "The operator's ``kopf.OperatorSettings``: a startup handler changes them before anything "
                "is served.",
    'retry': "How many attempts of this handler came before this one (0 the first time).",
    'started': "When the handler's first attempt began (a ``datetime`` in UTC).",
    'runtime': "How long since the first attempt (a ``timedelta``).",
    'reason': "Why the change handler runs: ``'create'``, ``'update'``, ``'delete'`` or ``'resume'``.",
    'diff': "The change as a tuple of ``(operation, field path, old, new)`` items.",
    'old': "What the object (or the handler's field) was before the change: its essence, without Kopf's "
           "marks and the status.",
    'new': "What the object (or the handler's field) is after the change, as ``old``.",
    'type': "The watch event's type: ``'ADDED'``, ``'MODIFIED'``, ``'DELETED'``, or ``None`` for the "
            "objects listed at the start.",
    'event': "The raw watch event: ``{'type': ..., 'object': ...}``.",
    'stopped': "A ``kopf.DaemonStopped`` flag: true once the daemon should end (``stopped.reason`` says why); "
               "``wait(seconds)`` sleeps until then.",
    'dryrun': "Whether the admission request is a dry run (side effects must be skipped).",
    'warnings': "A list to append warnings to: the API server shows them to the client that made the request.",
    'subresource': "The subresource of the admission request (``None`` for the object itself).",
    'userinfo': "Who made the admission request: username, uid, groups.",
    'sslpeer': "The webhook client's TLS certificate, if it presented one.",
    'headers': "The admission request's HTTP headers.",
    'deleting': "Whether the object is being deleted (its ``metadata.deletionTimestamp`` is set).",
    'log': "The log line, without its newline.",
    'match': "The ``re.Match`` of the handler's ``regex=`` in the line (``None`` without a regex).",
    'container': "The name of the container that wrote the line.",
    'timestamp': "When the line was written, as the container runtime recorded it.",
    'source': "The version the object is converted from.",
    'target': "The version the object is converted to.",
}
