"""``kopf.Requeue``: what a reconcile handler returns to be called again later, though
nothing about its object changes (not in Kopf)."""

from __future__ import annotations

import math


class Requeue:
    """Reconcile this object again after ``after`` seconds, even if nothing changes.

    Return it from a ``@kopf.on.reconcile`` handler::

        @kopf.on.reconcile('kopfexamples')
        def check(spec, **_):
            if not ready(spec):
                return kopf.Requeue(after=10)

    The wait is a timer in the operator, not a write to the object. A change of the object
    meanwhile reconciles it at once (and the requeue starts over with that call's answer).

    :param after: Seconds to wait: a number above zero (not infinite).
    """

    __slots__ = ('after',)

    def __init__(self, after: float) -> None:
        if isinstance(after, bool) or not isinstance(after, int | float):
            raise TypeError(f"kopf.Requeue(after=...) takes seconds as a number, not {after!r}.")
        if not math.isfinite(after) or after <= 0:
            raise ValueError(f"kopf.Requeue(after={after!r}): the seconds must be a finite number above "
                             f"zero (a reconcile that wants no requeue returns nothing).")
        self.after = float(after)

    def __repr__(self) -> str:
        return f"kopf.Requeue(after={self.after!r})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Requeue) and other.after == self.after

    def __hash__(self) -> int:
        return hash(('Requeue', self.after))
