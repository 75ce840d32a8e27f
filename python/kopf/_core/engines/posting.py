"""Kopf's ``kopf._core.engines.posting``: Kubernetes Events about objects."""

from kopf._logs.posting import enqueue, event, exception, info, warn

__all__ = ['enqueue', 'event', 'exception', 'info', 'warn']
