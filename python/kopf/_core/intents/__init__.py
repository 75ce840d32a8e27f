"""Kopf's ``kopf._core.intents``: the registries of handlers."""
