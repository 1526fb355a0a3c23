"""A bounded block cache on local disk, shared by every worker and process of a machine.

Layout: ``<root>/blocks/<k[:2]>/<k>``, one file per block, ``k`` a content key (hash of the
object URL, size, version and the block's byte range), so a changed object never reads old
blocks. Safe to share without locks:

* a block is written to a temporary name in the same folder and renamed into place
  (``os.replace`` is atomic), so readers see a whole block or none; two processes fetching
  the same block both write it and the last rename wins (the bytes are equal);
* there are no lock files and no shared memory, so a crash leaves at most a temporary file,
  which the next eviction pass removes once it is older than ``STALE_TEMP_SECONDS``;
* a hit touches the file's mtime; eviction deletes the files with the oldest mtimes (LRU)
  until the cache holds at most ``LOW_WATER`` of the limit. A reader that loses a block to
  another process's eviction simply sees a miss.

Each process tracks its own writes and rescans the folder when its estimate exceeds the limit
(and every ``RESCAN_PUTS`` writes, to see other processes' writes), so the cache exceeds its
limit by at most what other processes wrote since the last scan.
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
import uuid

__all__ = ["LOW_WATER", "RESCAN_PUTS", "STALE_TEMP_SECONDS", "DiskBlockCache"]

LOW_WATER = 0.9
"""Eviction frees space down to this share of the limit (so it does not run on every write)."""
RESCAN_PUTS = 64
"""Writes between scans of the folder (to count other processes' writes)."""
STALE_TEMP_SECONDS = 600.0
"""Temporary files older than this are leftovers of a crashed writer."""
_TEMP = ".tmp-"


class DiskBlockCache:
    """Blocks by content key under ``root``, at most ``limit`` bytes (LRU by mtime).

    Args:
        root: The cache folder (created on first write).
        limit: Size limit in bytes (> 0).
        on_evict: Called with the number of blocks each eviction pass deleted.
    """

    def __init__(self, root: str, limit: int, on_evict: object = None) -> None:
        self.root = os.path.join(root, "blocks")
        self.limit = limit
        self._on_evict = on_evict
        self._lock = threading.Lock()
        self._evicting = threading.Lock()
        self._estimate: int | None = None  # bytes in the cache as this process believes
        self._written = 0  # bytes this process wrote, ever
        self._puts = 0

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
        """Store a block (atomically), then evict if over the limit."""
        tmp = self.temp_path(key)
        try:
            with open(tmp, "wb") as fh:
                fh.write(data)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            raise
        self.commit(key, tmp, len(data))

    def temp_path(self, key: str) -> str:
        """A fresh temporary name for block ``key`` in its folder (created), to be written
        and then passed to :meth:`commit`; a crashed writer's leftover is removed by a later
        scan once it is older than ``STALE_TEMP_SECONDS``."""
        folder = os.path.dirname(self.path(key))
        os.makedirs(folder, exist_ok=True)
        return os.path.join(folder, f"{_TEMP}{key}-{os.getpid()}-{uuid.uuid4().hex[:8]}")

    def commit(self, key: str, tmp: str, size: int) -> str:
        """Rename the written temporary file ``tmp`` (``size`` bytes) into place as block
        ``key`` (atomic), count it, evict if over the limit; returns the block's path.

        Raises:
            OSError: the rename failed (``tmp`` is removed).
        """
        path = self.path(key)
        try:
            os.replace(tmp, path)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            raise
        with self._lock:
            self._puts += 1
            self._written += size
            if self._estimate is not None:
                self._estimate += size
            rescan = (
                self._estimate is None
                or self._estimate > self.limit
                or self._puts % RESCAN_PUTS == 0
            )
        if rescan:
            self.evict()
        return path

    def usage(self) -> int:
        """Bytes of whole blocks in the cache now (one scan of the folder)."""
        return sum(size for _, size, _ in self._scan())

    def evict(self) -> int:
        """Scan the folder; delete stale temporaries, then LRU blocks down to the low water.

        Returns:
            Blocks deleted.
        """
        with self._evicting:  # one pass at a time per process
            with self._lock:
                written = self._written
            entries = self._scan()
            total = sum(size for _, size, _ in entries)
            deleted = 0
            if total > self.limit:
                target = int(self.limit * LOW_WATER)
                for _, size, path in sorted(entries):
                    if total <= target:
                        break
                    with contextlib.suppress(FileNotFoundError):
                        os.unlink(path)
                        deleted += 1
                    total -= size
            with self._lock:
                # Writes during the scan may be counted twice: the estimate errs high, so the
                # next write scans again rather than letting the cache grow past its limit.
                self._estimate = total + self._written - written
        if deleted and callable(self._on_evict):
            self._on_evict(deleted)
        return deleted

    def _scan(self) -> list[tuple[float, int, str]]:
        """(mtime, size, path) of every block; removes stale temporary files on the way."""
        out: list[tuple[float, int, str]] = []
        now = time.time()
        try:
            folders = list(os.scandir(self.root))
        except FileNotFoundError:
            return out
        for folder in folders:
            if not folder.is_dir():
                continue
            with contextlib.suppress(FileNotFoundError):
                for entry in os.scandir(folder.path):
                    try:
                        st = entry.stat()
                    except FileNotFoundError:
                        continue
                    if entry.name.startswith(_TEMP):
                        if now - st.st_mtime > STALE_TEMP_SECONDS:
                            with contextlib.suppress(OSError):
                                os.unlink(entry.path)
                        continue
                    out.append((st.st_mtime, st.st_size, entry.path))
        return out
