"""The bytes of an MDS shard file, and its decompression (``zstd`` or ``gz``).

A shard is read whole: its token column is scattered through it (``_mds_decode``), and a
compressed shard is one compressed stream. Local files are memory-mapped (no copy); remote
ones are read through their file system (at describe time) or their storage handle (at open,
when the decoded cache has lost them).
"""

from __future__ import annotations

import contextlib
import gzip
import hashlib
import mmap
import zlib
from typing import Any

from streamload.errors import FormatError
from streamload.formats.base import ShardInfo, local_path, open_token_file

__all__ = ["ZSTD_MAGIC", "content_sha256", "decompress", "read_listed", "read_opened"]

ZSTD_MAGIC = b"\x28\xb5\x2f\xfd"
GZIP_MAGIC = b"\x1f\x8b"


def read_listed(fs: Any, path: str, size: int) -> Any:
    """All ``size`` bytes of ``path``: a read-only ``mmap`` locally, else bytes from ``fs``.

    Raises:
        FormatError: the file holds another number of bytes than listed.
    """
    local = local_path(path)
    if local is not None:
        with open(local, "rb") as fh:
            data: Any = mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ) if size else b""
    else:
        data = fs.cat_file(path)
    if len(data) != size:
        raise FormatError(f"{path}: {len(data)} bytes read but listed as {size}; it changed")
    return data


def read_opened(info: ShardInfo) -> bytes:
    """All bytes of a described shard (checked unchanged in size; by range when remote)."""
    with contextlib.closing(open_token_file(info)) as fh:
        data = fh.read()
    if len(data) != info.size:
        raise FormatError(f"{info.path}: {len(data)} bytes, {info.size} at start-up; it changed")
    return data


def content_sha256(data: Any) -> str:
    """sha256 of the file's bytes (the key of its decoded tokens)."""
    return hashlib.sha256(data).hexdigest()


def _zstd(data: Any, size: int, where: str) -> bytes:
    try:
        import zstandard
    except ImportError:
        raise FormatError(
            f"{where}: a zstd-compressed MDS shard needs the zstandard package "
            "(pip install zstandard)"
        ) from None
    try:
        return zstandard.ZstdDecompressor().decompress(bytes(data), max_output_size=size)
    except zstandard.ZstdError as exc:
        raise FormatError(f"{where}: corrupt zstd stream: {exc}") from None


def decompress(data: Any, algorithm: str, size: int, where: str) -> bytes:
    """The ``size`` bytes of shard ``data`` compressed with ``algorithm`` (``zstd``, ``gz``).

    Raises:
        FormatError: the stream is corrupt or truncated, or decompresses to another size than
            the index's ``raw_data.bytes``.
    """
    if algorithm == "zstd":
        raw = _zstd(data, size, where)
    else:
        try:
            raw = gzip.decompress(bytes(data))
        except (OSError, EOFError, zlib.error) as exc:
            raise FormatError(f"{where}: corrupt or truncated gzip stream: {exc}") from None
    if len(raw) != size:
        raise FormatError(
            f"{where}: decompresses to {len(raw)} bytes but index.json says raw_data.bytes "
            f"{size}; the file or the index is damaged"
        )
    return raw
