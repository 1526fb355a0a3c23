"""Thread-safe counters of one process's remote reads, reported by ``loader.stats()``."""

from __future__ import annotations

import threading
from typing import Any

__all__ = ["RemoteStats"]


class RemoteStats:
    """Counters of requests, retries, faults and cache use (one set per storage, per process).

    Keys of :meth:`snapshot`: ``requests`` (range requests sent, retries included), ``bytes``
    (received), ``retries``, ``errors`` (failed requests), ``timeouts``, ``truncated``
    (responses shorter than asked), ``memory_hits``, ``disk_hits``, ``fetched_blocks``,
    ``evicted_blocks``, ``stall_warnings``, ``skipped_shards``, ``skipped_samples`` and
    ``skipped`` (the objects skipped under ``on_error = "skip"``, by name).
    """

    FIELDS = (
        "requests",
        "bytes",
        "retries",
        "errors",
        "timeouts",
        "truncated",
        "memory_hits",
        "disk_hits",
        "fetched_blocks",
        "evicted_blocks",
        "stall_warnings",
        "skipped_shards",
        "skipped_samples",
    )

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._counts = dict.fromkeys(self.FIELDS, 0)
        self._skipped: dict[str, str] = {}

    def add(self, name: str, count: int = 1) -> None:
        """Add ``count`` to counter ``name``."""
        with self._lock:
            self._counts[name] += count

    def skipped(self, url: str, reason: str) -> None:
        """Record an object skipped under ``on_error = "skip"`` (first reason kept)."""
        with self._lock:
            self._skipped.setdefault(url, reason)

    def snapshot(self) -> dict[str, Any]:
        """The counters now, and the skipped objects with their reasons."""
        with self._lock:
            return {**self._counts, "skipped": dict(self._skipped)}
