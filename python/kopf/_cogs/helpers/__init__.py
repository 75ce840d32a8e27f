"""Kopf's ``kopf._cogs.helpers``: loading the operator's files and modules."""
