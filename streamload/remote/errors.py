"""Errors of remote reads (subclasses of :class:`streamload.errors.StreamloadError`)."""

from __future__ import annotations

from streamload.errors import StreamloadError

__all__ = ["RemoteReadError", "RemoteStallError"]


class RemoteReadError(StreamloadError):
    """A remote object stayed unreadable after every retry; the message names it."""


class RemoteStallError(RemoteReadError):
    """A reader waited longer than ``storage.stall_timeout`` for one object."""
