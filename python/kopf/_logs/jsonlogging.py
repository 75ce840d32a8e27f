"""The JSON formats of ``--log-format=json``: apart, as python-json-logger is imported only
when they are used."""

from __future__ import annotations

import logging
from typing import Any

from kopf._logs.formatting import DEFAULT_JSON_REFKEY, ObjectFormatter, ObjectPrefixingMixin

try:
    from pythonjsonlogger.core import RESERVED_ATTRS as _JSON_RESERVED
    from pythonjsonlogger.json import JsonFormatter as _JsonFormatter
except ImportError:  # python-json-logger < 3
    from pythonjsonlogger.jsonlogger import RESERVED_ATTRS as _JSON_RESERVED  # type: ignore
    from pythonjsonlogger.jsonlogger import JsonFormatter as _JsonFormatter  # type: ignore


class ObjectJsonFormatter(ObjectFormatter, _JsonFormatter):
    """JSON lines with the object's reference under ``refkey`` and a ``severity``."""

    def __init__(self, *args: Any, refkey: str | None = None, **kwargs: Any) -> None:
        reserved = set(kwargs.pop('reserved_attrs', _JSON_RESERVED)) | {'k8s_skip', 'k8s_ref', 'settings'}
        kwargs['reserved_attrs'] = reserved
        kwargs.setdefault('timestamp', True)
        super().__init__(*args, **kwargs)
        self._refkey = refkey or DEFAULT_JSON_REFKEY

    def add_fields(self, log_record: dict[str, Any], record: logging.LogRecord,
                   message_dict: dict[str, Any]) -> None:
        super().add_fields(log_record, record, message_dict)
        if self._refkey and hasattr(record, 'k8s_ref'):
            log_record[self._refkey] = record.k8s_ref
        if 'severity' not in log_record:
            level = record.levelno
            log_record['severity'] = ('debug' if level <= logging.DEBUG else 'info' if level <= logging.INFO
                                      else 'warn' if level <= logging.WARNING
                                      else 'error' if level <= logging.ERROR else 'fatal')


class ObjectPrefixingJsonFormatter(ObjectPrefixingMixin, ObjectJsonFormatter):
    pass
