"""Modalities packed ``.pbin`` files (``modalities data pack_encoded_data``, FORMATS §3.2).

Layout: ``u64 data_len`` (bytes) and ``u32 token_size`` ∈ {1, 2, 4}, the data segment of
``data_len`` bytes (little-endian unsigned tokens, documents back to back) from byte 12, then
``pickle.dumps([(byte_offset, byte_length), …])``: one pair per document, offsets relative to
the data segment. The pickle is decoded by :mod:`._pickle_subset`, never by :mod:`pickle`.

The index must tile the data segment: document i+1 starts where document i ends, the first
at 0, the last ends at ``data_len``, each a whole number of tokens. One exception is
repaired: ``modalities data merge_packed_data`` shifts the offsets of the k-th merged file by
``-12·k`` bytes (FORMATS §3.3), which shows as jumps of ``-12`` (or ``-12·j`` where inputs
held no documents) at file boundaries; the reader adds them back with a warning.

Example (FORMATS §3.2, ``docs.pbin``): ``data_len = 30``, ``token_size = 2``, index
``[(0, 8), (8, 6), (14, 12), (26, 4)]`` → document bounds in tokens ``[0, 4, 7, 13, 15]``.
"""

from __future__ import annotations

import contextlib
import os
import struct
import warnings
from array import array
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, BinaryIO

import numpy as np

from streamload.errors import FormatError
from streamload.formats._pickle_subset import decode_pairs, encode_pairs
from streamload.formats._stack_writer import StackWriter
from streamload.formats._writer_input import as_document
from streamload.formats.base import (
    ListedFile,
    MemmapShard,
    ReadOptions,
    ShardInfo,
    TokenShard,
    check_configured_dtype,
    open_head,
    open_token_file,
)
from streamload.util.files import atomic_output

__all__ = [
    "FORMAT",
    "HEADER_SIZE",
    "MERGE_SHIFT",
    "ModalitiesFormat",
    "ModalitiesShard",
    "ModalitiesWriter",
    "PbinLayout",
    "merge_pbin",
    "read_pbin_layout",
    "token_size_for_vocab",
]

HEADER_SIZE = 12
"""``u64 data_len`` + ``u32 token_size``."""
MERGE_SHIFT = 12
"""Bytes ``merge_packed_data`` wrongly subtracts per merged file (its header size)."""
TOKEN_DTYPES: dict[int, np.dtype] = {1: np.dtype("u1"), 2: np.dtype("<u2"), 4: np.dtype("<u4")}
_COPY_CHUNK = 1 << 24
_ITEM_BYTES = 23  # most pickle bytes per document: two 10-byte LONG1, TUPLE2, MEMOIZE, batching


def token_size_for_vocab(vocab_size: int) -> int:
    """Bytes per token modalities ≥ 0.4 picks: ``ceil(log2(vocab) / 8)`` → 1, 2 or 4."""
    if vocab_size < 1:
        raise ValueError(f"vocab_size = {vocab_size} must be positive")
    needed = (max(vocab_size - 1, 0).bit_length() + 7) // 8  # ceil(log2(vocab) / 8) exactly
    if needed > 4:
        raise ValueError(f"vocab_size = {vocab_size} needs more than 4 bytes per token")
    return needed if needed in (1, 2) else 4


@dataclass(frozen=True)
class PbinLayout:
    """A validated ``.pbin``: header fields and document bounds.

    Attributes:
        data_len: Data segment length in bytes.
        token_size: Bytes per token.
        bounds: Document bounds in bytes relative to the data segment, int64 ``[n + 1]``
            (document i is ``[bounds[i], bounds[i+1])``), after any repair.
        repairs: Number of ``-12`` byte shifts repaired (0 for a sound file).
    """

    data_len: int
    token_size: int
    bounds: np.ndarray
    repairs: int

    @property
    def index_offset(self) -> int:
        """File offset of the pickled index."""
        return HEADER_SIZE + self.data_len


