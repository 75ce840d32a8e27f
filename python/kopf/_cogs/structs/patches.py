"""Kopf's ``kopf._cogs.structs.patches``: the ``patch`` kwarg of handlers."""

from kopf._structures.structs import MetaPatch, Patch, PatchFn

__all__ = ['MetaPatch', 'Patch', 'PatchFn']
