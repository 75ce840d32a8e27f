"""Kopf's ``kopf._cogs.structs.ephemera``: what operators keep in memory (memos, indices)."""

from typing import NewType

from kopf._structures.indices import Index, Indices, Store
from kopf._structures.structs import Memo

AnyMemo = NewType('AnyMemo', object)

__all__ = ['AnyMemo', 'Index', 'Indices', 'Memo', 'Store']
