"""A bounded block cache on local disk, shared by every worker and process of a machine.

Layout: ``<root>/blocks/<k[:2]>/<k>``, one file per block, ``k`` a content key (hash of the
object URL, size, version and the block's byte range), so a changed object never reads old
blocks. Safe to share without locks:

* a block is written to a temporary name in the same folder and renamed into place
  (``os.replace`` is atomic), so readers see a whole block or none; two processes fetching
  the same block both write it and the last rename wins (the bytes are equal);
* there are no lock files and no shared memory, so a crash leaves at most a temporary file,
  which a later scan removes once it is older than ``STALE_TEMP_SECONDS``;
* a hit touches the file's mtime; a scan that finds more than the limit deletes the files with
  the oldest mtimes (LRU) until the cache holds at most ``LOW_WATER`` of the limit. A reader
  that loses a block to another process's eviction simply sees a miss.

Scans. A scan (:meth:`DiskBlockCache.evict`) stats every file of the folder (a few µs each:
seconds for the ~2M pieces of a full 16 GiB cache of 8 KiB windows), so writers never run or
wait for one. Each process counts its writes and estimates the folder's size (the last scan's
total plus its writes since). A write asks for a scan when the estimate is unknown (the
process's first write), over the limit, or when the process wrote ``limit // RESCAN_SHARE``
bytes since its last scan began (to count other processes' writes). Scans run in one daemon
thread per cache and process, started by the write that asks for one (a forked child starts
its own): one scan at a time; after each, one more only if a scan is still due (so requests
during a scan coalesce into one follow-up), then the thread exits. :meth:`~DiskBlockCache.evict`
scans in the caller's thread (after a running scan), :meth:`~DiskBlockCache.wait_idle` waits
for the thread.

Bound. Once no scan runs or is due in any of ``P`` writing processes, the folder holds less
than ``limit + P * (limit // RESCAN_SHARE)`` bytes of blocks (1.25x the limit with 4
processes): the latest scan left at most the limit of what it listed, and what it did not
list was written since its writer's own last scan began (no later), less than
``limit // RESCAN_SHARE`` bytes per process. One process alone stays within the limit then
(its estimate counts every write, some twice: it errs high). Writers are never blocked: while
a scan is running or due, the folder may exceed this bound by what is written until that scan
has listed it.

Memory: a scan holds an mtime and a size (16 bytes) and the name of each block (joined per
folder: ~41 bytes for a 40-character key), not a Python object per block; eviction adds
24 bytes per block while it sorts (numpy).
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading
import time
import weakref
from array import array
from collections.abc import Callable

import numpy as np

from streamload.util.files import publish, temp_beside, write_atomic

__all__ = ["LOW_WATER", "RESCAN_SHARE", "STALE_TEMP_SECONDS", "DiskBlockCache"]

LOW_WATER = 0.9
"""Eviction frees space down to this share of the limit (so it does not run on every write)."""
RESCAN_SHARE = 16
"""A process rescans after writing ``limit // RESCAN_SHARE`` bytes (to count others' writes)."""
STALE_TEMP_SECONDS = 600.0
"""Temporary files older than this are leftovers of a crashed writer."""
_SEP = "/"  # joins the block names of a folder; no file name contains it
_LOG = logging.getLogger("streamload.remote")


class _Listing:
    """The blocks one scan found: mtimes and sizes in arrays, names joined per folder."""

    def __init__(self) -> None:
        self.mtimes = array("d")
        self.sizes = array("q")
        # (folder path, its block names joined by _SEP, index after its last block)
        self.folders: list[tuple[str, str, int]] = []
        self.total = 0  # bytes


