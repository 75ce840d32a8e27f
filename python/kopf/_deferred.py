"""Standard modules that an operator imports but rarely uses, loaded when first used.

``asyncio`` imports ``ssl`` for its TLS transports, and ``hashlib`` loads OpenSSL's hashes.
Together they map OpenSSL's libcrypto and build its tables in every operator process
(docs/benchmarks.md, "Figures behind the code"), used by none of them unless a handler
speaks TLS or hashes in Python itself. The core talks to the API server and serves
webhooks with rustls, so Python's TLS is the handlers' business only.

Before ``kopf`` imports ``asyncio``, those modules are put into ``sys.modules`` unexecuted.
The first read of any of their attributes (``ssl.SSLContext``, ``from ssl import ...``,
``hashlib.sha256``) runs the module's code then, once, under a lock, and the module becomes
an ordinary module. ``import ssl`` alone does not load it. If ``asyncio`` was imported
before ``kopf``, it has loaded ``ssl`` already and nothing is deferred.
"""

from __future__ import annotations

import importlib.machinery
import importlib.util
import sys
import threading
import types
from collections.abc import Sequence

# Set on the module object when it is created from its spec; reading them does not need the
# module's own code (the import system reads `__spec__` on every `import` statement).
_OWN = frozenset({'__name__', '__spec__', '__loader__', '__package__', '__path__', '__file__',
                  '__cached__', '__class__'})

# Re-entrant: a module's code may read its own attributes while it runs (as in any import).
_lock = threading.RLock()
_pending: dict[str, tuple[importlib.machinery.ModuleSpec, types.ModuleType]] = {}


class _DeferredModule(types.ModuleType):
    """A module whose code has not run yet; any attribute but its spec's runs it."""

    def __getattribute__(self, name: str) -> object:
        if name not in _OWN:
            _load(types.ModuleType.__getattribute__(self, '__name__'))
        return types.ModuleType.__getattribute__(self, name)


def _load(name: str) -> None:
    with _lock:
        pending = _pending.pop(name, None)
        if pending is None:  # loaded already, or being loaded by this very thread
            return
        spec, module = pending
        assert spec.loader is not None
        try:
            spec.loader.exec_module(module)
        except BaseException:
            _pending[name] = pending  # as a failed import: the next use tries again
            raise
        module.__class__ = types.ModuleType


def defer(name: str, path: Sequence[str] | None = None) -> bool:
    """Put the module into ``sys.modules`` unexecuted; ``path`` is its package's path."""
    if name in sys.modules:
        return False
    spec = importlib.machinery.PathFinder.find_spec(name, path)
    if spec is None or spec.loader is None or not hasattr(spec.loader, 'exec_module'):
        return False
    module = importlib.util.module_from_spec(spec)
    module.__class__ = _DeferredModule
    _pending[name] = spec, module
    sys.modules[name] = module
    return True


def defer_tls() -> None:
    """Defer ``ssl`` (with asyncio's TLS protocol) and ``hashlib``, if still unimported."""
    if 'asyncio' in sys.modules:
        return
    if importlib.util.find_spec('_ssl') is not None and defer('ssl'):
        package = importlib.util.find_spec('asyncio')
        if package is not None and defer('asyncio.sslproto', package.submodule_search_locations):
            import asyncio
            # A module found in sys.modules is not set on its package by the import system.
            vars(asyncio)['sslproto'] = sys.modules['asyncio.sslproto']
    defer('hashlib')