def _read_header(fh: BinaryIO, path: str, size: int) -> tuple[int, int]:
    head = fh.read(HEADER_SIZE)
    if len(head) < HEADER_SIZE:
        raise FormatError(
            f"{path}: file is {size} bytes, shorter than the {HEADER_SIZE}-byte .pbin header "
            "(u64 data_len, u32 token_size); it is truncated or not a modalities .pbin"
        )
    data_len, token_size = struct.unpack("<QI", head)
    if token_size not in TOKEN_DTYPES:
        raise FormatError(
            f"{path}: header token_size = {token_size} at byte 8; expected 1, 2 or 4 bytes"
        )
    if HEADER_SIZE + data_len >= size:
        raise FormatError(
            f"{path}: header data_len = {data_len} bytes needs at least "
            f"{HEADER_SIZE + data_len + 1} bytes with the header and the pickled index, but "
            f"the file is {size} bytes; it is truncated or not a modalities .pbin"
        )
    if data_len % token_size:
        raise FormatError(
            f"{path}: header data_len = {data_len} is not a multiple of token_size = "
            f"{token_size}; the header is corrupt"
        )
    return data_len, token_size


def _merge_repair(offsets: np.ndarray, ends: np.ndarray, data_len: int) -> np.ndarray | None:
    """Offsets with the merge defect undone, or ``None`` if the jumps are not that defect."""
    jump = offsets - np.concatenate([[0], ends[:-1]])
    if (jump > 0).any() or (jump % MERGE_SHIFT).any():
        return None
    shift = np.cumsum(-jump)
    if int(ends[-1] + shift[-1]) != data_len:
        return None
    return offsets + shift


def _check_index(pairs: np.ndarray, data_len: int, token_size: int, path: str) -> PbinLayout:
    """Validate the (offset, length) pairs against the header; repair the merge defect."""
    where = f"{path}: document index"
    offsets, lengths = pairs[:, 0], pairs[:, 1]
    if pairs.shape[0] == 0:
        if data_len:
            raise FormatError(f"{where} is empty but data_len = {data_len} bytes")
        return PbinLayout(data_len, token_size, np.zeros(1, dtype=np.int64), 0)
    bad = np.flatnonzero((lengths < 0) | (lengths % token_size != 0))
    if bad.size:
        i = int(bad[0])
        raise FormatError(
            f"{where}: document {i} has byte length {int(lengths[i])}; expected a non-negative "
            f"multiple of token_size = {token_size}"
        )
    ends = offsets + lengths
    repairs = 0
    if offsets[0] != 0 or (offsets[1:] != ends[:-1]).any() or ends[-1] != data_len:
        repaired = _merge_repair(offsets, ends, data_len)
        if repaired is None:
            raise FormatError(_contiguity_message(where, offsets, ends, data_len))
        repairs = int((repaired - offsets)[-1]) // MERGE_SHIFT
        offsets = repaired
        warnings.warn(
            f"{path}: its document index has the modalities merge_packed_data defect (FORMATS "
            f"§3.3: the offsets of the k-th merged file are {MERGE_SHIFT}·k bytes too low, here "
            f"for {repairs} merged file(s) after the first); repaired by adding them back",
            stacklevel=3,
        )
    bounds = np.concatenate([offsets, [data_len]]).astype(np.int64)
    return PbinLayout(data_len, token_size, bounds, repairs)


def _contiguity_message(where: str, offsets: np.ndarray, ends: np.ndarray, data_len: int) -> str:
    starts = np.concatenate([[0], ends[:-1]])
    wrong = np.flatnonzero(offsets != starts)
    if wrong.size:
        i = int(wrong[0])
        kind = "overlaps the previous one" if offsets[i] < starts[i] else "leaves a gap"
        return (
            f"{where}: document {i} starts at byte {int(offsets[i])} but "
            f"{'the data segment starts' if i == 0 else f'document {i - 1} ends'} at byte "
            f"{int(starts[i])}; it {kind} (expected contiguous documents)"
        )
    return (
        f"{where}: documents end at byte {int(ends[-1])} but header data_len = {data_len}; "
        "the index does not cover the data segment"
    )


