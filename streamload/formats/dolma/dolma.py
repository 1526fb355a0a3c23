"""Dolma ``dolma tokens`` output: headerless ``part-*.npy`` + ``part-*.csv.gz`` (FORMATS §4).

The ``.npy`` is **not** a NumPy file: flat little-endian tokens with no header and no magic,
its width recorded nowhere. The ``.csv.gz`` companion holds one row per document,
``start,end,id,src,loc`` (``end`` exclusive, CRLF, no header; legacy OLMo files hold only
``start,end``). Dolma writes documents back to back, so the rows tile the token file exactly:
the first starts at 0, each starts where the previous ended, and the last ends at the token
count. Anything else is refused, naming the row.

Token width: the config's ``dtype``; with ``dtype = "auto"`` it follows dolma's own rule on
the config's ``vocab_size``, ``numpy.min_scalar_type(vocab_size - 1)`` (uint8 up to 256 ids,
uint16 up to 65536, else uint32). Without either, the file cannot be read.
"""

from __future__ import annotations

import contextlib
import csv
import gzip
import io
import os
import re
from typing import Any

import numpy as np
from numpy.lib.format import MAGIC_PREFIX as NPY_MAGIC  # not the numpy family's (independent)

from streamload.config.storage import default_cache_dir
from streamload.errors import FormatError
from streamload.formats._stack_writer import StackWriter
from streamload.formats._writer_input import as_document, token_dtype
from streamload.formats.base import (
    ListedFile,
    MemmapShard,
    ReadOptions,
    ShardInfo,
    check_token_dtype,
    companion_file,
    open_head,
)
from streamload.formats.dolma._bounds_cache import bounds_key, load_bounds, save_bounds
from streamload.formats.dolma._csv import DolmaRows, RowLimits, read_rows, row_fields
from streamload.util.files import atomic_output

__all__ = ["CSV_SUFFIX", "FORMAT", "DolmaFormat", "DolmaShard", "DolmaWriter", "metadata_path"]

CSV_SUFFIX = ".csv.gz"
_ROW_BUFFER = 1 << 20
"""Characters of CSV rows buffered before they go to the gzip stream."""


def metadata_path(npy_path: str) -> str:
    """The ``.csv.gz`` companion of a dolma ``.npy`` (``part-0-00000.npy`` → ``…csv.gz``)."""
    stem = npy_path[: -len(".npy")] if npy_path.endswith(".npy") else npy_path
    return stem + CSV_SUFFIX


def dolma_dtype(path: str, options: ReadOptions) -> np.dtype:
    """The token dtype: the config's, else dolma's rule on ``vocab_size`` (module docstring).

    Raises:
        FormatError: neither ``dtype`` nor ``vocab_size`` is configured.
    """
    if options.dtype != "auto":
        return check_token_dtype(np.dtype(options.dtype).newbyteorder("<"), path)
    if options.vocab_size is None:
        raise FormatError(
            f"{path}: a dolma .npy does not record its token width; set dtype (e.g. dtype = "
            '"uint16") in this source or vocab_size at the top level (dolma uses '
            "numpy.min_scalar_type(vocab_size - 1))"
        )
    return np.min_scalar_type(max(options.vocab_size - 1, 0)).newbyteorder("<")


