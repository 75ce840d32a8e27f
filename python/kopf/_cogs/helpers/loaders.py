"""Kopf's ``kopf._cogs.helpers.loaders``: loading the operator's files and modules."""

from kopf._operating.loading import preload

__all__ = ['preload']
