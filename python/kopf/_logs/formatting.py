"""The formats of log lines: ``plain`` and ``full`` text, optionally prefixed with the object
(``[namespace/name]``); the JSON ones build on these (``kopf._logs.jsonlogging``)."""

from __future__ import annotations

import enum
import logging
import time
from collections.abc import Mapping
from typing import Any

DEFAULT_JSON_REFKEY = 'object'


class LogFormat(enum.Enum):
    """The formats of ``--log-format``."""

    PLAIN = '%(message)s'
    FULL = '[%(asctime)s] %(name)-20.20s [%(levelname)-8.8s] %(message)s'
    JSON = '-json-'


class ObjectFormatter(logging.Formatter):

    def formatTime(self, record: logging.LogRecord, datefmt: str | None = None) -> str:
        # The same text as logging's, with the seconds' part formatted once per second: the
        # local time's conversion and `strftime` were a tenth of a timer's call.
        if datefmt or self.converter is not time.localtime or record.created < 0:
            return super().formatTime(record, datefmt)
        return self._asctime(record.created, record.msecs)

    def _asctime(self, created: float, msecs: float) -> str:
        time_format = self.default_time_format
        second = int(created)
        cached = self.__dict__.get('_kopf_second')
        if cached is None or cached[0] != second or cached[1] != time_format:
            cached = self._kopf_second = (second, time_format, time.strftime(time_format, time.localtime(second)))
        msec_format = self.default_msec_format
        return msec_format % (cached[2], msecs) if msec_format else cached[2]


class ObjectTextFormatter(ObjectFormatter):
    pass


class ObjectPrefixingMixin(ObjectFormatter):
    """Prefix messages about objects with ``[namespace/name]`` (or ``[name]``)."""

    def format(self, record: logging.LogRecord) -> str:
        ref = getattr(record, 'k8s_ref', None)
        if ref is None:
            return super().format(record)
        prefix = _prefix(ref)
        # Prefixed for this formatting only; other handlers get the record as it was. (Put
        # back rather than copied: a copy of every record was a tenth of a timer call's cost.)
        saved = record.msg, record.__dict__.get('message')
        record.msg = f"{prefix} {record.msg}"
        try:
            return super().format(record)
        finally:
            record.msg = saved[0]
            if saved[1] is None:
                record.__dict__.pop('message', None)
            else:
                record.message = saved[1]


def _prefix(ref: Mapping[str, Any]) -> str:
    """An object's prefix of the lines about it: ``[namespace/name]``, or ``[name]``."""
    namespace, name = ref.get('namespace') or '', ref.get('name') or ''
    return f"[{namespace}/{name}]" if namespace else f"[{name}]"


class ObjectPrefixingTextFormatter(ObjectPrefixingMixin, ObjectTextFormatter):
    pass
