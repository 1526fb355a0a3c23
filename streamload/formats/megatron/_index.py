"""The Megatron ``.idx`` ("MMIDIDX") index: parse, validate, write (FORMATS §1.2-§1.8).

Layout (little-endian; the arrays start at byte 34, so they are unaligned)::

    0   9    magic b"MMIDIDX\\x00\\x00"
    9   u64  version = 1
    17  u8   dtype code of the .bin tokens
    18  u64  S  sequences
    26  u64  D  document_indices entries (documents + 1)
    34  i32[S] sequence_lengths (tokens)     34+4S  i64[S] sequence_pointers (bytes)
    34+12S  i64[D] document_indices         34+12S+8D  i8[S] sequence_modes (multimodal only)

Worked example (``tiny_text_document``: uint16 documents ``[10,11,12,0] [20,21,0]
[30..34,0]``): code 8, S = 3, D = 4, lengths ``[4,3,6]``, pointers ``[0,8,14]``,
document_indices ``[0,1,2,3]``; 34 + 12·3 + 8·4 = 102 bytes; the ``.bin`` is 26 bytes.

fairseq writes the same magic with no document count and no document index
(``26 + 12·S`` bytes; codes 9/10 are uint32/uint64 there): read as one document per sequence.
The two size formulas never coincide, so the file size tells the layouts apart.
"""

from __future__ import annotations

import os
import struct
import warnings
from dataclasses import dataclass
from typing import Any

import numpy as np

from streamload.errors import ConfigError, FormatError
from streamload.formats.base import local_path

__all__ = [
    "FAIRSEQ_HEADER_BYTES",
    "HEADER_BYTES",
    "MAGIC",
    "TNTIDX_MAGIC",
    "IndexHeader",
    "MegatronIndex",
    "code_of_dtype",
    "load_buffer",
    "map_index",
    "parse_header",
    "read_index",
    "validate_index",
    "write_index",
]

MAGIC = b"MMIDIDX\x00\x00"
TNTIDX_MAGIC = b"TNTIDX\x00\x00"
HEADER_BYTES = 34
FAIRSEQ_HEADER_BYTES = 26

_CODES = {1: "u1", 2: "i1", 3: "i2", 4: "i4", 5: "i8", 8: "u2"}
"""Integer dtype codes shared by megatron-core, legacy Megatron-LM and fairseq."""
_FAIRSEQ_CODES = {9: "u4", 10: "u8"}
_VALIDATE_BLOCK = 1 << 22
"""Sequences checked per vectorized block (bounds the temporary memory on huge indexes)."""


def code_of_dtype(dtype: np.dtype) -> int:
    """The Megatron dtype code of an integer token dtype.

    Raises:
        ConfigError: megatron-core has no integer code for it (uint32, uint64, floats).
    """
    for code, name in _CODES.items():
        if np.dtype(name) == dtype.newbyteorder("="):
            return code
    raise ConfigError(
        f"dtype {dtype} has no megatron-core code; token files use uint16 (vocab < 65500) or "
        "int32 (also uint8, int8, int16, int64)"
    )


@dataclass(frozen=True)
class IndexHeader:
    """The fixed header of an ``.idx`` and the layout its size implies.

    Attributes:
        layout: ``"megatron"`` or ``"fairseq"`` (no document section).
        dtype_code: The code byte.
        dtype: Little-endian token dtype.
        sequences: S.
        document_entries: D (``len(document_indices)``); 0 for fairseq.
        multimodal: The file ends with ``sequence_modes``.
        size: Index file size in bytes.
    """

    layout: str
    dtype_code: int
    dtype: np.dtype
    sequences: int
    document_entries: int
    multimodal: bool
    size: int

    @property
    def lengths_offset(self) -> int:
        """Byte offset of ``sequence_lengths``."""
        return FAIRSEQ_HEADER_BYTES if self.layout == "fairseq" else HEADER_BYTES

    @property
    def documents_offset(self) -> int:
        """Byte offset of ``document_indices`` (also where fairseq's file ends)."""
        return self.lengths_offset + 12 * self.sequences


