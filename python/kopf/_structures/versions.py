"""Which version of Kopf's API this package implements."""

__version__ = '1.45.2'
"""Kopf's version whose behaviour this engine follows: operators that check ``kopf.__version__``
for features see the Kopf they are written for (``kopf --version`` shows the engine's own)."""