def read_pbin_layout(fh: BinaryIO, path: str, size: int) -> PbinLayout:
    """Read and validate the header and the index of an open ``.pbin`` of ``size`` bytes.

    Raises:
        FormatError: bad header, truncated file, a corrupt or unsafe pickle, or an index that
            does not tile the data segment (after repairing the merge defect, with a warning).
    """
    data_len, token_size = _read_header(fh, path, size)
    index_size = size - HEADER_SIZE - data_len
    most = data_len // token_size  # documents hold at least one token each (the EOD)
    if index_size > _ITEM_BYTES * (most + 1) + 64:
        raise FormatError(
            f"{path}: the index segment after data_len = {data_len} bytes is {index_size} "
            f"bytes, more than a pickled index of at most {most} documents takes; data_len "
            "is corrupt or the file has trailing bytes"
        )
    fh.seek(HEADER_SIZE + data_len)
    blob = fh.read(index_size)
    pairs = decode_pairs(blob, f"{path}: pickled index", HEADER_SIZE + data_len)
    return _check_index(pairs, data_len, token_size, path)


class ModalitiesShard(MemmapShard):
    """A ``.pbin`` mapped zero-copy; document bounds decoded from the index on first use."""

    def __init__(self, info: ShardInfo) -> None:
        super().__init__(info)
        self._bounds: np.ndarray | None = None

    def document_bounds(self) -> np.ndarray:
        if self._bounds is None:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")  # describe() warned about repairs already
                with open_token_file(self.info) as fh:  # header + index tail only
                    layout = read_pbin_layout(fh, self.info.path, self.info.size)
            self._bounds = layout.bounds // layout.token_size
        return self._bounds


class ModalitiesFormat:
    """Modalities ``.pbin``: 12-byte header, tokens, pickled document index."""

    name = "modalities"
    has_documents = True

    def sniff(self, path: str, head: bytes, siblings: frozenset[str]) -> bool:
        return path.endswith(".pbin")

    def describe(self, fs: Any, file: ListedFile, options: ReadOptions) -> ShardInfo:
        with open_head(fs, file.path) as fh:
            layout = read_pbin_layout(fh, file.path, file.size)
        dtype = TOKEN_DTYPES[layout.token_size]
        what = f"header token_size = {layout.token_size} means {dtype.name}"
        check_configured_dtype(options.dtype, dtype, file.path, what)
        meta = {
            "token_size": layout.token_size,
            "num_documents": int(layout.bounds.shape[0] - 1),
            "index_offset": layout.index_offset,
            "index_repairs": layout.repairs,
        }
        num_tokens = layout.data_len // layout.token_size
        return ShardInfo(
            file.path, file.relpath, file.size, self.name, dtype.str, HEADER_SIZE, num_tokens,
            meta=meta,
        )  # fmt: skip

    def open(self, info: ShardInfo) -> TokenShard:
        return ModalitiesShard(info)


