"""Kopf's ``kopf._core.intents.registries``: the operator's registry of handlers."""

from kopf._handling.handlers import (
    OperatorRegistry,
    SmartOperatorRegistry,
    generate_id,
    get_callable_id,
    get_default_registry,
    set_default_registry,
)

__all__ = ['OperatorRegistry', 'SmartOperatorRegistry', 'generate_id', 'get_callable_id',
           'get_default_registry', 'set_default_registry']
