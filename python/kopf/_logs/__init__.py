"""Logging as Kopf does it: the loggers and their setup (``loggers``), the text formats
(``formatting``) and the JSON ones (``jsonlogging``, loaded only when used), and Kubernetes
Events about objects (``posting``: ``kopf.event()`` & co., and the loggers' lines posted)."""
