"""Kopf's ``kopf._cogs.structs.diffs``: what has changed between two states of a dict."""

from kopf._structures.diffs import (
    EMPTY,
    Diff,
    DiffItem,
    DiffOperation,
    DiffScope,
    diff,
    diff_iter,
    reduce,
    reduce_iter,
)

__all__ = ['EMPTY', 'Diff', 'DiffItem', 'DiffOperation', 'DiffScope', 'diff', 'diff_iter', 'reduce', 'reduce_iter']
