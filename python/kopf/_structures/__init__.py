"""Kopf's structures: what handlers receive (bodies, patches, diffs, memos, indices, the
hierarchies' toolkits), what operators configure (settings, resources and selectors, filters),
the errors handlers raise, and what each kind of handler is given (callbacks, parameters)."""
