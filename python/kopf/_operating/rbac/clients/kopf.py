"""Kopf's own helpers that make requests from the handlers' code: ``kopf.event``, ``info``,
``warn`` and ``exception`` post Events (in the object's namespace: the handled object's when it
is the one given)."""

from __future__ import annotations

from kopf._logs import posting as _posting  # kopf.event() & co.
from kopf._operating.rbac.clients.base import CallSite, Library
from kopf._operating.rbac.uses import DEFAULT, OBJECT, UNKNOWN, ByPlural, Namespace
from kopf._operating.rbac.values import NOTHING, Body, Live, Value, Values

POSTING = ('event', 'info', 'warn', 'exception')


class Kopf(Library):
    name = 'kopf'

    def call(self, call: CallSite, callee: Value) -> Values | None:
        if not isinstance(callee, Live) or not any(callee.obj is getattr(_posting, name) for name in POSTING):
            return None
        namespaces: set[Namespace] = set()
        for value in call.arg(0, 'objs') or ():
            namespaces.add(OBJECT if isinstance(value, Body) else UNKNOWN if call.starred else DEFAULT)
        call.use(('create',), ByPlural('', 'events'), sorted(namespaces, key=str) or [DEFAULT],
                 f"kopf.{callee.obj.__name__}")
        return NOTHING


KOPF = Kopf()
