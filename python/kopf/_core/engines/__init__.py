"""Kopf's ``kopf._core.engines``: posting Kubernetes Events."""
