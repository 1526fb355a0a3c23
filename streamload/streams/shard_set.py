"""Gathering windows of tokens from a source's shards, one copy per window.

The shards of a source form one stream; ``offsets[i]`` is the stream offset of shard i's
first token. A window is located with one ``searchsorted`` over shards (never over documents)
and copied straight from the memory map: the windows inside one mapped shard by one fancy
index over a sliding-window view of it (no Python step per window), the others one slice
each. Windows that straddle two shards (only with ``cross_shard = true``) are stitched. A
source's loss masks are a second set of this class, gathered with the same offsets
(:func:`loss_mask_set`).

Remote shards (docs/remote.md) are read by byte range: :meth:`ShardSet.prefetch` turns windows
into the byte ranges of their shards and starts fetching them (coalesced, bounded
concurrency), and :meth:`ShardSet.gather` prefetches a whole chunk before copying its rows,
so the chunk's windows arrive concurrently. Under ``on_error = "skip"`` a row whose bytes stay
unreadable is zero-filled and its stream offset recorded (:meth:`ShardSet.take_skipped`), so
the reader can deliver it with no loss; the sample keeps its index (order and resumption are
unchanged). The byte-range side lives in :mod:`streamload.streams._shard_remote`.
"""

from __future__ import annotations

import dataclasses
import errno
import os
import threading
from collections import OrderedDict
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

from streamload.catalog.identity import check_opened, refuse_changed
from streamload.catalog.table import ShardTable
from streamload.config.storage import StorageConfig
from streamload.errors import FormatError, RemoteReadError, StreamloadError
from streamload.formats.base import ShardInfo, TokenShard
from streamload.formats.loss_mask import FORMAT as MASK_FORMAT_SPEC
from streamload.formats.loss_mask import MASK_DTYPE, mask_shard
from streamload.formats.registry import open_shard
from streamload.streams._shard_remote import (
    gather_remote,
    prefetch_tokens,
    prefetch_windows,
    skip_unreadable,
    store_of,
)

MASK_FORMAT = MASK_FORMAT_SPEC.name

__all__ = ["MAX_OPEN_SHARDS", "ShardSet", "loss_mask_set", "skip_unreadable"]

_VIEW_ROWS = 16
"""Rows of a chunk a shard must hold to be read through one sliding-window view: setting up
the view and its index costs about as much as slicing a dozen rows one by one, so a shuffled
chunk over hundreds of shards (a few rows each) reads row by row."""


