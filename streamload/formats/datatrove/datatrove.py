"""datatrove ``DocumentTokenizer`` output, read by nanotron Nanosets (FORMATS §6).

* ``X.ds``: flat little-endian tokens, 2 bytes (``<H``) or 4 bytes (``<I``), no header;
* ``X.ds.index``: u64 little-endian cumulative document ends in tokens, one per document,
  no leading 0 (document k is ``[index[k-1] or 0, index[k])``; empty documents repeat a value);
* ``X.ds.metadata`` (optional): ``"{tokenizer}|{width}\\n{token count}\\n{humanized} T"``;
* ``X.ds.loss`` (optional): one byte per token, 1 where the loss is computed; a loss mask,
  found and read by the catalog for every format alike (:mod:`streamload.catalog.masks`,
  :mod:`streamload.formats.loss_mask`).

Width: from ``.ds.metadata``; a configured ``dtype`` must agree with it. Without metadata (or
with an old one that has no ``|width``) the configured ``dtype`` is used, else the one width
of 2 or 4 bytes for which ``index[-1] * width`` is the file size.
"""

from __future__ import annotations

import contextlib
import math
import os
import struct
from typing import Any, BinaryIO

import numpy as np

from streamload.errors import FormatError
from streamload.formats._fields import ascii_int, decode_text
from streamload.formats._stack_writer import StackWriter
from streamload.formats._writer_input import as_document
from streamload.formats.base import (
    ListedFile,
    MemmapShard,
    ReadOptions,
    ShardInfo,
    companion_file,
    local_path,
    open_head,
)
from streamload.util.files import atomic_output

__all__ = ["FORMAT", "DatatroveFormat", "DatatroveShard", "DatatroveWriter", "humanize_metric"]

WIDTH_DTYPES: dict[int, np.dtype] = {2: np.dtype("<u2"), 4: np.dtype("<u4")}
"""Token widths datatrove writes (bytes) and their dtypes."""
EMPTY_DOCUMENTS = 4096
"""Documents an index may hold beyond one per token (empty documents)."""
MAX_METADATA_BYTES = 1 << 16
"""Largest ``.ds.metadata`` read (real ones are a tokenizer name and two counts)."""


