"""Kopf's structures: what handlers receive (bodies, patches, diffs, memos, indices, the
hierarchies' toolkits), what operators configure (settings, resources and selectors, filters,
the storages of handlers' progress and of the diff base, with their naming ``conventions``),
the errors handlers raise, and the handlers' parameters."""
