"""Pieces of remote objects: memory LRU → disk cache → range request, with in-flight sharing.

Token windows are read as *exact* byte ranges by default (a window of ``seq_len + 1`` tokens
is one piece; a rank never fetches bytes it does not use, except small gaps merged into a
request), because uniformly shuffled windows rarely share a block: caching whole blocks would
multiply the bytes fetched by ``block_size / window bytes``. With ``storage.window_reads =
"blocks"`` they are read through aligned blocks instead, for streams whose windows cluster
(:mod:`streamload.remote.layout`). Files parsed piecewise (a ``.pbin`` header and its index at
the end) are read in aligned blocks of ``storage.block_size``. Whole files (token files up to
``storage.whole_shard_size``, companion indexes) are downloaded into the disk cache and mapped
(:mod:`streamload.remote.download`).

Each piece is served from the process's memory LRU, else from the disk cache shared by all
processes (:mod:`streamload.remote.block_cache`), else fetched. Missing pieces that overlap or
lie within ``storage.coalesce_gap`` bytes of each other are fetched by one range request (up to
``MAX_RUN_BYTES``); requests run on at most ``storage.max_concurrency`` threads, and a piece
already being fetched is waited for, never fetched twice by one process. Prefetching is the
same call without waiting.

One :class:`RemoteStore` exists per storage (protocol, options, config) and process; a
:class:`StorageHandle` names it picklably, so shard descriptors travel into worker processes.
"""

from __future__ import annotations

import concurrent.futures
import logging
import os
import threading
import time
from collections import OrderedDict
from collections.abc import Sequence
from typing import Any, ClassVar

import fsspec
import fsspec.asyn
import numpy as np

from streamload.errors import RemoteReadError, RemoteStallError
from streamload.remote.block_cache import DiskBlockCache
from streamload.remote.bounded import DaemonPool
from streamload.remote.clients import client_options, limit_client_retries
from streamload.remote.download import WholeFiles
from streamload.remote.fetch import RangeFetcher
from streamload.remote.handle import RemoteObject, StorageHandle
from streamload.remote.http_client import http_client_for
from streamload.remote.layout import PieceLayout, piece_layout
from streamload.remote.stats import RemoteStats
from streamload.remote.watchdog import wait_watched

__all__ = ["MAX_RUN_BYTES", "RemoteObject", "RemoteStore", "StorageHandle"]

MAX_RUN_BYTES = 32 << 20
"""Largest coalesced range request (neighbouring missing pieces are merged up to this)."""

_Key = tuple[str, int, str, int, int]
"""In-process key of a piece: (url, size, version, start, end); cheap to hash (the disk cache
uses :meth:`RemoteObject.key`, a digest, only on a memory miss)."""
_Piece = tuple[int, int, _Key, "concurrent.futures.Future[bytes]"]
"""A piece to fetch: byte range, key, and the future its readers wait on."""


def _runs(pieces: list[_Piece], gap: int) -> list[list[_Piece]]:
    """Pieces sorted by start and grouped into requests: overlapping or near neighbours
    (at most ``gap`` bytes apart) share one, up to ``MAX_RUN_BYTES``."""
    runs: list[list[_Piece]] = []
    end = 0
    for piece in sorted(pieces, key=lambda p: (p[0], p[1])):
        if runs and piece[0] <= end + gap and piece[1] - runs[-1][0][0] <= MAX_RUN_BYTES:
            runs[-1].append(piece)
            end = max(end, piece[1])
        else:
            runs.append([piece])
            end = piece[1]
    return runs


_LOG = logging.getLogger("streamload.remote")


def _reset_after_fork() -> None:
    """A forked child starts its remote state afresh, before any of its threads runs: the
    parent's stores (their pools' threads do not exist here) and every lock a parent thread
    may have held at the fork. fsspec's own at-fork hook forgets its IO loop but not the lock
    that guards creating one (it resets a misspelled global), so a child whose parent was
    creating the loop at the fork would wait for ever at its first signing or listing."""
    RemoteStore._registry = {}
    RemoteStore._registry_pid = os.getpid()
    RemoteStore._registry_lock = threading.Lock()
    fsspec.asyn.reset_lock()


