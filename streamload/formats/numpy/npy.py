"""Real NumPy ``.npy`` shards (``numpy.save`` output, KempnerForge shards): ``format = "numpy"``
(``"npy"``, its name before, is still accepted: :data:`~streamload.formats.base.FORMAT_ALIASES`).

The dtype comes from the header; the header is validated against the file size so a
truncated or padded file is refused rather than misread.
"""

from __future__ import annotations

import io
import struct
import threading
from typing import Any, BinaryIO

import numpy as np
from numpy.lib import format as npformat

from streamload.errors import FormatError
from streamload.formats._io_errors import is_parse_error
from streamload.formats.base import (
    ListedFile,
    MemmapShard,
    ReadOptions,
    ShardInfo,
    TokenShard,
    check_configured_dtype,
    check_token_dtype,
    open_head,
)

__all__ = ["FORMAT", "FORMAT_NAME", "NPY_MAGIC", "NpyFormat", "describe_npy", "write_npy"]

NPY_MAGIC = b"\x93NUMPY"
FORMAT_NAME = "numpy"
"""The format's one name: the registry key, ``format =`` in configs, ``convert --to``,
``tokenize --format`` and what ``inspect`` reports."""


_PARSE_LOCK = threading.Lock()
"""numpy parses an NPY header with ``ast.literal_eval``; on CPython before 3.11.8/3.12.3 the
conversion of its AST is not thread-safe (gh-106905: "AST constructor recursion depth
mismatch", seen once in 10,000 remote headers described on 16 threads). The header bytes are
read concurrently; only their parse takes this lock."""


def _read_header(fh: BinaryIO, path: str) -> tuple[tuple[int, ...], bool, np.dtype, int]:
    """(shape, Fortran order, dtype, data offset) of the NPY file ``fh`` at byte 0."""
    try:
        prefix = fh.read(8)  # magic, major and minor version
        version = npformat.read_magic(io.BytesIO(prefix))
        if version not in ((1, 0), (2, 0), (3, 0)):
            raise FormatError(f"{path}: NPY version {version} is not supported (1.0, 2.0, 3.0)")
        width = "<H" if version == (1, 0) else "<I"
        length = fh.read(struct.calcsize(width))
        (size,) = struct.unpack(width, length)
        header = io.BytesIO(prefix + length + fh.read(size))
        header.seek(len(prefix))
        with _PARSE_LOCK:
            if version == (1, 0):
                shape, fortran, dtype = npformat.read_array_header_1_0(header)
            else:
                shape, fortran, dtype = npformat.read_array_header_2_0(header)
    except FormatError:
        raise
    except Exception as exc:
        if not is_parse_error(exc):
            raise  # a failed read of a remote file: retried, not corruption (issue 36)
        raise FormatError(f"{path}: corrupt NPY header: {exc}") from exc
    return shape, fortran, dtype, header.tell()


def describe_npy(fh: BinaryIO, path: str, relpath: str, size: int, dtype: str) -> ShardInfo:
    """Describe an NPY shard from its open file and size.

    Args:
        fh: The file, positioned at byte 0.
        path: Its path (for messages).
        relpath: Path relative to the source root.
        size: File size in bytes.
        dtype: Configured dtype or ``"auto"``; when given it must match the header.

    Raises:
        FormatError: corrupt header, not 1-D, non-integer dtype, dtype mismatch, or a file
            size that disagrees with the header (truncated or trailing bytes).
    """
    shape, _fortran, np_dtype, offset = _read_header(fh, path)
    if np_dtype.hasobject:
        raise FormatError(f"{path}: NPY holds Python objects; expected integer tokens")
    check_token_dtype(np_dtype, path)
    if len(shape) != 1:
        raise FormatError(f"{path}: NPY shape {shape} is not 1-D; token shards are flat arrays")
    check_configured_dtype(dtype, np_dtype, path, f"NPY header says dtype {np_dtype.name}")
    (count,) = shape
    expected = offset + count * np_dtype.itemsize
    if size != expected:
        state = "truncated" if size < expected else "followed by trailing bytes"
        raise FormatError(
            f"{path}: NPY header says {count} tokens of {np_dtype.name} ({expected} bytes with "
            f"the header) but the file is {size} bytes; the file is {state}"
        )
    return ShardInfo(path, relpath, size, FORMAT_NAME, np_dtype.str, offset, count)


def write_npy(path: str, tokens: np.ndarray) -> None:
    """Write a 1-D token array as an NPY shard, atomically (temporary name, then rename)."""
    from streamload.util.files import atomic_output

    with atomic_output(path) as tmp, open(tmp, "wb") as fh:
        np.save(fh, np.ascontiguousarray(tokens).reshape(-1))


class NpyFormat:
    """Files that start with the ``\\x93NUMPY`` magic."""

    name = FORMAT_NAME
    has_documents = False

    def sniff(self, path: str, head: bytes, siblings: frozenset[str]) -> bool:
        return head.startswith(NPY_MAGIC)

    def describe(self, fs: Any, file: ListedFile, options: ReadOptions) -> ShardInfo:
        with open_head(fs, file.path) as fh:
            if fh.read(len(NPY_MAGIC)) != NPY_MAGIC:
                raise FormatError(
                    f"{file.path}: format = 'numpy' but the file has no NPY magic (\\x93NUMPY); "
                    "it is a headerless dump: use format = 'raw' with a dtype"
                )
            fh.seek(0)
            return describe_npy(fh, file.path, file.relpath, file.size, options.dtype)

    def open(self, info: ShardInfo) -> TokenShard:
        return MemmapShard(info)


FORMAT = NpyFormat()
