"""Kopf's public API, served by an engine written in Rust.

Operators written for Kopf 1.45 import ``kopf`` and run unchanged.
"""

from kopf import _deferred

_deferred.defer_tls()  # before anything imports asyncio

import logging as _stdlogging
from typing import TYPE_CHECKING as _TYPE_CHECKING
from typing import Any as _Any

from kopf import _internals, on
from kopf import rbac as rbac  # (not in Kopf: RBAC declarations, kept out of Kopf's __all__)
from kopf._connecting.credentials import (
    AiohttpSession,
    ConnectionInfo,
    login_with_kubeconfig,
    login_with_service_account,
)
from kopf._connecting.piggybacking import login_via_async_client, login_via_client, login_via_pykube
from kopf._connecting.webhooks import (
    Headers,
    Operation,
    SSLPeer,
    UserInfo,
    WebhookAutoServer,
    WebhookAutoTunnel,
    WebhookClientConfig,
    WebhookClientConfigService,
    WebhookDockerDesktopServer,
    WebhookFn,
    WebhookK3dServer,
    WebhookMinikubeServer,
    WebhookNgrokTunnel,
    WebhookServer,
    WebhookServerProtocol,
)
from kopf._handling import lifecycles as lifecycles
from kopf._handling.daemons import (
    AsyncDaemonStopperChecker,
    DaemonStopped,
    DaemonStoppingReason,
    SyncDaemonStopperChecker,
)
from kopf._handling.handlers import OperatorRegistry, Reason, get_default_registry, set_default_registry
from kopf._handling.lifecycles import get_default_lifecycle, set_default_lifecycle
from kopf._handling.subhandling import execute
from kopf._logs.formatting import LogFormat
from kopf._logs.loggers import LocalObjectLogger, ObjectLogger, configure
from kopf._logs.posting import event, exception, info, warn
from kopf._running.operator import operator, run, run_tasks, spawn_tasks
from kopf._structures import errors as _errors
from kopf._structures.conditions import set_condition as set_condition  # (not in Kopf, nor in its __all__)
from kopf._structures.diffbase import (
    AnnotationsDiffBaseStorage,
    DiffBaseStorage,
    MultiDiffBaseStorage,
    StatusDiffBaseStorage,
)
from kopf._structures.errors import (
    AdmissionError,
    ErrorsMode,
    HandlerRetriesError,
    HandlerTimeoutError,
    LoginError,
    PermanentError,
    TemporaryError,
)
from kopf._structures.filters import ABSENT, PRESENT, all_, any_, none_, not_
from kopf._structures.hierarchies import (
    adjust_namespace,
    adopt,
    append_owner_reference,
    harmonize_naming,
    label,
    remove_owner_reference,
)
from kopf._structures.indices import Index, Store
from kopf._structures.progress import (
    AnnotationsProgressStorage,
    MultiProgressStorage,
    ProgressRecord,
    ProgressStorage,
    SmartProgressStorage,
    StatusProgressStorage,
)
from kopf._structures.references import EVERYTHING, Resource
from kopf._structures.requeues import Requeue as Requeue  # (not in Kopf, nor in its __all__)
from kopf._structures.settings import OperatorSettings
from kopf._structures.structs import (
    Annotations,
    Body,
    BodyEssence,
    Diff,
    DiffItem,
    DiffOperation,
    FieldPath,
    FieldSpec,
    HandlerId,
    Labels,
    Memo,
    Meta,
    ObjectReference,
    OwnerReference,
    Patch,
    PatchFn,
    RawBody,
    RawEvent,
    RawEventType,
    Spec,
    Status,
    build_object_reference,
    build_owner_reference,
)
from kopf._structures.versions import __version__ as __version__
from kopf.on import daemon, index, register, subhandler, timer
from kopf.on import related as related  # (not in Kopf, nor in its __all__)

_internals.install()

Logger = _stdlogging.Logger | _stdlogging.LoggerAdapter  # type: ignore[type-arg]
"""The type of the ``logger`` kwarg of handlers."""

__all__ = [
    'on', 'lifecycles', 'subhandler', 'register', 'execute', 'daemon', 'timer', 'index',
    'configure', 'LogFormat', 'get_default_lifecycle', 'set_default_lifecycle',
    'login_via_pykube', 'login_via_client', 'login_via_async_client',
    'login_with_kubeconfig', 'login_with_service_account',
    'LoginError', 'ConnectionInfo',
    'event', 'info', 'warn', 'exception',
    'operator', 'run', 'spawn_tasks', 'run_tasks', 'AiohttpSession',
    'adopt', 'label', 'harmonize_naming', 'adjust_namespace',
    'append_owner_reference', 'remove_owner_reference',
    'build_object_reference', 'build_owner_reference',
    'not_', 'all_', 'any_', 'none_',
    'ErrorsMode', 'AdmissionError', 'PermanentError', 'TemporaryError',
    'HandlerTimeoutError', 'HandlerRetriesError',
    'OperatorRegistry', 'get_default_registry', 'set_default_registry',
    'PRESENT', 'ABSENT', 'EVERYTHING',
    'OperatorSettings',
    'DiffBaseStorage', 'AnnotationsDiffBaseStorage', 'StatusDiffBaseStorage', 'MultiDiffBaseStorage',
    'ProgressRecord', 'ProgressStorage', 'AnnotationsProgressStorage', 'StatusProgressStorage',
    'MultiProgressStorage', 'SmartProgressStorage',
    'RawEvent', 'RawBody', 'Status', 'Spec', 'Meta', 'Body', 'BodyEssence', 'Labels', 'Annotations',
    'ObjectReference', 'OwnerReference', 'Memo', 'Index', 'Store', 'Patch', 'Diff', 'DiffItem', 'DiffOperation',
    'Resource', 'Logger', 'Reason', 'ObjectLogger', 'LocalObjectLogger',
    'FieldPath', 'FieldSpec', 'HandlerId', 'PatchFn', 'RawEventType',
    'DaemonStopped', 'DaemonStoppingReason', 'SyncDaemonStopperChecker', 'AsyncDaemonStopperChecker',
    'WebhookClientConfigService', 'WebhookClientConfig', 'Operation', 'UserInfo', 'Headers', 'SSLPeer',
    'WebhookFn', 'WebhookServerProtocol', 'WebhookServer', 'WebhookK3dServer', 'WebhookMinikubeServer',
    'WebhookDockerDesktopServer', 'WebhookNgrokTunnel', 'WebhookAutoServer', 'WebhookAutoTunnel',
]

# Not in Kopf: custom resources as pydantic models; pydantic is imported by the operators that
# declare models only (kept out of Kopf's __all__, as ``rbac``).
_MODELS = frozenset({'CustomResource', 'PrinterColumn', 'CEL'})

if _TYPE_CHECKING:
    from kopf._structures.models import CEL as CEL
    from kopf._structures.models import CustomResource as CustomResource
    from kopf._structures.models import PrinterColumn as PrinterColumn
else:  # type checkers keep reporting unknown names as such
    def __getattr__(name: str) -> _Any:
        """The models' names, imported when first used; an unknown name fails with what this
        package is, not a bare AttributeError."""
        if name in _MODELS:
            from kopf._structures import models
            return getattr(models, name)
        raise _errors.missing_name(__name__, name)