class ModalitiesWriter(StackWriter):
    """Write documents as ``modalities data pack_encoded_data`` (≥ 0.4) does, byte for byte.

    Tokens stream to a temporary file after a placeholder header; ``close()`` writes
    ``data_len`` into the header, appends the pickled index (protocol 4) and renames. Empty
    documents are skipped like the tool does (no index entry), counted in ``skipped_empty``.

    Args:
        path: Output ``.pbin`` path.
        token_size: 1, 2 or 4 bytes per token (see :func:`token_size_for_vocab`).
        eod_token_id: Appended to each document that does not already end with it (the tool
            always has one; ``None`` writes documents as given).
    """

    def __init__(
        self, path: str | os.PathLike[str], token_size: int, eod_token_id: int | None = None
    ) -> None:
        self.path = os.fspath(path)
        if token_size not in TOKEN_DTYPES:
            raise ValueError(f"{self.path}: token_size = {token_size} must be 1, 2 or 4 bytes")
        self._dtype = TOKEN_DTYPES[token_size]
        self._eod = None
        if eod_token_id is not None:
            self._eod = as_document([eod_token_id], self._dtype, f"{self.path}: eod_token_id")
        self.token_size = token_size
        self.skipped_empty = 0
        self._lengths = array("q")
        self._closed = False
        self._stack = contextlib.ExitStack()
        tmp = self._stack.enter_context(atomic_output(self.path))
        self._fh: BinaryIO = self._stack.enter_context(open(tmp, "wb"))  # noqa: SIM115
        self._fh.write(bytes(HEADER_SIZE))

    @property
    def num_documents(self) -> int:
        """Documents written so far (empty ones excluded)."""
        return len(self._lengths)

    def add_document(self, tokens: Any) -> None:
        """Append one document; an empty one is skipped (no EOD-only document)."""
        doc = as_document(tokens, self._dtype, f"{self.path}: document {self.num_documents}")
        if doc.size == 0:
            self.skipped_empty += 1
            return
        self._fh.write(doc.tobytes())
        size = doc.nbytes
        if self._eod is not None and doc[-1] != self._eod[0]:
            self._fh.write(self._eod.tobytes())
            size += self._eod.nbytes
        self._lengths.append(size)

    def close(self) -> None:
        """Write header and index, move the file into place."""
        if self._closed:
            return
        self._closed = True
        lengths = np.frombuffer(self._lengths, dtype=np.int64)
        offsets = np.cumsum(lengths) - lengths
        data_len = int(lengths.sum())
        self._fh.write(encode_pairs(np.stack([offsets, lengths], axis=1)))
        self._fh.seek(0)
        self._fh.write(struct.pack("<QI", data_len, self.token_size))
        self._stack.close()
        if self.skipped_empty:
            warnings.warn(
                f"{self.path}: skipped {self.skipped_empty} empty documents (modalities writes "
                "no index entry for a document of 0 tokens)",
                stacklevel=2,
            )


def merge_pbin(paths: Sequence[str | os.PathLike[str]], out: str | os.PathLike[str]) -> None:
    """Concatenate ``.pbin`` files into ``out`` with a correct index.

    Like ``modalities data merge_packed_data`` but without its -12 byte defect: document
    offsets of each input are moved by the data bytes before it. Inputs with the defect are
    repaired on reading (with a warning).

    Raises:
        ValueError: no inputs, or inputs of different token sizes.
        FormatError: an input is not a valid ``.pbin``.
    """
    if not paths:
        raise ValueError("merge_pbin needs at least one input file")
    names = [os.fspath(p) for p in paths]
    layouts = []
    for name in names:
        with open(name, "rb") as fh:
            layouts.append(read_pbin_layout(fh, name, os.path.getsize(name)))
    sizes = {layout.token_size for layout in layouts}
    if len(sizes) > 1:
        raise ValueError(f"cannot merge .pbin files of different token sizes {sorted(sizes)}")
    base = np.cumsum([0] + [layout.data_len for layout in layouts])
    bounds = np.concatenate(
        [lay.bounds[:-1] + b for lay, b in zip(layouts, base[:-1], strict=True)]
    )
    pairs = np.stack([bounds, np.diff(np.append(bounds, base[-1]))], axis=1)
    with atomic_output(out) as tmp, open(tmp, "wb") as fo:
        fo.write(struct.pack("<QI", int(base[-1]), sizes.pop()))
        for name, layout in zip(names, layouts, strict=True):
            _copy_range(name, HEADER_SIZE, layout.data_len, fo)
        fo.write(encode_pairs(pairs))


def _copy_range(path: str, start: int, count: int, out: BinaryIO) -> None:
    with open(path, "rb") as fh:
        fh.seek(start)
        while count > 0:
            chunk = fh.read(min(count, _COPY_CHUNK))
            if not chunk:
                raise FormatError(f"{path}: file shrank while it was being merged")
            out.write(chunk)
            count -= len(chunk)


FORMAT = ModalitiesFormat()