def _limits(size: int, dtype: np.dtype) -> RowLimits:
    """What the metadata of a token file of ``size`` bytes may hold (an inexact size is
    refused later by :func:`check_rows`)."""
    return RowLimits.for_tokens(size // dtype.itemsize)


def _width_hint(last_end: int, size: int, dtype: np.dtype) -> str:
    fits = [f"uint{8 * w}" for w in (1, 2, 4, 8) if last_end * w == size and w != dtype.itemsize]
    return f"; with dtype {fits[0]} it would match: is the dtype right?" if fits else ""


def check_rows(rows: DolmaRows, size: int, dtype: np.dtype, csv_path: str) -> int:
    """Check the rows tile the token file; return the token count.

    Raises:
        FormatError: no rows, a row with start > end, a gap or overlap between rows, or a last
            end that disagrees with the token file's size.
    """
    starts, ends = rows.starts, rows.ends
    if starts.size == 0:
        raise FormatError(f"{csv_path}: has no rows but its token file holds {size} bytes")
    if starts[0] != 0:
        raise FormatError(f"{csv_path}: row 1 starts at token {starts[0]}; expected 0")
    bad = np.flatnonzero(starts > ends)
    if bad.size:
        i = int(bad[0])
        raise FormatError(
            f"{csv_path}: row {i + 1} starts at token {starts[i]} after its end {ends[i]}; "
            "expected start <= end"
        )
    gap = np.flatnonzero(ends[:-1] != starts[1:])
    if gap.size:
        i = int(gap[0])
        raise FormatError(
            f"{csv_path}: row {i + 1} ends at token {ends[i]} but row {i + 2} starts at "
            f"{starts[i + 1]}; dolma writes documents back to back (rows sorted, contiguous)"
        )
    last = int(ends[-1])
    if last * dtype.itemsize != size:
        raise FormatError(
            f"{csv_path}: the last row ends at token {last} ({last * dtype.itemsize} bytes of "
            f"{dtype.name}) but the token file is {size} bytes; it is truncated, or the CSV "
            f"belongs to another file{_width_hint(last, size, dtype)}"
        )
    return last


def _bounds_of(rows: DolmaRows) -> np.ndarray:
    """Document bounds (int64 ``[d + 1]``) of checked rows."""
    bounds = np.empty(rows.ends.size + 1, dtype=np.int64)
    bounds[0], bounds[1:] = 0, rows.ends
    return bounds


class DolmaShard(MemmapShard):
    """An opened dolma shard: tokens, document bounds, and each document's CSV fields."""

    def __init__(self, info: ShardInfo) -> None:
        super().__init__(info)
        if info.index_path is None:
            raise FormatError(f"{info.path}: shard description has no .csv.gz; describe it again")
        self._csv_path = info.index_path
        self._csv_local: str | None = None
        self._rows: DolmaRows | None = None

    def _csv(self) -> str:
        """The local ``.csv.gz`` (checked unchanged; copied once when remote): needed only for
        documents, so reading tokens never parses it (a shuffled stream reopens shards)."""
        if self._csv_local is None:
            size = int(self.info.meta["index_size"])
            self._csv_local = companion_file(self.info, self._csv_path, size)
        return self._csv_local

    def _read_rows(self, keep_text: bool) -> DolmaRows:
        csv_local = self._csv()
        with open(csv_local, "rb") as fh:
            rows = read_rows(fh, csv_local, _limits(self.info.size, np.dtype(self.info.dtype)),
                             keep_text=keep_text)  # fmt: skip
        check_rows(rows, self.info.size, np.dtype(self.info.dtype), csv_local)
        return rows

    def document_bounds(self) -> np.ndarray:
        """Token offsets of the documents (int64) on first use: the ones describe parsed from
        the CSV, mapped from the bounds cache (:mod:`._bounds_cache`), else parsed again."""
        if self._bounds is None:
            self._csv()  # the CSV is still the one described, whichever way bounds come
            meta = self.info.meta
            if "bounds_sha256" in meta:  # not in descriptions cached by older versions
                cached = load_bounds(meta["cache_root"], meta["bounds_sha256"],
                                     self.num_documents)  # fmt: skip
                if cached is not None:
                    self._bounds = cached
                    return cached
            bounds = _bounds_of(self._read_rows(keep_text=False))
            if "bounds_sha256" in meta:
                self._check_described(bounds)
                save_bounds(meta["cache_root"], meta["bounds_sha256"], bounds)  # repair it
            self._bounds = bounds
        return self._bounds

    def _check_described(self, bounds: np.ndarray) -> None:
        """Refuse bounds parsed now that are not the ones describe parsed.

        Raises:
            FormatError: the CSV was rewritten (with its size kept) since it was described.
        """
        if bounds_key(bounds) != self.info.meta["bounds_sha256"]:
            raise FormatError(
                f"{self._csv_path}: its rows differ from those described at start-up "
                f"(document bounds sha256 {self.info.meta['bounds_sha256'][:12]}…); the file "
                "was rewritten in place: describe the source again"
            )

    @property
    def num_documents(self) -> int:
        """Documents (CSV rows) in the shard."""
        return int(self.info.meta["num_documents"])

    def document_metadata(self, i: int) -> dict[str, Any]:
        """``{"id", "src", "loc"}`` of document ``i`` (``None`` where a legacy CSV has none).

        The CSV is decompressed on the first call and kept.
        """
        if not 0 <= i < self.num_documents:
            raise IndexError(f"document {i} out of range [0, {self.num_documents})")
        if self._rows is None:
            self._rows = self._read_rows(keep_text=True)
        rows = self._rows
        text = rows.text or b""
        return row_fields(text, int(rows.row_begin[i]), int(rows.row_end[i]), self._csv_path)


class DolmaFormat:
    """``.npy`` files without the NPY magic that have a ``.csv.gz`` sibling."""

    name = "dolma"
    has_documents = True

    def sniff(self, path: str, head: bytes, siblings: frozenset[str]) -> bool:
        if not path.endswith(".npy") or head.startswith(NPY_MAGIC):
            return False
        return os.path.basename(metadata_path(path)) in siblings

    def describe(self, fs: Any, file: ListedFile, options: ReadOptions) -> ShardInfo:
        path, csv_path = file.path, metadata_path(file.path)
        with open_head(fs, path) as fh:
            if fh.read(len(NPY_MAGIC)) == NPY_MAGIC:
                raise FormatError(
                    f"{path}: format = 'dolma' but the file is a real NPY (\\x93NUMPY magic); "
                    "use format = 'numpy'"
                )
        dtype = dolma_dtype(path, options)
        if not fs.isfile(csv_path):
            raise FormatError(
                f"{path}: its document metadata {csv_path} is missing; a dolma shard is a "
                "headerless .npy plus a .csv.gz (use format = 'raw' with a dtype without one)"
            )
        with fs.open(csv_path, "rb") as fh:
            rows = read_rows(fh, csv_path, _limits(file.size, dtype))
            packed_size = int(fh.tell())  # the gzip reader reads to the end of the file
        count = check_rows(rows, file.size, dtype, csv_path)
        bounds = _bounds_of(rows)
        key, root = bounds_key(bounds), options.cache_root or default_cache_dir()
        save_bounds(root, key, bounds)  # a plan build maps them instead of parsing again
        meta = {"num_documents": int(rows.starts.size), "index_size": packed_size,
                "bounds_sha256": key, "cache_root": root}  # fmt: skip
        return ShardInfo(
            path, file.relpath, file.size, self.name, dtype.str, 0, count, csv_path, meta
        )

    def open(self, info: ShardInfo) -> DolmaShard:
        return DolmaShard(info)


def _next_part(path: str) -> str:
    match = re.fullmatch(r"(.*?)(\d+)\.npy", path)
    if match is None:
        raise ValueError(
            f"{path}: the next document does not fit max_size and the name has no number to "
            "count files by; name it like part-0-00000.npy"
        )
    number = match.group(2)
    return f"{match.group(1)}{int(number) + 1:0{len(number)}d}.npy"


class DolmaWriter(StackWriter):
    """Write documents as ``dolma tokens`` does: a headerless ``.npy`` and a ``.csv.gz``.

    Byte-identical to dolma 1.2.1 for the same documents, ids, sources, locations and gzip
    ``mtime``: tokens as little-endian ``dtype``; rows ``start,end,id,src,loc`` written by
    ``csv.writer`` (CRLF, quoted only when needed), gzip level 9 naming the ``.csv`` inside,
    never sync-flushed. Output goes to temporary names; ``close()`` renames the ``.csv.gz``
    and then the ``.npy``.

    Args:
        path_npy: Output ``.npy`` path; the ``.csv.gz`` goes beside it.
        dtype: Token dtype (dolma: ``min_scalar_type(vocab_size - 1)``).
        max_size: As dolma's ``--max_size``: each file holds fewer than ``max_size`` tokens,
            documents are never split, and a document that does not fit starts the next file
            (the trailing number of the name counts up: ``part-0-00001.npy``). ``None``: one
            file.
        mtime: gzip header timestamp; ``None`` uses the current time, as dolma does (pass a
            fixed value for reproducible bytes).

    Unlike dolma, a writer given no documents leaves an empty ``.npy`` (dolma leaves its
    pre-allocated ``max_size`` zeros).
    """

    def __init__(
        self,
        path_npy: str | os.PathLike[str],
        dtype: Any,
        max_size: int | None = None,
        *,
        mtime: float | None = None,
    ) -> None:
        path = os.fspath(path_npy)
        if not path.endswith(".npy"):
            raise ValueError(f"{path}: a dolma token file name must end in .npy")
        if max_size is not None and max_size < 2:
            raise ValueError(f"{path}: max_size = {max_size} must be >= 2 tokens")
        self._dtype = token_dtype(dtype, path)
        self._max_size = max_size
        self._mtime = mtime
        self._documents = 0
        self._closed = False
        self.paths: list[str] = []
        """The ``.npy`` files written (the last one is complete once closed)."""
        self._open(path)

    def _open(self, path: str) -> None:
        self._stack = contextlib.ExitStack()
        tmp_npy = self._stack.enter_context(atomic_output(path))
        tmp_csv = self._stack.enter_context(atomic_output(metadata_path(path)))
        self._tokens = self._stack.enter_context(open(tmp_npy, "wb"))  # noqa: SIM115
        raw = self._stack.enter_context(open(tmp_csv, "wb"))  # noqa: SIM115
        self._gzip = self._stack.enter_context(
            gzip.GzipFile(
                filename=metadata_path(path),
                mode="wb",
                fileobj=raw,
                compresslevel=9,
                mtime=self._mtime,
            )
        )
        self._rows = io.StringIO()
        self._csv = csv.writer(self._rows)
        self._written = 0
        self.paths.append(path)

    def add_document(
        self, tokens: Any, *, doc_id: str | None = None, src: str = "", loc: int | None = None
    ) -> None:
        """Append one document and its CSV row.

        Args:
            tokens: The document's token ids (BOS/EOS included as wanted; may be empty).
            doc_id: The ``id`` column; default: the document's number in this writer.
            src: The ``src`` column (dolma: the source path).
            loc: The ``loc`` column; default: the document's number plus one (1-based).
        """
        where = f"{self.paths[-1]}: document {self._documents}"
        doc = as_document(tokens, self._dtype, where)
        if self._max_size is not None and self._written + doc.size >= self._max_size:
            if doc.size >= self._max_size:
                raise ValueError(
                    f"{where} has {doc.size} tokens; a file holds fewer than max_size = "
                    f"{self._max_size}"
                )
            nxt = _next_part(self.paths[-1])
            self._finish()
            self._open(nxt)
        self._tokens.write(doc.tobytes())
        row_id = str(self._documents) if doc_id is None else doc_id
        row_loc = self._documents + 1 if loc is None else loc
        self._csv.writerow((self._written, self._written + doc.size, row_id, src, row_loc))
        self._written += doc.size
        self._documents += 1
        if self._rows.tell() >= _ROW_BUFFER:
            self._flush_rows()

    def _flush_rows(self) -> None:
        self._gzip.write(self._rows.getvalue().encode("utf-8"))
        self._rows.seek(0)
        self._rows.truncate()

    def _finish(self) -> None:
        self._flush_rows()
        self._stack.close()

    def close(self) -> None:
        """Finish the current pair of files and move them into place."""
        if not self._closed:
            self._closed = True
            self._finish()


FORMAT = DolmaFormat()
