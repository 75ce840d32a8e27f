"""Errors that handlers raise to steer retries, and errors of the framework."""

from __future__ import annotations

import enum


class ErrorsMode(enum.Enum):
    """How arbitrary (non-Kopf) exceptions of a handler are treated."""

    IGNORED = enum.auto()
    TEMPORARY = enum.auto()
    PERMANENT = enum.auto()


class PermanentError(Exception):
    """A fatal handler error: the handler will not be retried."""


class TemporaryError(Exception):
    """A recoverable handler error: the handler will be retried after ``delay`` seconds."""

    def __init__(self, __msg: str | None = None, delay: float | None = 60) -> None:
        super().__init__(__msg)
        self.delay = delay


class HandlerTimeoutError(PermanentError):
    """The handler has been retrying for longer than its ``timeout=``."""


class HandlerRetriesError(PermanentError):
    """The handler has failed more times than its ``retries=`` allow."""


class HandlerChildrenRetry(TemporaryError):
    """Internal: sub-handlers are not finished yet; the parent is retried soon."""


class UnsupportedError(PermanentError, NotImplementedError):
    """A Kopf feature this engine does not have yet: it fails at once (permanently, in a
    handler) rather than being accepted and silently ignored."""


class UnsupportedAttributeError(UnsupportedError, AttributeError):
    """A name that ``kopf`` or ``kopf.on`` does not have: as an ``AttributeError``, it keeps
    ``hasattr()`` working; as a permanent error, a handler that uses it fails at once."""


def missing_name(module: str, name: str) -> UnsupportedAttributeError:
    from kopf._structures.versions import __version__ as kopf_version
    return UnsupportedAttributeError(
        f"module {module!r} has no attribute {name!r}: this engine (kopf-rs) provides the public "
        f"API of Kopf {kopf_version}; a name of another Kopf version is not supported (yet).")


class OperatorError(Exception):
    """The engine could not go on: e.g. the API server stayed unreachable."""


class LoginError(Exception):
    """No credentials could be found by any login handler."""


class AdmissionError(PermanentError):
    """Raised by admission handlers to reject a request with a message and an HTTP code."""

    def __init__(self, message: str | None = '', code: int | None = 500) -> None:
        super().__init__(message)
        self.code = code
