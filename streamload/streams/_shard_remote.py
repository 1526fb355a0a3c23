"""Reading a source's remote shards by byte range (docs/remote.md), for :class:`ShardSet`.

Windows become the byte ranges of their shards, fetched ahead and coalesced by the storage's
:class:`~streamload.remote.store.RemoteStore` (:func:`prefetch_windows`); a chunk's rows of one
remote shard are read at once (:func:`gather_remote`). Under ``on_error = "skip"`` a row whose
bytes stay unreadable is handed back to the caller, which zero-fills it and records its
stream offset (:func:`skip_unreadable` decides, and names the object in ``stats()``).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

import numpy as np

from streamload.errors import RemoteReadError
from streamload.formats.base import ShardInfo, TokenShard
from streamload.remote.handle import RemoteObject

if TYPE_CHECKING:  # the store (fsspec, asyncio) loads only when a remote shard is read
    from streamload.remote.store import RemoteStore

__all__ = ["gather_remote", "prefetch_tokens", "prefetch_windows", "skip_unreadable", "store_of"]

_LOG = logging.getLogger("streamload.remote")


def skip_unreadable(info: ShardInfo, exc: RemoteReadError, samples: int = 0) -> None:
    """Raise ``exc`` unless ``info``'s source has ``on_error = "skip"``; then name the object
    in ``stats()`` and log a warning (the caller zero-fills the samples, records their rows in
    the chunk and masks their labels).

    The samples are not counted here: a chunk may be read and never delivered (prefetched by
    a worker when the loop stops, read again after a restore), so the loader counts them when
    it delivers their batch (:meth:`ShardSet.count_skipped`). ``samples`` is ignored (kept for
    callers).
    """
    storage = info.storage
    if storage is None or storage.on_error != "skip":
        raise exc
    storage.store().stats.skipped(info.path, str(exc))
    _LOG.warning("streamload: skipping samples of %s (on_error = 'skip'): %s", info.path, exc)


def store_of(shards: Sequence[ShardInfo]) -> RemoteStore | None:
    """This process's store of the first remote shard (``None`` when every shard is local);
    sources on one storage with equal options share one store and its counters."""
    if len(shards) and shards[0].is_remote:  # a source's shards share one storage
        store: RemoteStore = shards[0].storage.store()
        return store
    return None


def prefetch_windows(
    shards: Sequence[ShardInfo], offsets: np.ndarray, starts: np.ndarray, length: int
) -> None:
    """Start fetching the bytes of windows ``[starts[i], starts[i] + length)`` of the remote
    shards among ``shards`` (stream offsets ``offsets``; near neighbours coalesced)."""
    ends = starts + length
    first = np.searchsorted(offsets, starts, side="right") - 1
    last = np.searchsorted(offsets, ends - 1, side="right") - 1
    for sid in np.unique(np.concatenate([first, last])).tolist():
        info = shards[sid]
        if not info.is_remote:
            continue
        rows = (first <= sid) & (last >= sid)
        base = int(offsets[sid])
        lo = np.clip(starts[rows] - base, 0, info.num_tokens)
        hi = np.clip(ends[rows] - base, 0, info.num_tokens)
        keep = hi > lo
        prefetch_tokens(info, lo[keep], hi[keep])


def prefetch_tokens(info: ShardInfo, lo: np.ndarray, hi: np.ndarray) -> None:
    """Start fetching tokens ``[lo[i], hi[i])`` of remote shard ``info``."""
    size = np.dtype(info.dtype).itemsize
    obj = RemoteObject(info.path, info.size, info.version)
    info.storage.store().prefetch(obj, info.offset + lo * size, info.offset + hi * size)


def gather_remote(
    shards: Sequence[ShardInfo],
    get: Callable[[int], TokenShard],
    rows_of: tuple[np.ndarray, np.ndarray, np.ndarray],
    out: np.ndarray,
    unreadable: Callable[[int, RemoteReadError, int], None],
) -> np.ndarray:
    """Rows inside one remote shard read by range, all of a shard's rows at once (one
    schedule per shard and chunk, not a locked lookup per window).

    Args:
        shards: The source's shards.
        get: Opens shard ``sid`` for this chunk (raises its ``RemoteReadError``).
        rows_of: Per row: shard index, offset inside the shard, and whether the window fits
            inside that shard.
        out: Output ``[n, length]``, filled for the rows read.
        unreadable: Called with ``(sid, error, row)`` for a row whose bytes stay unreadable.

    Returns:
        The rows done (the others, local or crossing a shard end, take the per-row path).
    """
    shard_ids, local, fit = rows_of
    done = np.zeros(shard_ids.shape[0], dtype=bool)
    length = out.shape[1]
    for sid in np.unique(shard_ids[fit]).tolist():
        if not shards[sid].is_remote:
            continue
        try:
            array = getattr(get(sid), "remote_array", None)
        except RemoteReadError:  # unopenable: the per-row path raises or skips its rows
            continue
        if array is None:  # a whole small shard mapped from the cache
            continue
        rows = np.flatnonzero(fit & (shard_ids == sid))
        for row, got in zip(rows.tolist(), array.read_rows(local[rows], length), strict=True):
            if isinstance(got, RemoteReadError):
                unreadable(sid, got, row)
            else:
                out[row] = got
        done[rows] = True
    return done