def _truncated(path: str, size: int, need: int) -> FormatError:
    return FormatError(
        f"{path}: Megatron index is {size} bytes, shorter than its {need}-byte header; "
        "the file is truncated"
    )


def _check_magic(head: bytes, size: int, path: str) -> None:
    if head[:8] == TNTIDX_MAGIC:
        raise FormatError(
            f"{path}: magic TNTIDX is the lazy/cached IndexedDataset, not supported: convert it "
            "with Megatron's tools to the mmap (MMIDIDX) format"
        )
    if head[:9] != MAGIC:
        hint = " (a pickle: a Modalities JSONL index?)" if head[:1] == b"\x80" else ""
        if size < len(MAGIC) and MAGIC.startswith(head):
            raise _truncated(path, size, HEADER_BYTES)
        raise FormatError(
            f"{path}: starts with {head[:9]!r}{hint}, expected the Megatron index magic "
            f"{MAGIC!r}; not a Megatron .idx"
        )


def _dtype(layout: str, code: int, path: str) -> np.dtype:
    name = _CODES.get(code) or (_FAIRSEQ_CODES.get(code) if layout == "fairseq" else None)
    if name is not None:
        return np.dtype("<" + name)
    if code == 7:
        why = "dtype code 7 is float32 in megatron-core but float64 in legacy Megatron-LM/fairseq"
        raise FormatError(f"{path}: {why} (ambiguous); floats cannot hold token ids either way")
    if code == 6:
        raise FormatError(f"{path}: dtype code 6 is float64, which cannot hold token ids")
    if code in _FAIRSEQ_CODES:
        raise FormatError(
            f"{path}: dtype code {code} ({_FAIRSEQ_CODES[code]}) exists only in fairseq's index, "
            "but this file has Megatron's document section; megatron-core cannot read it either"
        )
    raise FormatError(f"{path}: dtype code {code} is not a Megatron token dtype (1-5, 8)")


def parse_header(head: bytes, size: int, path: str) -> IndexHeader:
    """Parse the header of an ``.idx`` of ``size`` bytes whose first bytes are ``head``.

    Args:
        head: At least the first 34 bytes (fewer only when the file is shorter).
        size: The index file size.
        path: For messages.

    Raises:
        FormatError: TNTIDX, wrong magic or version, truncated, a size that matches neither
            layout, or a dtype code that cannot hold tokens.
    """
    _check_magic(head, size, path)
    if size < FAIRSEQ_HEADER_BYTES:
        raise _truncated(path, size, HEADER_BYTES)
    (version,) = struct.unpack_from("<Q", head, 9)
    if version != 1:
        raise FormatError(f"{path}: index version is {version}, expected 1")
    code, seqs = head[17], struct.unpack_from("<Q", head, 18)[0]
    if size == FAIRSEQ_HEADER_BYTES + 12 * seqs:
        return IndexHeader("fairseq", code, _dtype("fairseq", code, path), seqs, 0, False, size)
    if size < HEADER_BYTES:
        raise _truncated(path, size, HEADER_BYTES)
    (docs,) = struct.unpack_from("<Q", head, 26)
    expected = HEADER_BYTES + 12 * seqs + 8 * docs
    multimodal = seqs > 0 and size == expected + seqs
    if size != expected and not multimodal:
        raise FormatError(
            f"{path}: index is {size} bytes but its header says {seqs} sequences and {docs} "
            f"document_indices, so it should be 34 + 12·{seqs} + 8·{docs} = {expected} bytes "
            f"(or {expected + seqs} multimodal); the file is truncated or corrupt"
        )
    return IndexHeader(
        "megatron", code, _dtype("megatron", code, path), seqs, docs, multimodal, size
    )


