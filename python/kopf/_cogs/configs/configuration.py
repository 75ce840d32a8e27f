"""Kopf's ``kopf._cogs.configs.configuration``: ``OperatorSettings`` and its parts."""

from kopf._structures.settings import (
    BackgroundSettings,
    ExecutionSettings,
    NetworkingSettings,
    OperatorSettings,
    PeeringSettings,
    PersistenceSettings,
    PostingSettings,
    ProcessSettings,
    QueueingSettings,
    ScanningSettings,
    WatchingSettings,
)

__all__ = ['BackgroundSettings', 'ExecutionSettings', 'NetworkingSettings', 'OperatorSettings',
           'PeeringSettings', 'PersistenceSettings', 'PostingSettings', 'ProcessSettings',
           'QueueingSettings', 'ScanningSettings', 'WatchingSettings']
