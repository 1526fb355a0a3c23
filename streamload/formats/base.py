"""The shard protocol every format implements, and the picklable shard descriptor.

A :class:`ShardInfo` is what start-up learns about a shard from its listing entry and header:
path, size, dtype, where the tokens start and how many there are. It holds no open file, so
it pickles cheaply into worker processes, where :func:`open_shard` maps it lazily.
"""

from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass
from typing import Protocol

import numpy as np

from streamload.errors import FormatError

__all__ = [
    "MemmapShard",
    "ShardInfo",
    "TokenShard",
    "check_token_dtype",
    "local_path",
    "open_shard",
]


@dataclass(frozen=True)
class ShardInfo:
    """What is known about one shard without reading its tokens.

    Args:
        path: Full path or URL.
        relpath: Path relative to its source root (what the data fingerprint uses, so a
            corpus may move between folders or buckets).
        size: File size in bytes.
        format: Resolved format name (``npy``, ``raw``...).
        dtype: Token dtype as a numpy dtype string (byte order included, e.g. ``<u2``).
        offset: Byte offset of the first token.
        num_tokens: Token count.
    """

    path: str
    relpath: str
    size: int
    format: str
    dtype: str
    offset: int
    num_tokens: int


class TokenShard(Protocol):
    """An opened shard: a zero-copy view of its tokens."""

    info: ShardInfo

    def tokens(self, start: int, stop: int) -> np.ndarray:
        """Tokens ``[start, stop)`` as a zero-copy array (a memmap view for local files)."""
        ...

    def document_starts(self) -> np.ndarray | None:
        """Sorted token offsets where documents start, or ``None`` if the format has no index."""
        ...


def check_token_dtype(dtype: np.dtype, path: str) -> np.dtype:
    """Return ``dtype`` if it can hold token ids, else raise naming the file."""
    if dtype.kind not in "ui" or dtype.itemsize > 8:
        raise FormatError(f"{path}: dtype {dtype} cannot hold token ids; expected an integer dtype")
    return dtype


class MemmapShard:
    """A local shard mapped with ``numpy.memmap``: slicing is zero-copy."""

    def __init__(self, info: ShardInfo) -> None:
        self.info = info
        self._array = np.memmap(
            info.path,
            dtype=np.dtype(info.dtype),
            mode="r",
            offset=info.offset,
            shape=(info.num_tokens,),
        )

    def tokens(self, start: int, stop: int) -> np.ndarray:
        return self._array[start:stop]

    def document_starts(self) -> np.ndarray | None:
        return None


def local_path(path: str) -> str | None:
    """The local file system path of ``path``, or ``None`` when it is a remote URL."""
    if path.startswith("file://"):
        return path.removeprefix("file://")
    return None if "://" in path else path


def open_shard(info: ShardInfo) -> TokenShard:
    """Open a described shard for reading.

    Raises:
        FormatError: the file is remote (not readable yet), missing, or changed size since it
            was described.
    """
    local = local_path(info.path)
    if local is None:
        raise FormatError(
            f"{info.path}: reading token data from remote storage is not supported yet"
        )
    try:
        size = os.path.getsize(local)
    except OSError as exc:
        raise FormatError(f"{info.path}: cannot open shard: {exc}") from exc
    if size != info.size:
        raise FormatError(
            f"{info.path}: file is {size} bytes but was {info.size} bytes at start-up; "
            "the shard changed while the loader was running"
        )
    return MemmapShard(dataclasses.replace(info, path=local))