@dataclass(frozen=True)
class MegatronIndex:
    """Zero-copy views of an index's arrays (over a memmap or bytes).

    Attributes:
        header: The parsed header.
        lengths: ``sequence_lengths`` (int32, S).
        pointers: ``sequence_pointers`` (int64 byte offsets, S).
        document_indices: int64, D; ``None`` for fairseq.
        modes: ``sequence_modes`` (int8, S) when multimodal, else ``None``.
    """

    header: IndexHeader
    lengths: np.ndarray
    pointers: np.ndarray
    document_indices: np.ndarray | None
    modes: np.ndarray | None


def map_index(buffer: Any, path: str) -> MegatronIndex:
    """Parse the header of ``buffer`` (the whole ``.idx``) and view its arrays, unchecked."""
    size = len(buffer)
    header = parse_header(bytes(buffer[:HEADER_BYTES]), size, path)
    s, at = header.sequences, header.lengths_offset
    lengths = np.frombuffer(buffer, dtype="<i4", count=s, offset=at)
    pointers = np.frombuffer(buffer, dtype="<i8", count=s, offset=at + 4 * s)
    docs = modes = None
    if header.layout == "megatron":
        d, at = header.document_entries, header.documents_offset
        docs = np.frombuffer(buffer, dtype="<i8", count=d, offset=at)
        if header.multimodal:
            modes = np.frombuffer(buffer, dtype="<i1", count=s, offset=at + 8 * d)
    return MegatronIndex(header, lengths, pointers, docs, modes)


def _first(mask: np.ndarray) -> int:
    return int(np.flatnonzero(mask)[0])


def _check_sequences(index: MegatronIndex, path: str, block: int) -> int:
    """Check lengths >= 0 and pointers = running byte sum; return the end byte."""
    itemsize = index.header.dtype.itemsize
    end = 0
    for start in range(0, index.header.sequences, block):
        lengths = index.lengths[start : start + block].astype(np.int64)
        if lengths.min() < 0:
            i = start + _first(lengths < 0)
            raise FormatError(f"{path}: sequence_lengths[{i}] = {index.lengths[i]}, expected >= 0")
        ends = end + np.cumsum(lengths * itemsize)
        starts = ends - lengths * itemsize
        bad = index.pointers[start : start + block] != starts
        if bad.any():
            i = _first(bad)
            raise FormatError(
                f"{path}: sequence_pointers[{start + i}] = {index.pointers[start + i]} but the "
                f"lengths before it end at byte {starts[i]}; pointers must be the running sum "
                "of lengths × itemsize (the index is corrupt)"
            )
        end = int(ends[-1])
    return end


def _documents_complete(docs: np.ndarray, sequences: int, path: str, block: int) -> bool:
    """Check ``document_indices``; ``False`` for a legacy merge that dropped its entries."""
    if docs.shape[0] == 0:
        raise FormatError(f"{path}: document_indices is empty, expected at least [0]")
    if docs[0] != 0:
        raise FormatError(f"{path}: document_indices[0] = {docs[0]}, expected 0")
    for start in range(0, docs.shape[0], block):
        part = docs[max(start - 1, 0) : start + block]
        steps = np.diff(part)
        if steps.size and steps.min() < 0:
            i = max(start - 1, 0) + _first(steps < 0) + 1
            raise FormatError(
                f"{path}: document_indices[{i}] = {docs[i]} < document_indices[{i - 1}] = "
                f"{docs[i - 1]}; document_indices must be non-decreasing"
            )
    last = int(docs[-1])
    if last > sequences:
        raise FormatError(
            f"{path}: document_indices ends at {last} but there are only {sequences} sequences"
        )
    return last == sequences


