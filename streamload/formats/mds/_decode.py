"""Decode the token column of one (uncompressed) MDS shard into a contiguous token array.

Shard layout (FORMATS §8): ``u32 n``, ``u32 offsets[n + 1]`` (absolute byte offsets of the
samples; the shard's JSON config fills the gap before ``offsets[0]``), then the samples. A
sample is a ``u32`` size for each variable-size column, then every column's bytes, in the
index's column order. The token column's values are therefore scattered: one run per sample,
between other columns and headers. This module finds every run with vectorized reads of the
headers, checks each against the sizes (a damaged shard is refused, naming the sample), and
copies the runs into one array; document ``i`` is sample ``i``.

Example: columns ``id: str`` and ``tokens: ndarray:uint16``, sample ``02000000 0a000000 "d0"
04 04 0700 0800 0900 0000``: sizes 2 and 10, ``id`` = "d0", then the token column: byte
``0x04`` is ``ndim 1 << 2 | shape width code 0`` (u8), shape ``[4]``, four uint16 values.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from streamload.errors import FormatError
from streamload.formats._mds_index import MdsShardEntry
from streamload.formats.base import check_configured_dtype
from streamload.formats.mds._column import NDARRAY_DTYPE_CODES, TokenColumn

__all__ = ["DecodedShard", "column_spans", "decode_shard", "sample_offsets"]


@dataclass(frozen=True)
class DecodedShard:
    """A shard's tokens (contiguous, little-endian) and document bounds (int64, n + 1)."""

    tokens: np.ndarray
    bounds: np.ndarray


def _u32(buf: np.ndarray, starts: np.ndarray, count: int) -> np.ndarray:
    """``count`` little-endian u32 at each of ``starts`` (an ``(n, count)`` int64 array)."""
    idx = starts[:, None] + np.arange(4 * count)
    return np.ascontiguousarray(buf[idx]).view("<u4").astype(np.int64)


def sample_offsets(buf: np.ndarray, entry: MdsShardEntry, where: str) -> np.ndarray:
    size = buf.size
    if size < 4:
        raise FormatError(f"{where}: {size} bytes; an MDS shard starts with a u32 sample count")
    count = int(buf[:4].view("<u4")[0])
    if count != entry.samples:
        raise FormatError(
            f"{where}: header says {count} samples but index.json says {entry.samples}; the "
            "shard or the index comes from another run"
        )
    end = 4 * (count + 2)
    if size < end:
        raise FormatError(f"{where}: {size} bytes end inside the {end}-byte offset table")
    offsets = buf[4:end].view("<u4").astype(np.int64)
    lengths = np.diff(offsets)
    if offsets[0] < end or (lengths < 0).any():
        raise FormatError(
            f"{where}: sample offsets start at {offsets[0]} (after byte {end}) and must not "
            "decrease; the shard is damaged"
        )
    if offsets[-1] != size:
        state = "truncated" if offsets[-1] > size else "followed by trailing bytes"
        raise FormatError(
            f"{where}: its samples end at byte {offsets[-1]} but the shard is {size} bytes; "
            f"it is {state}"
        )
    return offsets


def column_spans(
    buf: np.ndarray, offsets: np.ndarray, entry: MdsShardEntry, position: int, where: str
) -> tuple[np.ndarray, np.ndarray]:
    """(start, size) in bytes of column ``position`` in every sample."""
    starts, lengths = offsets[:-1], np.diff(offsets)
    variable = [i for i, s in enumerate(entry.sizes) if s is None]
    head = 4 * len(variable)
    short = np.flatnonzero(lengths < head)
    if short.size:
        raise FormatError(f"{where}: sample {short[0]} is shorter than its {head}-byte sizes")
    sizes = np.empty((starts.size, len(entry.sizes)), dtype=np.int64)
    for i, fixed in enumerate(entry.sizes):
        if fixed is not None:
            sizes[:, i] = fixed
    if variable:
        sizes[:, variable] = _u32(buf, starts, len(variable))
    bad = np.flatnonzero(head + sizes.sum(axis=1) != lengths)
    if bad.size:
        k = int(bad[0])
        raise FormatError(
            f"{where}: sample {k} is {lengths[k]} bytes but its column sizes add up to "
            f"{head + int(sizes[k].sum())}; the shard is damaged"
        )
    return starts + head + sizes[:, :position].sum(axis=1), sizes[:, position]


