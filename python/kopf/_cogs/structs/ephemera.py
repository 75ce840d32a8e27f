"""Kopf's ``kopf._cogs.structs.ephemera``: what operators keep in memory (memos, indices)."""

from typing import NewType

from kopf._indices import Index, Indices, Store
from kopf._structs import Memo

AnyMemo = NewType('AnyMemo', object)

__all__ = ['AnyMemo', 'Index', 'Indices', 'Memo', 'Store']