class DiskBlockCache:
    """Blocks by content key under ``root``, at most ``limit`` bytes (LRU by mtime).

    Args:
        root: The cache folder (created on first write).
        limit: Size limit in bytes (> 0).
        on_evict: Called with the number of blocks each eviction pass deleted (by the scan
            thread, or by the caller of :meth:`evict`).
    """

    def __init__(
        self, root: str, limit: int, on_evict: Callable[[int], None] | None = None
    ) -> None:
        self.root = os.path.join(root, "blocks")
        self.limit = limit
        self._on_evict = on_evict
        self._rescan_bytes = max(1, limit // RESCAN_SHARE)
        self._reset()
        _CACHES.add(self)

    def _reset(self) -> None:
        """Start this process's state afresh (at creation and in a forked child, where the
        parent's scan thread does not exist and its locks may have been held)."""
        self._pid = os.getpid()
        self._lock = threading.Lock()
        self._idle = threading.Condition(self._lock)  # notified when the scan thread exits
        self._evicting = threading.Lock()  # one scan at a time per process
        self._thread: threading.Thread | None = None
        self._estimate: int | None = None  # bytes in the cache as this process believes
        self._written = 0  # bytes this process wrote, ever
        self._scanned = 0  # ``_written`` when the last scan began

    def path(self, key: str) -> str:
        """The file of block ``key``."""
        return os.path.join(self.root, key[:2], key)

    def get(self, key: str, length: int) -> bytes | None:
        """Block ``key`` if cached whole (``length`` bytes), else ``None``."""
        path = self.path(key)
        try:
            with open(path, "rb") as fh:
                data = fh.read()
        except OSError:
            return None
        if len(data) != length:  # written by another block size or damaged: refetch
            with contextlib.suppress(OSError):
                os.unlink(path)
            return None
        with contextlib.suppress(OSError):
            os.utime(path)  # most recently used
        return data

    def put(self, key: str, data: bytes | memoryview) -> None:
        """Store a block (atomically); a scan it makes due runs in the background."""
        path = self.path(key)
        write_atomic(path, data)
        self._count(len(data))

    def temp_path(self, key: str) -> str:
        """A fresh temporary name for block ``key`` in its folder (created), to be written
        and then passed to :meth:`commit`; a crashed writer's leftover is removed by a later
        scan once it is older than ``STALE_TEMP_SECONDS``."""
        return temp_beside(self.path(key))

    def commit(self, key: str, tmp: str, size: int) -> str:
        """Rename the written temporary file ``tmp`` (``size`` bytes) into place as block
        ``key`` (atomic) and count it; returns the block's path. Never waits for a scan: one
        it makes due runs in the scan thread.

        Raises:
            OSError: the rename failed (``tmp`` is removed).
        """
        path = self.path(key)
        publish(tmp, path)
        self._count(size)
        return path

    def usage(self) -> int:
        """Bytes of whole blocks in the cache now (one scan of the folder, in this thread)."""
        return self._scan().total

    def evict(self) -> int:
        """Scan the folder now, in this thread (after a scan already running): delete stale
        temporaries, then LRU blocks down to the low water if over the limit.

        Returns:
            Blocks deleted.
        """
        self._check_pid()
        with self._evicting:
            with self._lock:
                written = self._scanned = self._written
            listing = self._scan()
            total, deleted = listing.total, 0
            if total > self.limit:
                deleted, total = self._delete_lru(listing, int(self.limit * LOW_WATER))
            del listing
            with self._lock:
                # Writes during the scan may be counted twice: the estimate errs high, so the
                # next write asks for a scan rather than letting the cache grow past its limit.
                self._estimate = total + self._written - written
        if deleted and self._on_evict is not None:
            self._on_evict(deleted)
        return deleted

    def wait_idle(self, timeout: float | None = None) -> bool:
        """Wait until this process's scan thread has finished every scan due (``False``:
        still scanning after ``timeout`` seconds)."""
        self._check_pid()
        with self._idle:
            return self._idle.wait_for(lambda: self._thread is None, timeout)

    def _check_pid(self) -> None:
        """Start afresh in a forked child that the at-fork hook missed."""
        if self._pid != os.getpid():
            self._reset()

    def _scan_due(self) -> bool:
        """Whether this process should scan the folder (under ``_lock``)."""
        return (
            self._estimate is None
            or self._estimate > self.limit
            or self._written - self._scanned >= self._rescan_bytes
        )

    def _count(self, size: int) -> None:
        """Count a write of ``size`` bytes; start the scan thread if a scan is due and the
        thread is not running (a running one checks again when its scan ends)."""
        self._check_pid()
        with self._lock:
            self._written += size
            if self._estimate is not None:
                self._estimate += size
            if self._thread is not None or not self._scan_due():
                return
            self._thread = threading.Thread(
                target=self._scan_loop, name="streamload-cache-scan", daemon=True
            )
            try:
                self._thread.start()
            except RuntimeError:  # no thread now (interpreter shutdown): a later write retries
                self._thread = None

    def _scan_loop(self) -> None:
        """The scan thread: scan while a scan is due, then exit."""
        while True:
            ok = True
            try:
                self.evict()
            except Exception as exc:  # e.g. a file another user owns: a later write retries
                _LOG.warning("streamload: scan of disk cache %s failed: %r", self.root, exc)
                ok = False
            with self._lock:
                if not (ok and self._scan_due()):
                    self._thread = None
                    self._idle.notify_all()
                    return

    def _delete_lru(self, listing: _Listing, target: int) -> tuple[int, int]:
        """Delete the least recently used blocks of ``listing`` until at most ``target``
        bytes are left; returns (blocks deleted, bytes left)."""
        order = np.argsort(np.frombuffer(listing.mtimes, dtype=np.float64), kind="stable")
        freed = np.cumsum(np.frombuffer(listing.sizes, dtype=np.int64)[order])
        count = min(int(np.searchsorted(freed, listing.total - target)) + 1, len(order))
        victims = np.sort(order[:count])  # by folder
        del order
        deleted, start = 0, 0
        for folder, joined, end in listing.folders:
            lo, hi = np.searchsorted(victims, (start, end))
            if hi > lo:
                names = joined.split(_SEP)
                for index in victims[lo:hi].tolist():
                    with contextlib.suppress(FileNotFoundError):
                        os.unlink(os.path.join(folder, names[index - start]))
                        deleted += 1
            start = end
        return deleted, listing.total - int(freed[count - 1])

    def _scan(self) -> _Listing:
        """Every block's mtime, size and name; removes stale temporary files on the way."""
        out = _Listing()
        now = time.time()
        try:
            folders = [entry.path for entry in os.scandir(self.root) if entry.is_dir()]
        except FileNotFoundError:
            return out
        for folder in folders:
            names: list[str] = []
            with contextlib.suppress(FileNotFoundError):
                for entry in os.scandir(folder):
                    try:
                        st = entry.stat()
                    except FileNotFoundError:
                        continue
                    # Blocks are named by their hex key: a hidden file is a writer's temporary
                    # (``temp_beside``'s, or a ``.tmp-`` one of earlier versions).
                    if entry.name.startswith("."):
                        if now - st.st_mtime > STALE_TEMP_SECONDS:
                            with contextlib.suppress(OSError):
                                os.unlink(entry.path)
                        continue
                    out.mtimes.append(st.st_mtime)
                    out.sizes.append(st.st_size)
                    out.total += st.st_size
                    names.append(entry.name)
            if names:
                out.folders.append((folder, _SEP.join(names), len(out.mtimes)))
        return out


_CACHES: weakref.WeakSet[DiskBlockCache] = weakref.WeakSet()
"""Every cache of this process, so a forked child resets them before any thread runs."""


def _reset_after_fork() -> None:
    for cache in list(_CACHES):
        cache._reset()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_reset_after_fork)
