"""Lifecycles (``kopf.lifecycles``): which of the awakened handlers of a cause run in one
cycle, and in which order. Each takes the handlers in the order of registration (those not
finished yet) and returns those to run now.

The core runs the built-in ones itself; an operator's own function (with the same
signature: ``fn(handlers, *, state, **kwargs)``) is called in Python. The functions here
are real, so that an operator's lifecycle can build on them.
"""

from __future__ import annotations

import logging
import random
from collections.abc import Mapping, Sequence
from typing import Any, Protocol

__all__ = ['LifeCycleFn', 'all_at_once', 'one_by_one', 'randomized', 'shuffled', 'asap',
           'get_default_lifecycle', 'set_default_lifecycle']

logger = logging.getLogger('kopf._core.actions.lifecycles')


class LifeCycleFn(Protocol):
    """A lifecycle: the handlers to run now, of the awakened ones."""

    def __call__(self, handlers: Sequence[Any], *, state: Mapping[str, Any], **kwargs: Any) -> Sequence[Any]: ...


def all_at_once(handlers: Sequence[Any], **_: Any) -> Sequence[Any]:
    """All of them, in one cycle, in the order of registration."""
    return handlers


def one_by_one(handlers: Sequence[Any], **_: Any) -> Sequence[Any]:
    """One at a time, in the order of registration."""
    return handlers[:1]


def randomized(handlers: Sequence[Any], **_: Any) -> Sequence[Any]:
    """One at a time, chosen at random."""
    return [random.choice(handlers)] if handlers else []


def shuffled(handlers: Sequence[Any], **_: Any) -> Sequence[Any]:
    """All of them, in one cycle, in a random order."""
    return random.sample(handlers, k=len(handlers)) if handlers else []


def asap(handlers: Sequence[Any], *, state: Mapping[str, Any], **_: Any) -> Sequence[Any]:
    """One at a time, the least retried first: a failing handler does not hold the others back."""
    return sorted(handlers, key=lambda handler: state[handler.id].retries or 0)[:1]


# The names by which the core knows the built-in ones.
BUILT_IN: dict[Any, str] = {
    all_at_once: 'all_at_once', one_by_one: 'one_by_one', randomized: 'randomized',
    shuffled: 'shuffled', asap: 'asap',
}

_default_lifecycle: LifeCycleFn = asap


def get_default_lifecycle() -> LifeCycleFn:
    """The lifecycle of operators started without ``lifecycle=`` (``asap`` unless set)."""
    return _default_lifecycle


def set_default_lifecycle(lifecycle: LifeCycleFn | None) -> None:
    """Set the lifecycle of operators started without ``lifecycle=``; ``None`` restores ``asap``."""
    global _default_lifecycle
    # As Kopf does, including when the current one is the initial default.
    logger.warning(f"The default lifecycle is already set to {_default_lifecycle}, overriding it to {lifecycle}.")
    _default_lifecycle = lifecycle if lifecycle is not None else asap


def engine_name(lifecycle: Any) -> str:
    """How the core knows this lifecycle: a built-in one by its name, any other as ``custom``."""
    return BUILT_IN.get(lifecycle, 'custom')
