"""Kopf's ``kopf._core.actions.loggers``: the logging of operators and of objects."""

from kopf._logs.formatting import (
    DEFAULT_JSON_REFKEY,
    LogFormat,
    ObjectFormatter,
    ObjectPrefixingTextFormatter,
    ObjectTextFormatter,
)
from kopf._logs.jsonlogging import ObjectJsonFormatter, ObjectPrefixingJsonFormatter
from kopf._logs.loggers import (
    LocalObjectLogger,
    ObjectLogger,
    TerseObjectLogger,
    configure,
    make_formatter,
    objects_logger,
)

logger = objects_logger

__all__ = ['DEFAULT_JSON_REFKEY', 'LocalObjectLogger', 'LogFormat', 'ObjectFormatter', 'ObjectJsonFormatter',
           'ObjectLogger', 'ObjectPrefixingJsonFormatter', 'ObjectPrefixingTextFormatter',
           'ObjectTextFormatter', 'TerseObjectLogger', 'configure', 'logger', 'make_formatter']
