"""The one exception hierarchy of streamload.

Every message names the thing (file, field, source), the value found and what was expected.
"""

from __future__ import annotations

__all__ = [
    "PROGRAMMING_ERRORS",
    "ConfigError",
    "FormatError",
    "RemoteReadError",
    "RemoteStallError",
    "StateError",
    "StreamloadError",
    "WorkerDiedError",
    "WorkerError",
    "add_note",
]

PROGRAMMING_ERRORS = (TypeError, AttributeError, NameError, AssertionError, NotImplementedError)
"""Errors no retry can fix: remote reads and listings raise them at once, never reporting
them as an unreadable object after retries."""


class StreamloadError(Exception):
    """Base class of every error streamload raises on purpose."""


class ConfigError(StreamloadError, ValueError):
    """A configuration value is missing, malformed or inconsistent with the data."""


class FormatError(StreamloadError):
    """A file is corrupt, truncated, of an unexpected layout, or holds invalid tokens."""


class StateError(StreamloadError):
    """A loader state cannot be restored: wrong version, other data, or other config."""


class RemoteReadError(StreamloadError):
    """A remote object stayed unreadable after every retry; the message names it."""


class RemoteStallError(RemoteReadError):
    """A reader waited longer than ``storage.stall_timeout`` for one object."""


class WorkerError(StreamloadError):
    """A loader worker's map function failed with an exception that does not pickle; the
    message names its type and text, and the worker's traceback is attached as a note."""


class WorkerDiedError(StreamloadError):
    """A loader worker process exited without finishing its work (named by pid and signal)."""


def add_note(exc: BaseException, note: str) -> None:
    """Attach context (a file, a stage) to an exception; Python 3.10 gets it in the message."""
    if hasattr(exc, "add_note"):
        exc.add_note(note)
    elif exc.args and isinstance(exc.args[0], str):  # pragma: no cover - Python 3.10
        exc.args = (f"{exc.args[0]}\n{note}", *exc.args[1:])
