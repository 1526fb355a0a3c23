"""Decoded Parquet row groups, kept per process in bounded memory.

A Parquet file's token column cannot be mapped: each row group is decoded (decompressed,
unpacked) into numpy arrays before a token is read. Windows are read in runs, and a shuffled
stream comes back to a row group many times, so each decoded row group stays in one
process-wide least-recently-used cache of at most :data:`ROW_GROUP_CACHE_BYTES` (the row group
in use always stays, even alone above the bound). Entries are keyed by the file's path, size,
listed version, the column and the row group, so a changed file is never served stale.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable

import numpy as np

__all__ = ["ROW_GROUP_CACHE_BYTES", "RowGroupCache", "row_groups"]

ROW_GROUP_CACHE_BYTES = 1 << 30
"""Bytes of decoded row groups (tokens and offsets) one process keeps."""

Decoded = tuple[np.ndarray, np.ndarray]
"""A row group's token values and its ``rows + 1`` list offsets (into the values)."""


class RowGroupCache:
    """A thread-safe LRU of decoded row groups bounded by their bytes.

    Args:
        max_bytes: The bound (the most recently used entry is kept even above it).
    """

    def __init__(self, max_bytes: int) -> None:
        self.max_bytes = max_bytes
        self._entries: OrderedDict[Hashable, Decoded] = OrderedDict()
        self._bytes = 0
        self._lock = threading.Lock()

    def get(self, key: Hashable, decode: Callable[[], Decoded]) -> Decoded:
        """The entry of ``key``, decoded by ``decode()`` when absent (outside the lock: a
        thread racing us decodes it too, and the first one stored wins)."""
        with self._lock:
            found = self._entries.get(key)
            if found is not None:
                self._entries.move_to_end(key)
                return found
        fresh = decode()
        with self._lock:
            found = self._entries.get(key)
            if found is not None:
                return found
            self._entries[key] = fresh
            self._bytes += _size(fresh)
            while self._bytes > self.max_bytes and len(self._entries) > 1:
                _, old = self._entries.popitem(last=False)
                self._bytes -= _size(old)
            return fresh

    @property
    def nbytes(self) -> int:
        """Bytes held now."""
        return self._bytes

    def clear(self) -> None:
        """Drop every entry."""
        with self._lock:
            self._entries.clear()
            self._bytes = 0


def _size(entry: Decoded) -> int:
    return int(entry[0].nbytes + entry[1].nbytes)


row_groups = RowGroupCache(ROW_GROUP_CACHE_BYTES)
"""The process's cache (a forked worker starts with a copy of its parent's)."""