class RemoteStore:
    """Reads and prefetches blocks of one storage (see the module docstring).

    Args:
        handle: The storage.
    """

    _registry: ClassVar[dict[str, RemoteStore]] = {}
    _registry_pid = os.getpid()
    _registry_lock = threading.Lock()

    @classmethod
    def for_handle(cls, handle: StorageHandle) -> RemoteStore:
        """The process-wide store of ``handle`` (a forked child builds its own)."""
        with cls._registry_lock:
            if cls._registry_pid != os.getpid():  # threads and pools do not survive fork
                cls._registry, cls._registry_pid = {}, os.getpid()
            store = cls._registry.get(handle.key)
        if store is not None:
            return store
        fresh = cls(handle)  # outside the lock: a fork meanwhile must not inherit it held
        with cls._registry_lock:
            store = cls._registry.setdefault(handle.key, fresh)
        if store is not fresh:
            fresh.close()
        return store

    @classmethod
    def all_stores(cls) -> list[RemoteStore]:
        """Every store of this process."""
        with cls._registry_lock:
            return list(cls._registry.values()) if cls._registry_pid == os.getpid() else []

    def __init__(self, handle: StorageHandle) -> None:
        self.handle = handle
        self.config = cfg = handle.config
        self.stats = RemoteStats()
        options = client_options(handle.protocol, handle.options, cfg)  # our retries only
        self.fs = limit_client_retries(fsspec.filesystem(handle.protocol, **options))
        http = http_client_for(self.fs, handle.protocol, handle.options, cfg)
        self.fetcher = RangeFetcher(self.fs, cfg, self.stats, http)
        self.disk = (
            DiskBlockCache(cfg.cache_root, cfg.cache_size, self._evicted)
            if cfg.cache_size
            else None
        )
        # Daemon threads: a process exits without waiting for fetches still retrying.
        self._jobs = DaemonPool(cfg.max_concurrency, "streamload-fetch")
        self._lock = threading.Lock()
        self._memory: OrderedDict[_Key, bytes] = OrderedDict()
        self._memory_bytes = 0
        self._inflight: dict[_Key, concurrent.futures.Future[bytes]] = {}
        self._warned_unversioned = False
        self.whole = WholeFiles(cfg, self.fetcher, self.stats, self._jobs.submit, self._disk_for)
        """Token files read whole, and companion files, in the disk cache."""

    def _evicted(self, count: int) -> None:
        self.stats.add("evicted_blocks", count)

    # -- pieces ----------------------------------------------------------------------------
    def schedule(
        self, obj: RemoteObject, pieces: Sequence[tuple[int, int]], *, disk_inline: bool = False
    ) -> list[bytes | concurrent.futures.Future[bytes]]:
        """Each piece's bytes when in memory, else a future; missing pieces are fetched in the
        background (``disk_inline``: disk-cache hits are read in the calling thread first,
        which a reader prefers to a thread hop; the planner's prefetch does not wait on disk).
        """
        out: list[bytes | concurrent.futures.Future[bytes]] = []
        missing: list[_Piece] = []
        hits = 0
        url, size, version = obj.url, obj.size, obj.version
        with self._lock:
            for lo, hi in pieces:
                key = (url, size, version, lo, hi)
                data = self._memory.get(key)
                if data is not None:
                    self._memory.move_to_end(key)
                    hits += 1
                    out.append(data)
                elif key in self._inflight:
                    out.append(self._inflight[key])
                else:
                    future: concurrent.futures.Future[bytes] = concurrent.futures.Future()
                    self._inflight[key] = future
                    missing.append((lo, hi, key, future))
                    out.append(future)
        if hits:
            self.stats.add("memory_hits", hits)
        disk = self._disk_for(obj)
        if disk_inline and disk is not None and missing:
            missing = [piece for piece in missing if not self._from_disk(obj, piece)]
        # Pieces left after the inline disk check are known misses: skip a second lookup.
        check_disk = not (disk_inline and disk is not None)
        for run in _runs(missing, self.config.coalesce_gap):
            self._jobs.submit(self._fetch_run, obj, run, check_disk)
        return out

    def _disk_for(self, obj: RemoteObject) -> DiskBlockCache | None:
        """The disk cache for pieces of ``obj``: none when the store gave the object no
        version (ETag, generation or mtime), since a same-size replacement would then share
        its content keys and a later job could read stale bytes; such pieces stay in memory
        (one warning per store names the first such object)."""
        if obj.version or self.disk is None:
            return self.disk
        if not self._warned_unversioned:
            self._warned_unversioned = True
            _LOG.warning(
                "streamload: %s has no version (ETag/mtime) at its store; its bytes are cached "
                "in memory only, never on disk, so a replaced object is never read stale",
                obj.url,
            )
        return None

    def _from_disk(self, obj: RemoteObject, piece: _Piece) -> bool:
        lo, hi, key, future = piece
        disk = self._disk_for(obj)
        data = disk.get(obj.key(lo, hi), hi - lo) if disk is not None else None
        if data is None:
            return False
        self.stats.add("disk_hits")
        self._finish(key, future, data)
        return True

    def _fetch_run(self, obj: RemoteObject, run: list[_Piece], check_disk: bool = True) -> None:
        pending = list(run)
        try:
            todo = []
            for piece in run:
                if check_disk and self._from_disk(obj, piece):
                    pending.remove(piece)
                else:
                    todo.append(piece)
            for part in _runs(todo, self.config.coalesce_gap):
                start, end = part[0][0], max(p[1] for p in part)
                data = self.fetcher.fetch(obj, start, end)
                for piece in part:
                    lo, hi, key, future = piece
                    block = data[lo - start : hi - start]
                    if obj.version:  # see _disk_for
                        self._store_disk(obj.key(lo, hi), block)
                    self.stats.add("fetched_blocks")
                    self._finish(key, future, block)
                    pending.remove(piece)
        except BaseException as exc:
            for _, _, key, future in pending:
                with self._lock:
                    self._inflight.pop(key, None)
                future.set_exception(exc)

    def _store_disk(self, key: str, block: bytes) -> None:
        if self.disk is None:
            return
        try:
            self.disk.put(key, block)
        except OSError as exc:  # a full or read-only cache slows reads down, never fails them
            _LOG.warning("streamload block cache %s: cannot write: %s", self.disk.root, exc)

    def _finish(self, key: _Key, future: concurrent.futures.Future[bytes], data: bytes) -> None:
        with self._lock:
            self._inflight.pop(key, None)
            limit = self.config.memory_size
            if len(data) <= limit and key not in self._memory:
                self._memory[key] = data
                self._memory_bytes += len(data)
                while self._memory_bytes > limit:
                    _, old = self._memory.popitem(last=False)
                    self._memory_bytes -= len(old)
        future.set_result(data)

    # -- reading ---------------------------------------------------------------------------
    def prefetch(self, obj: RemoteObject, starts: np.ndarray, ends: np.ndarray) -> None:
        """Start fetching byte ranges ``[starts[i], ends[i])`` of ``obj`` (token windows;
        does not wait); a file read whole is downloaded whole (:class:`WholeFiles`)."""
        if starts.size == 0:
            return
        if self.whole.reads_whole(obj):
            self.whole.download(obj)  # a failure reaches the reader that opens the shard
            return
        pieces = self.layout(obj, starts, ends).pieces
        disk = self._disk_for(obj)
        if disk is not None:  # the reader reads those itself, without queueing behind
            # fetches in the pool (measured: 0.6x warm with a queue)
            pieces = [p for p in pieces if not os.path.exists(disk.path(obj.key(*p)))]
        if pieces:
            self.schedule(obj, pieces)

    def read(self, obj: RemoteObject, start: int, end: int, *, aligned: bool = False) -> Any:
        """Bytes ``[start, end)`` of ``obj`` (waits, with the stall watchdog).

        Args:
            obj: The object.
            start: First byte.
            end: End byte (exclusive).
            aligned: Read through aligned blocks (files parsed piecewise) instead of the exact
                range (token windows, which :meth:`prefetch` fetched ahead).

        Raises:
            RemoteReadError: the object stayed unreadable; RemoteStallError: it stalled.
        """
        if end <= start:
            return b""
        one = np.array([start], dtype=np.int64), np.array([end], dtype=np.int64)
        pieces = self.layout(obj, *one, blocks=aligned).pieces
        items = self.schedule(obj, pieces, disk_inline=True)
        parts = []
        for (lo, _), item in zip(pieces, items, strict=True):
            data = item if isinstance(item, bytes) else self._wait(obj, item, start, end)
            block = memoryview(data)
            parts.append(block[max(start - lo, 0) : min(end - lo, len(block))])
        if not parts:
            return b""
        return parts[0] if len(parts) == 1 else b"".join(parts)

    def layout(
        self, obj: RemoteObject, starts: np.ndarray, ends: np.ndarray, *, blocks: bool = False
    ) -> PieceLayout:
        """The pieces holding byte ranges ``[starts[i], ends[i])`` of ``obj``
        (:mod:`streamload.remote.layout`): by ``storage.window_reads``, or aligned blocks
        (``blocks``: files parsed piecewise, e.g. a header and an index at the end)."""
        cfg = self.config
        reads = "blocks" if blocks else cfg.window_reads.value
        return piece_layout(obj.size, starts, ends, reads, cfg.block_size)

    def read_many(self, obj: RemoteObject, starts: np.ndarray, ends: np.ndarray) -> list[Any]:
        """Bytes ``[starts[i], ends[i])`` of ``obj`` for every ``i`` (the token windows of one
        chunk in one shard): every piece is scheduled by one call, then each range is sliced.

        Returns:
            Per range, its bytes (a ``memoryview`` or ``bytes``), or the ``RemoteReadError``
            of a piece that stayed unreadable (so the caller can skip that range alone).
        """
        layout = self.layout(obj, starts, ends)
        pieces = layout.pieces
        got: list[Any] = []
        since = time.monotonic()  # the object's last progress: one stall fails the rest at once
        stalled: RemoteStallError | None = None  # (the watchdog's, or every attempt timed out)
        for piece, item in zip(pieces, self.schedule(obj, pieces, disk_inline=True), strict=True):
            if stalled is not None and not isinstance(item, bytes) and not item.done():
                got.append(stalled)
                continue
            try:
                data = item if isinstance(item, bytes) else self._wait(obj, item, *piece, since)
                got.append(memoryview(data))
            except RemoteStallError as exc:  # on_error decides per window
                got.append(exc)
                stalled = exc
                continue
            except RemoteReadError as exc:  # the store answered (an error): progress
                got.append(exc)
            since = time.monotonic()
        out: list[Any] = []
        spans = zip(
            starts.tolist(), ends.tolist(), layout.first.tolist(), layout.last.tolist(), strict=True
        )
        for a, b, f, t in spans:
            parts = got[f : t + 1]
            failed = [part for part in parts if isinstance(part, RemoteReadError)]
            if failed:
                out.append(failed[0])
            elif f == t:
                out.append(parts[0][a - pieces[f][0] : b - pieces[f][0]])
            else:
                out.append(
                    b"".join(
                        part[max(a - lo, 0) : min(b - lo, len(part))]
                        for part, (lo, _) in zip(parts, pieces[f : t + 1], strict=True)
                    )
                )
        return out

    def _wait(
        self,
        obj: RemoteObject,
        future: concurrent.futures.Future[bytes],
        start: int,
        end: int,
        since: float | None = None,
    ) -> bytes:
        return wait_watched(future, (obj.url, start, end), self.config, self.stats, since)

    def clear_memory(self) -> None:
        """Drop the in-memory pieces (a closed loader's; pieces stay in the disk cache)."""
        with self._lock:
            self._memory.clear()
            self._memory_bytes = 0

    def close(self) -> None:
        """Stop this store's pools (queued fetches are cancelled; running ones finish in the
        background). Stores live as long as their process; this is for stores built directly
        rather than through :meth:`for_handle`."""
        self._jobs.shutdown()
        self.fetcher.close()

    def drain(self, timeout: float = 60.0) -> bool:
        """Wait until no piece is in flight in this process (``False``: still busy)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            with self._lock:
                pending = list(self._inflight.values())
            if not pending:
                return True
            concurrent.futures.wait(pending, timeout=max(0.0, deadline - time.monotonic()))
        return False


if hasattr(os, "register_at_fork"):  # not on Windows, which has no fork
    os.register_at_fork(after_in_child=_reset_after_fork)