def humanize_metric(value: int, unit: str = "T", precision: int = 3) -> str:
    """``humanize.metric(value, unit)`` (humanize 4.17) for a non-negative integer.

    Three significant digits and an SI prefix chosen by ``floor(log10(value))``: 0 →
    ``"0.00 T"``, 15 → ``"15.0 T"``, 999 → ``"999 T"``, 1234 → ``"1.23 kT"``, 123000 →
    ``"123 kT"``, 2·10⁹ → ``"2.00 GT"``. A rounding carry moves to the next prefix (999999 →
    ``"1.00 MT"``; humanize releases before the carry fix printed ``"1000 kT"``).
    """
    exponent = math.floor(math.log10(abs(value))) if value != 0 else 0
    old_bucket = exponent // 3 * 3
    scaled = value / 10**old_bucket
    digits = int(max(0, precision - exponent % 3 - 1))
    if exponent < 30 and round(abs(scaled), digits) >= 10 ** (exponent % 3 + 1):
        exponent += 1
        scaled /= 10 ** (exponent // 3 * 3 - old_bucket)
        digits = int(max(0, precision - exponent % 3 - 1))
    prefix = "kMGTPEZYRQ"[exponent // 3 - 1] if exponent >= 3 else ""
    space = " " if unit or prefix else ""
    return f"{format(scaled, f'.{digits}f')}{space}{prefix}{unit}"


def _parse_metadata(text: bytes, path: str) -> tuple[str, int | None, int]:
    """``(tokenizer, width or None, token count)`` from a ``.ds.metadata`` file.

    Numbers are ASCII digits only (:func:`~streamload.formats._fields.ascii_int`; ``int()``
    would take ``"١٥"`` as 15). A first line without ``|digits`` is datatrove < 0.3's (no
    width); the third line (a humanized count) is not read.
    """
    lines = decode_text(text, path).split("\n")
    if len(lines) < 2:
        raise FormatError(
            f"{path}: expected 'tokenizer|width', a token count and a humanized count on "
            f"three lines, got {text[:80]!r}"
        )
    count = ascii_int(lines[1], path, "line 2 (token count)")
    name, sep, width_text = lines[0].rpartition("|")
    if not sep or not any(c.isdigit() or c.isnumeric() for c in width_text):
        return lines[0], None, count  # datatrove < 0.3 wrote no width
    width = ascii_int(width_text, path, "line 1 (width)")
    if width not in WIDTH_DTYPES:
        raise FormatError(f"{path}: token width {width} is not 2 or 4 bytes")
    return name, width, count


def _read_metadata(fs: Any, path: str) -> bytes:
    """The bytes of ``path.metadata``, refused unread beyond ``MAX_METADATA_BYTES``."""
    with open_head(fs, path + ".metadata") as fh:
        data = bytes(fh.read(MAX_METADATA_BYTES + 1))
    if len(data) > MAX_METADATA_BYTES:
        raise FormatError(
            f"{path}.metadata: larger than {MAX_METADATA_BYTES} bytes; datatrove writes three "
            "short lines (is it another file?)"
        )
    return data


def _read_index(fs: Any, path: str, ds_size: int) -> np.ndarray:
    """The u64 document ends, refused unread when more than the ``.ds`` of ``ds_size`` bytes
    can hold (one per token of 2 bytes, plus ``EMPTY_DOCUMENTS``)."""
    local = local_path(path)
    size = os.path.getsize(local) if local is not None else int(fs.size(path))
    if size % 8:
        raise FormatError(
            f"{path}: {size} bytes is not a multiple of 8 (u64 document ends); it is truncated"
        )
    most = ds_size // 2 + EMPTY_DOCUMENTS
    if size > 8 * most:
        raise FormatError(
            f"{path}: {size} bytes hold {size // 8} document ends but its .ds of {ds_size} "
            f"bytes holds at most {most} documents; the index belongs to another file"
        )
    if size == 0:
        return np.zeros(0, dtype="<u8")
    if local is not None:
        return np.memmap(local, dtype="<u8", mode="r")
    return np.frombuffer(fs.cat_file(path), dtype="<u8")


def _check_index(index: np.ndarray, path: str) -> int:
    """Check document ends are non-decreasing; return the last (the token count)."""
    if index.size == 0:
        raise FormatError(f"{path}: holds no documents but its .ds file is not empty")
    back = np.flatnonzero(index[1:] < index[:-1])
    if back.size:
        k = int(back[0]) + 1
        raise FormatError(
            f"{path}: document {k} ends at token {index[k]} before document {k - 1}'s end "
            f"{index[k - 1]}; document ends must not decrease"
        )
    return int(index[-1])


def _pick_dtype(
    path: str, options: ReadOptions, width: int | None, last: int, size: int
) -> np.dtype:
    if options.dtype != "auto":
        dtype = np.dtype(options.dtype).newbyteorder("<")
        if width is not None and dtype != WIDTH_DTYPES[width]:
            raise FormatError(
                f"{path}.metadata says {width}-byte tokens ({WIDTH_DTYPES[width].name}) but the "
                f"config says dtype = {options.dtype!r}; remove dtype or fix it"
            )
        return dtype
    if width is not None:
        return WIDTH_DTYPES[width]
    fits = [w for w in WIDTH_DTYPES if last * w == size]
    if len(fits) != 1:
        raise FormatError(
            f"{path}: no .ds.metadata gives the token width and the index (last end {last}) "
            f"fits neither 2 nor 4 bytes per token for {size} bytes; set dtype"
        )
    return WIDTH_DTYPES[fits[0]]


class DatatroveShard(MemmapShard):
    """An opened ``.ds`` shard: tokens and document bounds (lazy)."""

    def __init__(self, info: ShardInfo, index: np.ndarray) -> None:
        super().__init__(info)
        self._index = index

    def document_bounds(self) -> np.ndarray:
        if self._bounds is None:
            self._bounds = np.concatenate([[0], self._index]).astype(np.int64)
        return self._bounds


class DatatroveFormat:
    """``.ds`` files with a ``.ds.index`` sibling."""

    name = "datatrove"
    has_documents = True

    def sniff(self, path: str, head: bytes, siblings: frozenset[str]) -> bool:
        return path.endswith(".ds") and os.path.basename(path) + ".index" in siblings

    def describe(self, fs: Any, file: ListedFile, options: ReadOptions) -> ShardInfo:
        path, index_path = file.path, file.path + ".index"
        if not fs.isfile(index_path):
            raise FormatError(
                f"{path}: its document index {index_path} is missing (datatrove writes it "
                "unless save_index=False); use format = 'raw' with a dtype to read it flat"
            )
        last = _check_index(_read_index(fs, index_path, file.size), index_path)
        meta: dict[str, Any] = {"index_size": int(fs.size(index_path))}
        width = None
        if fs.isfile(path + ".metadata"):
            name, width, count = _parse_metadata(_read_metadata(fs, path), path + ".metadata")
            if count != last:
                raise FormatError(
                    f"{path}.metadata says {count} tokens but the index ends at token {last}; "
                    "the files come from different runs"
                )
            meta["tokenizer"] = name
        dtype = _pick_dtype(path, options, width, last, file.size)
        if last * dtype.itemsize != file.size:
            raise FormatError(
                f"{path}: the index ends at token {last} ({last * dtype.itemsize} bytes of "
                f"{dtype.name}) but the file is {file.size} bytes; it is truncated or the "
                "index belongs to another file"
            )
        meta["num_documents"] = int(meta["index_size"] // 8)
        return ShardInfo(
            path, file.relpath, file.size, self.name, dtype.str, 0, last, index_path, meta
        )

    def open(self, info: ShardInfo) -> DatatroveShard:
        index_path = info.index_path or info.path + ".index"
        local = companion_file(info, index_path, int(info.meta["index_size"]))
        index = np.memmap(local, dtype="<u8", mode="r")
        if int(index[-1]) != info.num_tokens:
            raise FormatError(f"{index_path}: changed since start-up (last end {index[-1]})")
        return DatatroveShard(info, index)


class DatatroveWriter(StackWriter):
    """Write documents as datatrove's ``DocumentTokenizer`` (unshuffled) does.

    Byte-identical to datatrove 0.10.1 for the same documents: tokens in ``.ds``, u64 ends in
    ``.ds.index``, ``"{tokenizer}|{token_size}\\n{count}\\n{humanize_metric(count)}"`` in
    ``.ds.metadata`` (no name is written ``Unknown Tokenizer|{w}|{w}``, as datatrove does), and with
    ``save_loss_metadata`` one byte per token in ``.ds.loss``. Tokens and ends stream to
    temporary files; ``close()`` renames the companions, then the ``.ds``.

    Args:
        path_ds: Output ``.ds`` path.
        tokenizer_name: Tokenizer name or path recorded in the metadata.
        token_size: 2 (uint16) or 4 (uint32) bytes per token.
        save_loss_metadata: Also write ``.ds.loss`` (``add_document(..., loss_mask=...)``).
    """

    def __init__(
        self,
        path_ds: str | os.PathLike[str],
        tokenizer_name: str | None,
        token_size: int,
        *,
        save_loss_metadata: bool = False,
    ) -> None:
        self.path = os.fspath(path_ds)
        if token_size not in WIDTH_DTYPES:
            raise ValueError(f"{self.path}: token_size = {token_size} must be 2 or 4 bytes")
        self._dtype = WIDTH_DTYPES[token_size]
        # datatrove 0.10.1 appends the width to its placeholder name, then again to the name
        name = tokenizer_name or f"Unknown Tokenizer|{token_size}"
        self._header = f"{name}|{token_size}"
        self._written = 0
        self._documents = 0
        self._closed = False
        self._stack = contextlib.ExitStack()
        tmp_ds = self._stack.enter_context(atomic_output(self.path))
        names = [".index", ".metadata"] + ([".loss"] if save_loss_metadata else [])
        tmps = {n: self._stack.enter_context(atomic_output(self.path + n)) for n in names}
        self._tokens = self._stack.enter_context(open(tmp_ds, "wb"))  # noqa: SIM115
        self._index = self._stack.enter_context(open(tmps[".index"], "wb"))  # noqa: SIM115
        self._metadata_tmp = tmps[".metadata"]
        self._loss: BinaryIO | None = None
        if ".loss" in tmps:
            self._loss = self._stack.enter_context(open(tmps[".loss"], "wb"))  # noqa: SIM115

    def add_document(self, tokens: Any, *, loss_mask: Any = None) -> None:
        """Append one document (may be empty: its end repeats the previous one).

        Args:
            tokens: Token ids (EOS included as wanted).
            loss_mask: With ``save_loss_metadata``: per-token booleans (default all True).
        """
        where = f"{self.path}: document {self._documents}"
        doc = as_document(tokens, self._dtype, where)
        if self._loss is not None:
            mask = np.ones(doc.size, dtype=bool) if loss_mask is None else np.asarray(loss_mask)
            if mask.shape != doc.shape:
                raise ValueError(f"{where}: loss_mask shape {mask.shape} != tokens {doc.shape}")
            self._loss.write(mask.astype(np.bool_).tobytes())
        self._tokens.write(doc.tobytes())
        self._written += doc.size
        self._documents += 1
        self._index.write(struct.pack("<Q", self._written))

    def close(self) -> None:
        """Write the metadata and move the files into place."""
        if self._closed:
            return
        self._closed = True
        text = f"{self._header}\n{self._written}\n{humanize_metric(self._written, 'T')}"
        with open(self._metadata_tmp, "w", encoding="utf-8", newline="") as fh:
            fh.write(text)
        self._stack.close()


FORMAT = DatatroveFormat()
