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
    from kopf._daemons import DaemonStopped
    from kopf._references import Resource
    from kopf._settings import OperatorSettings
    from kopf._structs import Annotations, Body, BodyEssence, Diff, Labels, Meta, Patch, RawEvent, Spec, Status
    from kopf._webhooks import Headers, SSLPeer, UserInfo

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
