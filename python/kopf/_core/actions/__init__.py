"""Kopf's ``kopf._core.actions``: logging and lifecycles."""
