"""Kopf's ``kopf._cogs.configs``: the operator's settings."""
