"""Thread-safe counters of remote reads, reported by ``loader.stats()``.

Each process counts its own reads in its stores' :class:`RemoteStats`. A loader's process
workers send the change of their counters since their last result along with each result
(:func:`counter_delta`); the training process adds them into :func:`worker_totals` (one set
per storage key, kept across worker restarts), and ``loader.stats()`` reports the sum.
"""

from __future__ import annotations

import os
import threading
from typing import Any

__all__ = ["RemoteStats", "counter_delta", "sources_storage_stats", "worker_totals"]


class RemoteStats:
    """Counters of requests, retries, faults and cache use (one set per storage, per process).

    Keys of :meth:`snapshot`: ``requests`` (range requests sent, retries included), ``bytes``
    (received), ``retries``, ``errors`` (failed requests), ``timeouts``, ``truncated``
    (responses shorter than asked), ``memory_hits``, ``disk_hits``, ``fetched_blocks``,
    ``evicted_blocks``, ``stall_warnings``, ``skipped_shards``, ``skipped_samples`` and
    ``skipped`` (the objects skipped under ``on_error = "skip"``, by name).
    ``skipped_samples`` counts delivered samples: the loader adds each batch's skipped samples
    in the training process when it delivers the batch (readers, in whichever worker, only
    name the object), so a sample read but never delivered counts nothing and one delivered
    again after a restore counts again (:mod:`streamload.nodes._worker_stats`).
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

    def merge(self, delta: dict[str, Any]) -> None:
        """Add a :func:`counter_delta` (or a snapshot) of another process's counters."""
        with self._lock:
            for name, count in delta.items():
                if name == "skipped":
                    for url, reason in count.items():
                        self._skipped.setdefault(url, reason)
                elif name in self._counts:
                    self._counts[name] += count


def counter_delta(now: dict[str, Any], before: dict[str, Any] | None) -> dict[str, Any]:
    """What changed from snapshot ``before`` (``None``: nothing counted yet) to ``now``:
    the counters that grew, by how much, and the newly skipped objects; ``{}`` if none."""
    before = before or {}
    delta: dict[str, Any] = {}
    for name in RemoteStats.FIELDS:
        grown = now[name] - before.get(name, 0)
        if grown:
            delta[name] = grown
    old = before.get("skipped", {})
    skipped = {url: why for url, why in now["skipped"].items() if url not in old}
    if skipped:
        delta["skipped"] = skipped
    return delta


_totals: dict[str, RemoteStats] = {}
_totals_lock = threading.Lock()


def _reset_totals_lock() -> None:
    # A parent thread may hold the lock at a fork (the child keeps the parent's totals).
    global _totals_lock
    _totals_lock = threading.Lock()


if hasattr(os, "register_at_fork"):  # not on Windows, which has no fork
    os.register_at_fork(after_in_child=_reset_totals_lock)


def worker_totals(key: str) -> RemoteStats:
    """The counters this process's loader workers reported for storage ``key`` (a
    :attr:`~streamload.remote.store.StorageHandle.key`), summed over all workers and passes."""
    with _totals_lock:
        stats = _totals.get(key)
        if stats is None:
            stats = _totals[key] = RemoteStats()
        return stats


def sources_storage_stats(sources: Any) -> dict[str, Any]:
    """Per remote source (a stream's sources): the request, retry, fault and cache counters,
    and the shards and samples skipped under ``on_error = "skip"`` (docs/remote.md), of this
    process plus what its process workers reported with their results (thread workers count
    in this process; skipped samples are counted as their batches are delivered)."""
    out: dict[str, Any] = {}
    for source in sources:
        counters = source.shards.storage_stats()  # skipped shards included (catalog.py)
        if counters is None:
            continue
        key = next(info.storage.key for info in source.shards.shards if info.is_remote)
        total = RemoteStats()  # a copy: summing must not change either side
        total.merge(counters)
        total.merge(worker_totals(key).snapshot())
        out[source.name] = total.snapshot()
    return out
