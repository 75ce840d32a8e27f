"""Kopf's internal module paths that operators import directly (``kopf._cogs.*``), with
Kopf's names, backed by this engine's own implementations. Paths not provided here fail
at import with the public alternative named (see ``kopf._internals``)."""
