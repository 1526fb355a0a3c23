"""Storage counters of process workers, carried to the training process with their results.

A process worker counts its remote reads in its own stores (a forked or spawned worker starts
with fresh stores, at zero). With each result it sends :func:`take_storage_deltas`: the
change of each store's counters since its previous result, ``None`` when nothing changed (the
usual case when nothing is remote: no dict is built). The training process adds them with
:func:`merge_storage_deltas` into :func:`streamload.remote.stats.worker_totals`, which
outlive the workers (restarts at each pass, ``iter()`` or restore), so every request, retry
and skip is counted once. Thread workers count in the training process already.
"""

from __future__ import annotations

import os
from typing import Any

from streamload.remote.stats import counter_delta, worker_totals
from streamload.remote.store import RemoteStore

__all__ = ["merge_storage_deltas", "take_storage_deltas"]

_reported: dict[str, dict[str, Any]] = {}
_reported_pid = os.getpid()


def take_storage_deltas() -> dict[str, dict[str, Any]] | None:
    """In a worker process: per storage key, what its counters gained since the last call."""
    global _reported, _reported_pid
    stores = RemoteStore.all_stores()
    if not stores:
        return None
    if _reported_pid != os.getpid():  # a forked worker inherits nothing it has to report
        _reported, _reported_pid = {}, os.getpid()
    deltas: dict[str, dict[str, Any]] = {}
    for store in stores:
        key = store.handle.key
        now = store.stats.snapshot()
        delta = counter_delta(now, _reported.get(key))
        if delta:
            deltas[key] = delta
            _reported[key] = now
    return deltas or None


def merge_storage_deltas(deltas: dict[str, dict[str, Any]] | None) -> None:
    """In the training process: add a worker's deltas to the totals ``stats()`` reports."""
    if deltas:
        for key, delta in deltas.items():
            worker_totals(key).merge(delta)
