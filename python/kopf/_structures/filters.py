"""Filters of handlers: ``kopf.PRESENT``/``kopf.ABSENT`` and the callback combinators."""

from __future__ import annotations

import enum
from collections.abc import Callable
from typing import Any


class MetaFilterToken(enum.Enum):
    """Markers for label/annotation/field filters: the key must be there, or must not."""

    PRESENT = enum.auto()
    ABSENT = enum.auto()


PRESENT = MetaFilterToken.PRESENT
"""A filter's value for a label, annotation or field that must be there, whatever its value."""
ABSENT = MetaFilterToken.ABSENT
"""A filter's value for a label, annotation or field that must not be there."""

FilterFn = Callable[..., bool]


def not_(fn: FilterFn) -> FilterFn:
    """A callback filter that is true when ``fn`` is false."""
    def negated(*args: Any, **kwargs: Any) -> bool:
        return not fn(*args, **kwargs)
    return negated


def all_(fns: list[FilterFn] | tuple[FilterFn, ...]) -> FilterFn:
    """A callback filter that is true when every one of ``fns`` is true."""
    def every(*args: Any, **kwargs: Any) -> bool:
        return all(fn(*args, **kwargs) for fn in fns)
    return every


def any_(fns: list[FilterFn] | tuple[FilterFn, ...]) -> FilterFn:
    """A callback filter that is true when at least one of ``fns`` is true."""
    def some(*args: Any, **kwargs: Any) -> bool:
        return any(fn(*args, **kwargs) for fn in fns)
    return some


def none_(fns: list[FilterFn] | tuple[FilterFn, ...]) -> FilterFn:
    """A callback filter that is true when none of ``fns`` is true."""
    def nobody(*args: Any, **kwargs: Any) -> bool:
        return not any(fn(*args, **kwargs) for fn in fns)
    return nobody


def spec_of(value: Any) -> dict[str, Any]:
    """The core's form of a value filter; callables stay in Python."""
    if value is PRESENT:
        return {'kind': 'present'}
    if value is ABSENT:
        return {'kind': 'absent'}
    if callable(value):
        return {'kind': 'callback'}
    return {'kind': 'equals', 'value': value}
