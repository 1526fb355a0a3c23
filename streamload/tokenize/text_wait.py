"""What a process sees of a text cache while others fill it: markers, manifests, waiting.

:func:`markers_of` reads each input's marker (a remote cache listed once, only the markers
listed read); :func:`present` checks a manifest's files are still there; :func:`failures`
and :func:`poll_markers` are a remote waiter's: the error records before it built, then one
listing a round until the other ranks' markers are there (:mod:`streamload.tokenize.text_build`).
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Sequence
from typing import Any

from streamload.errors import FormatError
from streamload.tokenize.text_cache import TextCache, TextInput

__all__ = [
    "POLL_MAX",
    "STALE_ERROR_GRACE",
    "WAIT_NOTICE",
    "failures",
    "markers_of",
    "poll_markers",
    "present",
]

_LOG = logging.getLogger("streamload.text")

POLL_MAX = 10.0
"""Seconds between two looks of a rank waiting on other ranks' files, at most."""

WAIT_NOTICE = 60.0
"""Seconds between the log lines of a process waiting on other processes' files."""

STALE_ERROR_GRACE = 60.0
"""Seconds a waiter on a remote cache lets an error marker it found at its start stand
before taking it for this run's failure (its owner, if alive, clears it when it starts)."""


def poll_markers(
    cache: TextCache,
    inputs: Sequence[TextInput],
    markers: list[dict[str, Any] | None],
    seen: dict[int, dict[str, str] | None],
    poll: float,
) -> None:
    """Wait until the files other ranks build have their markers (remote caches): one
    listing of the folder a round, each marker read once it is listed, the rounds further
    apart while the wait lasts (up to :data:`POLL_MAX` seconds); fail with the message of a
    build that failed since ``seen`` (the files' error markers before this process started
    building) — or with an earlier one's still there after :data:`STALE_ERROR_GRACE`
    seconds (a live owner clears its files' old error markers as it starts: one left is
    this run's, written before this process looked)."""
    pending = [i for i in seen if markers[i] is None]
    start = time.monotonic()
    notice = start + WAIT_NOTICE
    while pending:
        names, still = cache.names(), []
        for i in pending:
            key = cache.file_key(inputs[i])
            if f"{key}.json" in names:
                markers[i] = cache.marker(inputs[i])
            elif f"{key}.error.json" in names:
                failure = cache.failure(inputs[i])
                old = failure == seen[i] and time.monotonic() - start < STALE_ERROR_GRACE
                if failure is not None and not old:
                    raise FormatError(failure["error"])
            if markers[i] is None:
                still.append(i)
        pending = still
        if pending:
            if time.monotonic() > notice:
                _LOG.info(
                    "waiting for %d files other ranks tokenize into %s (first: %s)",
                    len(pending), cache.url, inputs[pending[0]].url,
                )  # fmt: skip
                notice = time.monotonic() + WAIT_NOTICE
            time.sleep(poll)
            poll = min(POLL_MAX, poll * 1.5)


def present(cache: TextCache, markers: list[dict[str, Any]]) -> bool:
    """Whether a manifest's files are all still there (a local cache: one listing; a part
    cut or rewritten since is caught when it is opened, by its recorded size and time)."""
    if not cache.local:
        return True
    try:
        names = set(os.listdir(cache.folder))
    except OSError:
        return False
    return all(name in names for m in markers for name in m["files"])


def markers_of(cache: TextCache, inputs: Sequence[TextInput]) -> list[dict[str, Any] | None]:
    """Each input's marker, or ``None``; a remote cache is listed once and only the markers
    listed are read (not a request per input and rank: 10^7 at 10^4 files on 1,000 ranks)."""
    if cache.local:
        return [cache.marker(i) for i in inputs]
    names = cache.names()
    return [cache.marker(i) if f"{cache.file_key(i)}.json" in names else None for i in inputs]


def failures(
    cache: TextCache, inputs: Sequence[TextInput], others: list[int]
) -> dict[int, dict[str, str] | None]:
    """The error markers of ``others`` now (one listing; a read for each one listed)."""
    names = cache.names()
    return {
        i: cache.failure(inputs[i]) if f"{cache.file_key(inputs[i])}.error.json" in names else None
        for i in others
    }
