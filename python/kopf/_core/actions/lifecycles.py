"""Kopf's ``kopf._core.actions.lifecycles`` (the same as ``kopf.lifecycles``)."""

from kopf._handling.lifecycles import (
    all_at_once,
    asap,
    get_default_lifecycle,
    one_by_one,
    randomized,
    set_default_lifecycle,
    shuffled,
)

__all__ = ['all_at_once', 'asap', 'get_default_lifecycle', 'one_by_one', 'randomized',
           'set_default_lifecycle', 'shuffled']
