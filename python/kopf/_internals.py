"""Kopf's internal module paths that this engine does not provide: importing one fails at
once, with the public alternative named (rather than later, or with a bare "No module").

The provided ones are real modules (``kopf._cogs``, ``kopf._core``); this finder is asked
only after them, and only for names under Kopf's internal packages.
"""

from __future__ import annotations

import importlib.machinery
import sys
from collections.abc import Sequence
from types import ModuleType
from typing import TYPE_CHECKING, cast

if TYPE_CHECKING:
    from importlib.abc import Loader

# Kopf 1.45.2's internal modules (by prefix) and what to use instead.
ALTERNATIVES: dict[str, str] = {
    'kopf._core.reactor.running': 'kopf.operator(), kopf.run(), kopf.spawn_tasks(), kopf.run_tasks()',
    'kopf._core.reactor.subhandling': 'kopf.execute(), @kopf.subhandler, kopf.register()',
    'kopf._core.actions.execution': 'kopf.TemporaryError, kopf.PermanentError, kopf.ErrorsMode, '
                                    'kopf.HandlerTimeoutError, kopf.HandlerRetriesError',
    'kopf._core.intents.handlers': 'the decorators of kopf.on',
    'kopf._core.intents.filters': 'kopf.PRESENT, kopf.ABSENT, kopf.not_(), kopf.all_(), kopf.any_(), kopf.none_()',
    'kopf._core.intents.stoppers': 'kopf.DaemonStopped, kopf.DaemonStoppingReason',
    'kopf._core.engines.peering': 'kopf run --peering/--standalone, and settings.peering',
    'kopf._core.engines.indexing': 'kopf.index, kopf.Index, kopf.Store',
    'kopf._core.engines.admission': 'kopf.on.validate, kopf.on.mutate, kopf.AdmissionError',
    'kopf._kits.webhooks': 'kopf.WebhookServer and its kin (kopf.WebhookK3dServer, kopf.WebhookAutoServer, ...)',
    'kopf._kits.runner': 'kopf.testing.KopfRunner',
    'kopf._cogs.structs.references': 'kopf.Resource, kopf.EVERYTHING',
    'kopf._cogs.structs.ids': 'kopf.HandlerId',
    'kopf._cogs.configs.progress': 'kopf.ProgressStorage and the storages of kopf',
    'kopf._cogs.configs.diffbase': 'kopf.DiffBaseStorage and the storages of kopf',
}
PACKAGES = ('kopf._cogs.', 'kopf._core.', 'kopf._kits.')

# Kopf's internal packages that hold none of the provided modules: empty here, so that
# importing a module in them is refused by its own name (Python imports the parent first).
PLACEHOLDERS = frozenset({'kopf._cogs.aiokits', 'kopf._cogs.clients', 'kopf._core.reactor'})


# The import system asks finders and loaders only for these methods: `importlib.abc`'s
# base classes are not needed, and importing it brings `importlib.resources`, `pathlib`,
# `tempfile`, `shutil` into every operator's process (docs/benchmarks.md, "Figures behind the code").
class _Placeholder:
    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType | None:
        return None  # the default: an empty module

    def exec_module(self, module: ModuleType) -> None:
        module.__doc__ = f"Kopf's internal package {module.__name__}: none of its modules is provided here."


class InternalPathsFinder:
    """Refuses Kopf's internal paths that the regular finders did not find here."""

    def find_spec(self, fullname: str, path: Sequence[str] | None,
                  target: ModuleType | None = None) -> importlib.machinery.ModuleSpec | None:
        if fullname in PLACEHOLDERS:
            return importlib.machinery.ModuleSpec(fullname, cast('Loader', _Placeholder()), is_package=True)
        if not fullname.startswith(PACKAGES):
            return None
        alternative = next((text for prefix, text in ALTERNATIVES.items()
                            if fullname == prefix or fullname.startswith(prefix + '.')), None)
        instead = f"use {alternative}" if alternative else "use the public API of `kopf`"
        raise ModuleNotFoundError(f"{fullname} is Kopf's internal module, which this engine "
                                  f"(kopf-rs) does not provide; {instead}.", name=fullname)


def install() -> None:
    if not any(isinstance(finder, InternalPathsFinder) for finder in sys.meta_path):
        sys.meta_path.append(InternalPathsFinder())
