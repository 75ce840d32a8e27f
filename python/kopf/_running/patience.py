"""A start that cannot hang silently: until the operator watches its resources, a thread of
its own says every minute what the start waits for (the startup handlers, the login, the
settings being read, the engine's discovery), even while the event loop is blocked."""

from __future__ import annotations

import logging
import os
import threading
import time

logger = logging.getLogger('kopf._core.reactor.running')

# Seconds between the reports (``$KOPF_STARTUP_PATIENCE``; a minute unless set).
_DEFAULT_PATIENCE = 60.0


def patience() -> float:
    raw = os.environ.get('KOPF_STARTUP_PATIENCE', '')
    try:
        return float(raw) if raw else _DEFAULT_PATIENCE
    except ValueError:
        raise ValueError(f"KOPF_STARTUP_PATIENCE={raw!r} is not a number of seconds.") from None


class Patience:
    """Reports a start that takes long, with its current stage (``waiting_for``), until ``over()``."""

    def __init__(self, stage: str, seconds: float | None = None) -> None:
        self.stage = stage
        self.seconds = seconds if seconds is not None else patience()
        self.started = time.monotonic()
        self._over = threading.Event()
        self._thread = threading.Thread(target=self._watch, name='kopf start patience', daemon=True)
        self._thread.start()

    def waiting_for(self, stage: str) -> None:
        self.stage = stage

    def over(self) -> None:
        self._over.set()

    def _watch(self) -> None:
        while not self._over.wait(self.seconds):
            elapsed = time.monotonic() - self.started
            logger.warning(f"The operator has not begun watching its resources after {elapsed:.0f}s: "
                           f"it waits for {self.stage}.")