def _any_dtype(buf: np.ndarray, starts: np.ndarray, col: TokenColumn, where: str) -> np.dtype:
    codes = np.unique(buf[starts])
    if codes.size != 1 or int(codes[0]) not in NDARRAY_DTYPE_CODES:
        raise FormatError(
            f"{where}: column {col.name!r} (ndarray) holds value dtype codes "
            f"{codes.tolist()}; expected one integer dtype for every sample"
        )
    dtype = np.dtype(NDARRAY_DTYPE_CODES[int(codes[0])])
    configured = "auto" if col.dtype is None else col.dtype.name
    check_configured_dtype(
        configured, dtype, where, f"column {col.name!r} holds {dtype.name} tokens"
    )
    return dtype


def _shape_counts(
    buf: np.ndarray, starts: np.ndarray, sizes: np.ndarray, col: TokenColumn, where: str
) -> tuple[np.ndarray, ...]:
    """(values start, value count) of an ``NDArray`` shape header at each of ``starts``, in
    columns of ``sizes`` bytes (the dtype byte of ``ndarray`` included); a header that runs
    past its column is refused before it is read."""
    code = buf[starts].astype(np.int64)
    ndim, width = code >> 2, 1 << (code & 3)
    if (ndim == 0).any():
        raise FormatError(f"{where}: sample {np.flatnonzero(ndim == 0)[0]} has a 0-D array")
    need = (col.kind == "any") + 1 + ndim * width  # dtype byte, ndim/width byte, shape
    short = np.flatnonzero(sizes < need)
    if short.size:
        k = int(short[0])
        raise FormatError(
            f"{where}: sample {k}'s column {col.name!r} ({col.encoding}) is {sizes[k]} bytes, "
            f"shorter than the {need[k]}-byte header it starts with ({ndim[k]} dimensions of "
            f"{width[k]} bytes); the shard is damaged"
        )
    counts = np.empty(starts.size, dtype=np.int64)
    for w in (1, 2, 4, 8):
        rows = np.flatnonzero((width == w) & (ndim == 1))
        idx = starts[rows, None] + 1 + np.arange(w)
        counts[rows] = np.ascontiguousarray(buf[idx]).view(f"<u{w}").astype(np.int64).ravel()
    for row in np.flatnonzero(ndim != 1):  # rare: a multi-dimensional array per sample
        w, lo = int(width[row]), int(starts[row]) + 1
        dims = buf[lo : lo + w * int(ndim[row])].view(f"<u{w}")
        counts[row] = int(np.prod(dims.astype(np.int64)))
    return starts + 1 + ndim * width, counts


def _values(
    buf: np.ndarray, starts: np.ndarray, sizes: np.ndarray, col: TokenColumn, where: str
) -> tuple[np.ndarray, np.ndarray, np.dtype]:
    """(values start, token count, dtype) of the column in every sample."""
    if col.kind in ("ndarray", "any") and (sizes < 1 + (col.kind == "any")).any():
        raise FormatError(f"{where}: column {col.name!r} is empty in some sample (no header)")
    if col.kind == "any":
        dtype = _any_dtype(buf, starts, col, where)
        starts = starts + 1
    else:
        assert col.dtype is not None  # set for every kind but "any" (_mds_column)
        dtype = col.dtype
    if col.kind == "bytes":
        values, counts = starts, sizes // dtype.itemsize
    elif col.kind == "fixed":
        values, counts = starts, np.full(starts.size, int(np.prod(col.shape or ())), dtype=np.int64)
    else:
        values, counts = _shape_counts(buf, starts, sizes, col, where)
    ends = starts - (col.kind == "any") + sizes
    bad = np.flatnonzero((counts < 0) | (values + counts * dtype.itemsize != ends))
    if bad.size:
        k = int(bad[0])
        raise FormatError(
            f"{where}: sample {k}'s column {col.name!r} ({col.encoding}) is {sizes[k]} bytes, "
            f"which is not a whole {dtype.name} array as its header says; the shard is damaged"
        )
    return values, counts, dtype


def decode_shard(data: Any, entry: MdsShardEntry, col: TokenColumn, where: str) -> DecodedShard:
    """The token column of the uncompressed shard ``data`` (a bytes-like object).

    Raises:
        FormatError: a header, offset or size that disagrees with the index or the file.
    """
    buf = np.frombuffer(data, dtype=np.uint8)
    offsets = sample_offsets(buf, entry, where)
    starts, sizes = column_spans(buf, offsets, entry, col.position, where)
    values, counts, dtype = _values(buf, starts, sizes, col, where)
    nbytes = counts * dtype.itemsize
    out = np.empty(int(nbytes.sum()), dtype=np.uint8)
    at = 0
    for lo, n in zip(values.tolist(), nbytes.tolist(), strict=True):
        out[at : at + n] = buf[lo : lo + n]
        at += n
    bounds = np.zeros(counts.size + 1, dtype=np.int64)
    np.cumsum(counts, out=bounds[1:])
    return DecodedShard(out.view(dtype), bounds)
