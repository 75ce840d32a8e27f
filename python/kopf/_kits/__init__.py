"""Kopf's ``kopf._kits``: the toolkits for handlers (object hierarchies)."""
