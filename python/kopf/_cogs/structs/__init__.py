"""Kopf's ``kopf._cogs.structs``: bodies, patches, diffs, dicts, credentials."""