def _open_shard_limit() -> int:
    """An eighth of the soft open-file limit, within [8, 8192]: each open shard holds up to
    three mapped files (tokens and companions), each map a file descriptor, and a shard's
    mapped document bounds one more."""
    try:
        import resource

        soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    except (ImportError, OSError, ValueError):  # no resource module (Windows)
        return 256
    if soft == resource.RLIM_INFINITY:
        return 8192
    return max(8, min(8192, soft // 8))


MAX_OPEN_SHARDS = _open_shard_limit()
"""Shards kept open per process; the least recently used are unmapped beyond it. A shuffled
stream touches every shard, so a corpus of more shards than this reopens some in every chunk
(about 10 us each)."""
_HELD_PER_CHUNK = min(64, MAX_OPEN_SHARDS)
"""Shards one chunk's gather keeps at hand (beyond them it asks the process's cache again)."""


class ShardSet:
    """The shards of one source, opened lazily in whichever process uses them.

    Pickling drops the open maps, so a ``ShardSet`` travels cheaply into worker processes.

    Args:
        shards: The described shards, in stream order.
        storage: Fetching options for remote shards (replaces those they were described
            with; never changes which tokens are read).
    """

    def __init__(
        self, shards: Sequence[ShardInfo] | ShardTable, storage: StorageConfig | None = None
    ) -> None:
        table = ShardTable.of(shards)
        self.shards = table.read_with(storage)
        self.remote = table.remote
        # pid of the process whose Lookahead prefetches every chunk (a forked worker inherits
        # the value without the Lookahead, so it compares pids; pickling resets it)
        self.planned_ahead: int | None = None
        self.offsets = np.concatenate([[0], np.cumsum(table.num_tokens)]).astype(np.int64)
        self.dtype = table.common_dtype()
        self._checked: set[int] = set()  # shards whose identity this process checked
        self._open: OrderedDict[int, TokenShard] = OrderedDict()
        self._open_pid = os.getpid()  # a forked child must not use its parent's opened shards
        self._lock = threading.Lock()
        self._skipped = threading.local()

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        state["_open"] = OrderedDict()
        state["_open_pid"] = None
        state["planned_ahead"] = None  # another process: its reads start their own fetches
        state["_checked"] = set()
        del state["_lock"], state["_skipped"]
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._lock = threading.Lock()
        self._skipped = threading.local()

    def storage_stats(self) -> dict[str, Any] | None:
        """This process's counters of the storage the shards are read from (``None`` when
        local; sources on one storage with equal options share one set of counters).

        Process workers count theirs in their own process and report them with each result;
        ``loader.stats()`` adds them (:mod:`streamload.nodes._worker_stats`). Skipped samples
        are counted in the training process, as their batches are delivered."""
        store = store_of(self.shards)
        return None if store is None else dict(store.stats.snapshot())

    def count_skipped(self, samples: int) -> None:
        """Add ``samples`` to ``skipped_samples`` of this process's counters of the storage
        (a no-op when local): the loader calls it for the skipped samples of each batch it
        delivers, so each is counted once, when delivered."""
        store = store_of(self.shards)
        if store is not None:
            store.stats.add("skipped_samples", samples)

    def take_skipped(self) -> list[int]:
        """Stream offsets of rows this thread zero-filled under ``on_error = "skip"`` since the
        last call (and forget them)."""
        taken: list[int] = getattr(self._skipped, "starts", [])
        self._skipped.starts = []
        return taken

    def prefetch(self, starts: np.ndarray, length: int) -> None:
        """Start fetching the bytes of windows ``[starts[i], starts[i] + length)`` of remote
        shards (near neighbours coalesced); a no-op for local shards."""
        if not self.remote or starts.size == 0:
            return
        prefetch_windows(self.shards, self.offsets, starts, length)

    def prefetch_pieces(self, shard_ids: np.ndarray, starts: np.ndarray, sizes: np.ndarray) -> None:
        """Start fetching tokens ``[starts[i], starts[i] + sizes[i])`` of shard
        ``shard_ids[i]`` (offsets inside the shard; pieces never cross a shard end)."""
        for sid in np.unique(shard_ids).tolist():
            if self.shards[sid].is_remote:
                rows = shard_ids == sid
                prefetch_tokens(self.shards[sid], starts[rows], starts[rows] + sizes[rows])

    @property
    def num_tokens(self) -> int:
        """Tokens in the whole stream."""
        return int(self.offsets[-1])

    def shard(self, index: int) -> TokenShard:
        """The opened shard ``index`` (opened on first use in this process; thread-safe)."""
        if self._open_pid != os.getpid():  # forked: remote shards hold the parent's store,
            # whose fetch threads do not exist here (reads would wait for stall_timeout)
            self._lock = threading.Lock()
            self._open, self._open_pid = OrderedDict(), os.getpid()
        with self._lock:  # thread workers share the cache; eviction races get/move_to_end
            opened = self._open.get(index)
            if opened is not None:
                self._open.move_to_end(index)
                return opened
        # Opened outside the lock (a remote open may fetch an index): a thread racing us
        # opens it too, and the first one stored wins.
        info = self.shards[index]
        if index not in self._checked:  # once per process: a shard changed in place
            problem = check_opened(info)
            if problem is not None:
                self.shards.forget()
                raise refuse_changed(problem)
            self._checked.add(index)
        try:
            fresh = open_shard(info)
        except (OSError, FormatError) as exc:
            _refuse_file_limit(exc, info.path)
            raise
        with self._lock:
            opened = self._open.setdefault(index, fresh)
            self._open.move_to_end(index)
            if len(self._open) > MAX_OPEN_SHARDS:
                self._open.popitem(last=False)
            return opened

    def locate(self, stream_offset: int) -> tuple[int, int]:
        """(shard index, offset inside the shard) of a stream offset."""
        index = int(np.searchsorted(self.offsets, stream_offset, side="right")) - 1
        return index, stream_offset - int(self.offsets[index])

    def windows(self, starts: np.ndarray, length: int, dtype: np.dtype[Any]) -> np.ndarray:
        """A new ``[n, length]`` array of ``dtype`` holding the windows at stream offsets
        ``starts`` (:meth:`gather`). When every window lies inside one mapped shard, they are
        indexed out of it straight into the new array (one copy, not a block then a copy)."""
        if starts.size and not self.remote:
            sid = int(np.searchsorted(self.offsets, starts[0], side="right")) - 1
            lo, hi = int(self.offsets[sid]), int(self.offsets[sid + 1])
            if int(starts.min()) >= lo and int(starts.max()) + length <= hi:
                view = _mapped_windows(self.shard(sid), hi - lo, length)
                if view is not None:
                    return view[starts - lo].astype(dtype, copy=False)
        return self.gather(starts, np.empty((starts.shape[0], length), dtype=dtype))

    def gather(self, starts: np.ndarray, out: np.ndarray) -> np.ndarray:
        """Fill ``out[i]`` with stream tokens ``[starts[i], starts[i] + out.shape[1])``.

        Args:
            starts: Stream offsets, int64 ``[n]``.
            out: Output ``[n, length]``; any integer dtype wide enough for the tokens.

        Returns:
            ``out``.
        """
        length = out.shape[1]
        if self.remote and self.planned_ahead != os.getpid():
            self.prefetch(starts, length)  # the chunk's windows arrive concurrently
        shard_ids = np.searchsorted(self.offsets, starts, side="right") - 1
        local = starts - self.offsets[shard_ids]
        ends = self.offsets[shard_ids + 1] - self.offsets[shard_ids]
        fit = local + length <= ends
        get = self._opener()
        done: np.ndarray | None = None
        if self.remote:

            def unreadable(sid: int, exc: RemoteReadError, row: int) -> None:
                self._skip_or_raise(sid, exc, int(starts[row]), out[row])

            done = gather_remote(self.shards, get, (shard_ids, local, fit), out, unreadable)
        done = self._gather_mapped(get, shard_ids, local, fit, out, done)
        inside = fit.tolist()
        ids = shard_ids.tolist()
        for row, (sid, loc, fits) in enumerate(zip(ids, local.tolist(), inside, strict=True)):
            if done is not None and done[row]:
                continue
            if not fits:
                self._stitch(get, sid, loc, int(starts[row]), out[row])
                continue
            try:
                out[row] = get(sid).tokens(loc, loc + length)
            except RemoteReadError as exc:
                self._skip_or_raise(sid, exc, int(starts[row]), out[row])
        return out

    def _gather_mapped(
        self,
        get: Callable[[int], TokenShard],
        shard_ids: np.ndarray,
        local: np.ndarray,
        fit: np.ndarray,
        out: np.ndarray,
        done: np.ndarray | None,
    ) -> np.ndarray:
        """Rows inside one memory-mapped shard that holds at least :data:`_VIEW_ROWS` of the
        chunk's rows, copied by one fancy index per shard over a sliding-window view of its
        tokens (no Python step per row: a fifth less time than a slice copy per row for 4-byte
        tokens, a third for 1-byte loss masks); returns the rows done (the others, and those
        of shards with few rows, take the per-row path)."""
        done = np.zeros(shard_ids.shape[0], dtype=bool) if done is None else done
        todo = np.flatnonzero(fit & ~done)
        ids, length = shard_ids[todo], out.shape[1]
        busy = np.bincount(ids, minlength=1) >= _VIEW_ROWS if ids.size else np.zeros(0, bool)
        for sid in np.flatnonzero(busy).tolist():
            try:
                shard = get(sid)
            except RemoteReadError:  # the per-row path raises or skips its rows
                continue
            view = _mapped_windows(shard, int(self.shards.num_tokens[sid]), length)
            if view is None:
                continue
            rows = todo[ids == sid]
            out[rows] = view[local[rows]]
            done[rows] = True
        return done

    def _opener(self) -> Callable[[int], TokenShard]:
        """Opens shards for one chunk: a shard that cannot be opened (after its retries)
        fails once per chunk (each of its rows gets that error, instead of running the
        retries again). The shards opened are held for the chunk up to
        :data:`_HELD_PER_CHUNK` (a chunk over more shards than the open-file limit allows
        reopens some through the process's cache, never holds them all)."""
        opened: OrderedDict[int, TokenShard | RemoteReadError] = OrderedDict()

        def get(sid: int) -> TokenShard:
            got = opened.get(sid)
            if got is None:
                try:
                    got = self.shard(sid)
                except RemoteReadError as exc:
                    got = exc
                opened[sid] = got
                if len(opened) > _HELD_PER_CHUNK:
                    oldest = next(iter(opened))
                    if not isinstance(opened[oldest], RemoteReadError):
                        del opened[oldest]
                    else:
                        opened.move_to_end(oldest)
            if isinstance(got, RemoteReadError):
                raise got
            return got

        return get

    def _skip_or_raise(self, sid: int, exc: RemoteReadError, start: int, row: np.ndarray) -> None:
        skip_unreadable(self.shards[sid], exc)
        row[:] = 0
        self._skipped_starts().append(start)

    def _skip_rows(self, sid: int, exc: RemoteReadError, starts: np.ndarray) -> None:
        """Rows at stream offsets ``starts`` whose shard ``sid`` has an unreadable document
        index: skipped like unreadable tokens (raises unless ``on_error = "skip"``); rows
        already skipped this chunk are recorded once."""
        skip_unreadable(self.shards[sid], exc)
        skipped = self._skipped_starts()
        skipped.extend(np.setdiff1d(starts, np.asarray(skipped, dtype=np.int64)).tolist())

    def _skipped_starts(self) -> list[int]:
        """This thread's stream offsets of the rows skipped since the last take."""
        if not hasattr(self._skipped, "starts"):
            self._skipped.starts = []
        starts: list[int] = self._skipped.starts
        return starts

    def _stitch(
        self, get: Callable[[int], TokenShard], sid: int, loc: int, start: int, row: np.ndarray
    ) -> None:
        """Fill ``row`` from shard ``sid`` at ``loc`` on into the next shards (a window that
        straddles them); an unreadable shard is named itself when the row is skipped."""
        filled = 0
        while filled < row.shape[0]:
            try:
                piece = get(sid).tokens(loc, loc + row.shape[0] - filled)
            except RemoteReadError as exc:
                self._skip_or_raise(sid, exc, start, row)
                return
            row[filled : filled + piece.shape[0]] = piece
            filled += piece.shape[0]
            sid, loc = sid + 1, 0


def _refuse_file_limit(exc: BaseException, path: str) -> None:
    """Raise a clear error when opening ``path`` failed for want of file descriptors."""
    cause: BaseException | None = exc
    while cause is not None and getattr(cause, "errno", None) != errno.EMFILE:
        cause = cause.__cause__ or cause.__context__
    if cause is None:
        return
    raise StreamloadError(
        f"{path}: too many open files (EMFILE); this process keeps up to {MAX_OPEN_SHARDS} "
        "shards open (an eighth of its open-file limit), so something else holds the rest: "
        "raise the limit (ulimit -n) or close files the training script keeps open"
    ) from exc


def loss_mask_set(
    shards: Sequence[ShardInfo] | ShardTable, storage: StorageConfig | None = None
) -> ShardSet | None:
    """The loss masks of ``shards`` as a shard set of their own, gathered with the same
    stream offsets as the tokens (:func:`streamload.formats.loss_mask.mask_shard`: a shard
    without a mask reads as all trained); ``None`` when no shard has a mask."""
    table = ShardTable.of(shards)
    if not table.facts.masked:
        return None
    facts = dataclasses.replace(table.facts, dtypes=(MASK_DTYPE.str,), formats=(MASK_FORMAT,))
    return ShardSet(table.mapped(mask_shard, facts), storage)


def _mapped_windows(shard: TokenShard, num_tokens: int, length: int) -> np.ndarray | None:
    """Every window of ``length`` tokens of a memory-mapped shard, as a sliding-window view
    (no copy); ``None`` for a shard read by range or encoded."""
    if getattr(shard, "remote_array", True) is not None:
        return None
    return sliding_window_view(shard.tokens(0, num_tokens), length)
