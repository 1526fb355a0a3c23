"""Array and file views of remote objects, read by byte range through a :class:`RemoteStore`.

:class:`RemoteTokens` stands where a local shard has its ``numpy.memmap``: slicing it reads
exactly the blocks holding the slice, so every format's reader works unchanged on remote
shards. :class:`RemoteFile` is a read-only seekable file for readers that parse headers.
"""

from __future__ import annotations

import io
from typing import Any

import numpy as np

from streamload.remote.store import RemoteObject, RemoteStore

__all__ = ["RemoteFile", "RemoteTokens"]


class RemoteTokens:
    """A 1-D token array of a remote file: ``count`` items of ``dtype`` from byte ``offset``.

    Only contiguous slices are supported (``a[i:j]``, ``a[i]``); each is one exact byte-range
    piece (:meth:`RemoteStore.read`) returned as a read-only ``numpy`` array over its bytes.

    Args:
        store: The storage's store.
        obj: The remote file.
        dtype: Item dtype (byte order included).
        offset: Byte offset of item 0.
        count: Items.
    """

    ndim = 1

    def __init__(
        self, store: RemoteStore, obj: RemoteObject, dtype: Any, offset: int, count: int
    ) -> None:
        self.store = store
        self.obj = obj
        self.dtype = np.dtype(dtype)
        self.offset = offset
        self.count = count

    @property
    def shape(self) -> tuple[int]:
        """``(count,)``."""
        return (self.count,)

    def __len__(self) -> int:
        return self.count

    def byte_range(self, start: int, stop: int) -> tuple[int, int]:
        """Bytes of the file holding items ``[start, stop)``."""
        size = self.dtype.itemsize
        return self.offset + start * size, self.offset + stop * size

    def read_rows(self, starts: np.ndarray, length: int) -> list[Any]:
        """Items ``[starts[i], starts[i] + length)`` for every ``i`` (inside the array), read
        together: per row a read-only array, or the ``RemoteReadError`` that made it
        unreadable (:meth:`RemoteStore.read_many`)."""
        size = self.dtype.itemsize
        first = self.offset + np.asarray(starts, dtype=np.int64) * size
        got = self.store.read_many(self.obj, first, first + length * size)
        return [
            item if isinstance(item, Exception) else np.frombuffer(item, self.dtype) for item in got
        ]

    def __getitem__(self, key: slice | int) -> Any:
        if isinstance(key, slice):
            start, stop, step = key.indices(self.count)
            if step != 1:
                raise IndexError(f"{self.obj.url}: remote token arrays take contiguous slices")
            if stop <= start:
                return np.empty(0, dtype=self.dtype)
            return np.frombuffer(
                self.store.read(self.obj, *self.byte_range(start, stop)), self.dtype
            )
        index = int(key) + (self.count if int(key) < 0 else 0)
        if not 0 <= index < self.count:
            raise IndexError(f"index {key} out of range [0, {self.count})")
        return self[index : index + 1][0]


class RemoteFile(io.RawIOBase):
    """A read-only, seekable file over a remote object (header and index parsing).

    Args:
        store: The storage's store.
        obj: The remote file.
    """

    def __init__(self, store: RemoteStore, obj: RemoteObject) -> None:
        super().__init__()
        self.store = store
        self.obj = obj
        self._pos = 0

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return self._pos

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        base = {io.SEEK_SET: 0, io.SEEK_CUR: self._pos, io.SEEK_END: self.obj.size}[whence]
        self._pos = max(0, base + offset)
        return self._pos

    def read(self, size: int | None = -1) -> bytes:
        end = self.obj.size if size is None or size < 0 else min(self.obj.size, self._pos + size)
        if end <= self._pos:
            return b""
        data = bytes(self.store.read(self.obj, self._pos, end, aligned=True))
        self._pos = end
        return data

    def readinto(self, buffer: Any) -> int:
        data = self.read(len(buffer))
        buffer[: len(data)] = data
        return len(data)
