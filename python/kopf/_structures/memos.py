"""The objects' memos: the ``memo`` kwarg, one per object, a shallow copy of the operator's.

Most operators never store anything in most objects' memos, yet a memo kept for each of
10 000 watched objects costs as much as the engine's own record of them. An object's memo
is therefore held only weakly (alive while some handler has it) until something is stored
in it; from then on it is kept until the object is gone. A handler cannot tell the
difference: a memo nobody has and nothing was stored in is a fresh copy of the operator's.
"""

from __future__ import annotations

import copy
import threading
import weakref
from typing import Any, Self

from kopf._structures.structs import Memo


class _ObjectMemo(Memo):
    """A memo that asks to be kept once something is stored in it (or removed from it)."""

    __slots__ = ('_keeper',)
    _keeper: tuple[ObjectMemos, str] | None  # set by `ObjectMemos.of()` (no `__init__` of its own, for speed)

    def _changing(self) -> None:
        keeper = self._keeper
        if keeper is not None:
            object.__setattr__(self, '_keeper', None)
            memos, key = keeper
            memos._keep(key, self)

    def __setitem__(self, key: Any, value: Any) -> None:
        self._changing()
        super().__setitem__(key, value)

    def __delitem__(self, key: Any) -> None:
        self._changing()
        super().__delitem__(key)

    def __ior__(self, other: Any) -> Self:  # type: ignore[misc]  # dict's own pair disagrees too
        self._changing()
        return super().__ior__(other)

    def clear(self) -> None:
        self._changing()
        super().clear()

    def pop(self, *args: Any) -> Any:
        self._changing()
        return super().pop(*args)

    def popitem(self) -> tuple[Any, Any]:
        self._changing()
        return super().popitem()

    def setdefault(self, key: Any, default: Any = None) -> Any:
        self._changing()
        return super().setdefault(key, default)

    def update(self, *args: Any, **kwargs: Any) -> None:
        self._changing()
        super().update(*args, **kwargs)

    # Copies are plain memos: they are nobody's memo, and must not take an object's place.
    def __copy__(self) -> Memo:
        return Memo(self)

    def __deepcopy__(self, memo: dict[int, Any]) -> Memo:
        return Memo(copy.deepcopy(dict(self), memo))

    def __reduce__(self) -> tuple[Any, ...]:
        return (Memo, (dict(self),))


# Dead references are swept out when there are this many, or twice as many as were alive
# at the last sweep: each sweep costs about as much as the references added since the last.
_SWEEP_AT_LEAST = 64


class ObjectMemos:
    """The memos of all objects, by the object's key (its uid)."""

    def __init__(self, base: Any) -> None:
        self._base = base
        self._kept: dict[str, Any] = {}
        # The memos in use and not kept, by plain weak references: a `WeakValueDictionary`'s
        # references (made in Python, with a callback in Python when they die) were a tenth
        # of an `on.event` call. The dead ones are swept out as the mapping grows.
        self._unused: dict[str, weakref.ref[_ObjectMemo]] = {}
        self._sweep_at = _SWEEP_AT_LEAST
        # Handlers of one object may start in two threads at once: both get the same memo.
        self._lock = threading.Lock()
        # Only `kopf.Memo` itself is known to say when it is written to; any other memo
        # object (a user's class) is kept for every object, as Kopf does.
        self._lazy = type(base) is Memo

    def of(self, key: str) -> Any:
        with self._lock:
            memo = self._kept.get(key)
            if memo is None:
                memo = self._in_use(key)
            if memo is None:
                if self._lazy:
                    memo = _ObjectMemo(self._base)
                    object.__setattr__(memo, '_keeper', (self, key))
                    self._unused[key] = weakref.ref(memo)
                    if len(self._unused) > self._sweep_at:
                        self._sweep()
                else:
                    memo = self._kept[key] = copy.copy(self._base)
            return memo

    def existing(self, key: str) -> Any:
        """The object's memo if one is kept or in use (its handlers have one), else a copy of
        the base that is not kept: for calls about objects the operator may never see go
        (conversions), which would otherwise keep a memo per object for ever."""
        with self._lock:
            memo = self._kept.get(key)  # (not `or`: an empty memo is falsy)
            if memo is None:
                memo = self._in_use(key)
        return memo if memo is not None else copy.copy(self._base)

    def _in_use(self, key: str) -> _ObjectMemo | None:
        ref = self._unused.get(key)
        return ref() if ref is not None else None

    def _sweep(self) -> None:
        self._unused = {key: ref for key, ref in self._unused.items() if ref() is not None}
        self._sweep_at = max(_SWEEP_AT_LEAST, 2 * len(self._unused))

    def _keep(self, key: str, memo: _ObjectMemo) -> None:
        with self._lock:
            if self._in_use(key) is memo:
                del self._unused[key]
                self._kept[key] = memo

    def forget(self, key: str) -> None:
        with self._lock:
            self._kept.pop(key, None)
            unused = self._unused.pop(key, None)
            memo = unused() if unused is not None else None
            if memo is not None:
                object.__setattr__(memo, '_keeper', None)  # gone: nothing to keep it for

    def __len__(self) -> int:
        """How many memos are kept (those with something stored in them)."""
        return len(self._kept)