def validate_index(
    index: MegatronIndex, bin_size: int, path: str, bin_path: str, block: int = _VALIDATE_BLOCK
) -> bool:
    """Check the arrays against each other and the ``.bin`` size (FORMATS §1.8).

    Vectorized in blocks of ``block`` sequences, so temporary memory stays bounded on
    indexes of 10^8+ sequences.

    Returns:
        Whether ``document_indices`` is complete; ``False`` (fairseq, or a legacy merge whose
        last entry is below S) means one document per sequence.

    Raises:
        FormatError: negative lengths, pointers not the running sum, a ``.bin`` whose size is
            not the end of the last sequence, or a malformed document index.
    """
    end = _check_sequences(index, path, block)
    if end != bin_size:
        state = "truncated" if bin_size < end else "followed by bytes no sequence covers"
        raise FormatError(
            f"{bin_path}: file is {bin_size} bytes but {path} says its "
            f"{index.header.sequences} sequences end at byte {end}; the .bin is {state}, or the "
            ".idx belongs to another .bin"
        )
    if index.document_indices is None:
        return False
    return _documents_complete(index.document_indices, index.header.sequences, path, block)


def write_index(
    path: str,
    dtype: np.dtype,
    lengths: np.ndarray,
    document_indices: np.ndarray,
    modes: np.ndarray | None,
) -> None:
    """Write an ``.idx`` exactly as megatron-core's ``_IndexWriter`` does.

    Args:
        path: Output file (written in place; callers write to a temporary name).
        dtype: Token dtype (its code goes in the header).
        lengths: Tokens per sequence.
        document_indices: Starting sequence of each document plus the final S.
        modes: Per-sequence modes for a multimodal index, else ``None``.
    """
    lengths = np.asarray(lengths, dtype="<i4")
    pointers = np.zeros(lengths.shape[0], dtype="<i8")
    np.cumsum(lengths[:-1], dtype=np.int64, out=pointers[1:])
    pointers *= dtype.itemsize
    header = struct.pack("<QBQQ", 1, code_of_dtype(dtype), lengths.shape[0], len(document_indices))
    with open(path, "wb") as fh:
        fh.write(MAGIC + header)
        fh.write(lengths.tobytes())
        fh.write(pointers.tobytes())
        fh.write(np.asarray(document_indices, dtype="<i8").tobytes())
        if modes is not None:
            fh.write(np.asarray(modes, dtype="<i1").tobytes())


def load_buffer(path: str, fs: Any = None) -> Any:
    """The whole index as a buffer: a read-only memmap when local, else its bytes."""
    local = local_path(path)
    try:
        if local is None:
            return fs.cat_file(path)
        if os.path.getsize(local) == 0:
            return b""
        return np.memmap(local, dtype=np.uint8, mode="r")
    except (FileNotFoundError, IsADirectoryError) as exc:
        raise FormatError(
            f"{path}: the Megatron index is missing ({exc.__class__.__name__}); a dataset "
            "prefix needs both its .bin and its .idx"
        ) from exc


def read_index(idx_path: str, bin_size: int, *, fs: Any = None) -> tuple[MegatronIndex, bool]:
    """Read and fully validate an ``.idx`` against the size of its ``.bin``.

    Args:
        idx_path: The ``.idx`` path or URL.
        bin_size: Size of the matching ``.bin`` in bytes.
        fs: fsspec file system for remote paths.

    Returns:
        The index views, and whether its document index is complete (``False``: fairseq or a
        legacy merge, read as one document per sequence; a legacy merge also warns).

    Raises:
        FormatError: missing, TNTIDX, corrupt, or inconsistent with the ``.bin``.
    """
    index = map_index(load_buffer(idx_path, fs), idx_path)
    bin_path = idx_path[: -len(".idx")] + ".bin"
    complete = validate_index(index, bin_size, idx_path, bin_path)
    if not complete and index.document_indices is not None:
        warnings.warn(
            f"{idx_path}: document_indices ends at sequence {int(index.document_indices[-1])} "
            f"of {index.header.sequences}: a legacy merge (Megatron-LM merge_file_ <= 2021, "
            "NeMo) dropped the document index; reading one document per sequence",
            UserWarning,
            stacklevel=2,
        )
    return index, complete
