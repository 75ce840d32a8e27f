"""Loading an operator's files and modules, so that their decorators register the handlers."""

from __future__ import annotations

import importlib
import importlib.util
import os.path
import sys
from collections.abc import Iterable


class LoadingError(ImportError):
    """A file cannot be loaded as a module at all."""


def preload(paths: Iterable[str], modules: Iterable[str]) -> None:
    """Import the files (in order; each file's folder becomes importable, so that it can
    import its neighbours), then the modules. An absent file raises ``FileNotFoundError``,
    one that cannot be loaded ``LoadingError``; the files' own errors propagate."""
    for index, path in enumerate(paths):
        if not os.path.isfile(path):
            raise FileNotFoundError(f"The handlers' file {path!r} does not exist.")
        sys.path.insert(0, os.path.abspath(os.path.dirname(path)))
        name = f'__kopf_script_{index}__{path}'  # a pseudo-name, as Kopf gives it
        spec = importlib.util.spec_from_file_location(name, path)
        if spec is None or spec.loader is None:
            raise LoadingError(f"Failed loading {path}: no module or loader.")
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
    for name in modules:
        importlib.import_module(name)
