"""Storage counters of loader workers, carried to the training process.

Requests, retries, cache hits…: a process worker counts its remote reads in its own stores (a
forked or spawned worker starts with fresh stores, at zero). With each result it sends
:func:`take_storage_deltas`: the change of each store's counters since its previous result,
``None`` when nothing changed (the usual case when nothing is remote: no dict is built). The
training process adds them with :func:`merge_storage_deltas` into
:func:`streamload.remote.stats.worker_totals`, which outlive the workers (restarts at each
pass, ``iter()`` or restore), so every request, retry and skip is counted once. Thread
workers count in the training process already.

Skipped samples travel in the data instead, because they count what is *delivered*: a sample
skipped under ``on_error = "skip"`` is counted once, when the loader delivers the batch it is
in (zero-filled, every label ``-100``), by whichever worker or thread read it. Readers only
name the unreadable object; the chunk a worker returns carries, under :data:`SKIPPED_KEY`,
its skipped samples per batch and per source (:func:`skipped_counts`), and the loader takes
that entry out of each batch it delivers (:func:`count_delivered_skips`). So chunks read but
never delivered (in flight when a loop stops, a pass is cut or a state is restored) and the
undelivered rest of a chunk count nothing, and a chunk read again after a restore counts its
batches as they are delivered again. Counting where the skip happens overcounted (42-97
reported for 21 delivered, issue 22).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

from streamload.remote.stats import counter_delta, worker_totals
from streamload.streams.chunks import TokenChunk

__all__ = [
    "SKIPPED_KEY",
    "count_delivered_skips",
    "merge_storage_deltas",
    "skipped_counts",
    "take_storage_deltas",
]

SKIPPED_KEY = "_streamload_skipped"
"""Chunk entry: int64 ``[batches, sources]``, the samples of each batch and source skipped
under ``on_error = "skip"``; present only when some were, never in a delivered batch."""

_reported: dict[str, dict[str, Any]] = {}
_reported_pid = os.getpid()


def take_storage_deltas() -> dict[str, dict[str, Any]] | None:
    """In a worker process: per storage key, what its counters gained since the last call."""
    global _reported, _reported_pid
    # A process that read nothing remote never imported the store (nor fsspec's async stack);
    # looking it up instead of importing it keeps local workers free of both.
    store_module = sys.modules.get("streamload.remote.store")
    stores = store_module.RemoteStore.all_stores() if store_module is not None else []
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


def skipped_counts(chunk: TokenChunk, num_sources: int) -> torch.Tensor | None:
    """The chunk's skipped samples per batch and source, int64 ``[batches, num_sources]``
    (``None`` when none was skipped). Row ``r`` of the chunk is in batch ``r // batch_size``."""
    rows = chunk.skipped_rows
    if rows.size == 0:
        return None
    sources = chunk.plan.sources
    batches, batch_size = sources.shape
    counts = np.zeros((batches, num_sources), dtype=np.int64)
    np.add.at(counts, (rows // batch_size, sources.reshape(-1)[rows].astype(np.int64)), 1)
    return torch.from_numpy(counts)


def count_delivered_skips(sources: Sequence[Any], batch: dict[str, Any]) -> None:
    """Take :data:`SKIPPED_KEY` out of a batch about to be delivered and count its skipped
    samples in their sources' storage counters (:meth:`ShardSet.count_skipped`).

    Args:
        sources: The stream's sources, in source-index order (each has ``shards``).
        batch: One batch; changed in place.
    """
    counts = batch.pop(SKIPPED_KEY, None)
    if counts is None:
        return
    for source, samples in zip(sources, counts.tolist(), strict=True):
        if samples:
            source.shards.count_skipped(samples)
