"""Kopf's ``kopf._cogs.structs.credentials``: what login handlers return.

Kopf's ``Vault`` (its in-memory store of credentials) has no counterpart here: the core
keeps the credentials and renews them by calling the login handlers again.
"""

from kopf._connecting.credentials import ConnectionInfo
from kopf._structures.errors import LoginError

__all__ = ['ConnectionInfo', 'LoginError']
