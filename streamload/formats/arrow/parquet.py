"""Parquet token datasets (``format = "parquet"``): Hugging Face Hub datasets, ``to_parquet``
output, ``pyarrow.parquet.write_table`` files.

Each ``.parquet`` file is one shard (a folder lists its files in name order). One row is one
document; its tokens are a ``list<int*>`` or ``large_list<int*>`` column, ``input_ids``
unless the source names another (``column = "tokens"``); the dtype is the list's value type.

Describing reads the footer: the column's type, and each row group's token count from the
column chunk's statistics, whose count of non-null values is the token count, when an Arrow
C++ writer of version 6.0 or later (pyarrow, ``datasets``) wrote them and they count no null
value. A row group whose statistics are missing, from another writer, or count nulls (a null
row, a null token, or an empty document, which Parquet counts as a null value too) is decoded
once instead, so a null is refused when the file is described, not in the middle of a run.
The counts are kept in the shard's description: opening the shard decodes nothing.
Reading decodes a row group's token column once when a token of it is first needed and keeps
it in a bounded per-process cache (:mod:`streamload.formats.arrow._row_groups`); a window
inside a row group is a view of it, one across row groups a small copy. Remote files are read
by range through the storage layer (:func:`~streamload.formats.base.open_token_file`): the
footer, then the column chunks of the row groups read.

Sniffed by the ``PAR1`` magic. Refused, naming file and column: a missing column (the columns
that exist are listed), a non-list or non-integer column, null rows or tokens, a row group
whose tokens disagree with its footer, and any file pyarrow cannot parse (truncated, corrupt).

:class:`ParquetWriter` (:mod:`streamload.formats.arrow.parquet_write`, re-exported here)
writes what ``streamload convert --to parquet`` publishes: one ``input_ids`` column of
``list<dtype>`` (with masks, a ``labels_mask`` column beside it), row groups of about
:data:`ROW_GROUP_TOKENS` tokens.
"""

from __future__ import annotations

import contextlib
import re
import threading
from typing import Any

import numpy as np

from streamload.errors import FormatError
from streamload.formats.arrow._metadata import locate_row, metadata_columns, row_metadata
from streamload.formats.arrow._pieces import piece_starts, pieces_bounds, take_tokens
from streamload.formats.arrow._row_groups import Decoded, row_groups
from streamload.formats.arrow.columns import (
    arrow_errors,
    column_name,
    list_columns,
    token_dtype,
    token_lists,
)
from streamload.formats.arrow.masks import (
    check_row_lengths,
    column_types,
    mask_lists,
    mask_values,
)
from streamload.formats.arrow.parquet_write import ROW_GROUP_TOKENS, ParquetWriter
from streamload.formats.base import (
    ListedFile,
    ReadOptions,
    ShardInfo,
    check_configured_dtype,
    check_size_unchanged,
    local_path,
    open_head,
    open_token_file,
)

__all__ = [
    "FORMAT",
    "PARQUET_MAGIC",
    "ROW_GROUP_TOKENS",
    "ParquetFormat",
    "ParquetShard",
    "ParquetWriter",
]

PARQUET_MAGIC = b"PAR1"
"""First (and last) bytes of a Parquet file."""
_STATISTICS_WRITER = re.compile(r"parquet-cpp-arrow version (\d+)\.(\d+)")
"""``created_by`` of the writer whose list-column statistics count exactly the non-null leaf
values (Arrow C++: pyarrow and ``datasets``), trusted from :data:`_STATISTICS_SINCE` on."""
_STATISTICS_SINCE = (6, 0)


def _errors(path: str) -> contextlib.AbstractContextManager[None]:
    """pyarrow's parse errors as :class:`FormatError` naming ``path`` (network errors of a
    remote file propagate: :func:`~streamload.formats.arrow.columns.arrow_errors`)."""
    return arrow_errors(path, "Parquet")


def _leaf_index(metadata: Any, column: str) -> int:
    """The column-chunk index of the token column's values (``input_ids.list.element``)."""
    schema = metadata.schema
    for index in range(len(schema)):
        if schema.column(index).path.startswith(f"{column}."):
            return index
    raise FormatError(f"column {column!r} has no leaf")  # pragma: no cover - type checked


def _decode(pf: Any, group: int, column: str, path: str) -> Decoded:
    """Row group ``group``'s tokens and offsets (from 0), decoded."""
    with _errors(path):
        table = pf.read_row_group(group, columns=[column], use_threads=False)
        array = table.column(0).combine_chunks()
    values, offsets = token_lists(array, column, f"{path}: row group {group}")
    return values, offsets.astype(np.int64) - int(offsets[0])


def _statistics_trusted(metadata: Any) -> bool:
    """Whether the file's writer is an Arrow C++ of version :data:`_STATISTICS_SINCE` or
    later."""
    found = _STATISTICS_WRITER.match(str(metadata.created_by))
    return found is not None and (int(found[1]), int(found[2])) >= _STATISTICS_SINCE


def row_group_tokens(pf: Any, column: str, path: str) -> tuple[list[int], int]:
    """Each row group's token count, and how many row groups were decoded to count them (the
    others: their footer statistics; module docstring). Decoding refuses nulls."""
    metadata = pf.metadata
    groups = metadata.num_row_groups
    trusted = groups > 0 and _statistics_trusted(metadata)
    leaf = _leaf_index(metadata, column) if trusted else -1
    counts, decoded = [], 0
    for group in range(groups):
        with _errors(path):
            stats = metadata.row_group(group).column(leaf).statistics if trusted else None
        if stats is not None and stats.has_null_count and stats.null_count == 0:
            counts.append(int(stats.num_values))
        else:
            counts.append(_decode(pf, group, column, path)[0].shape[0])
            decoded += 1
    return counts, decoded


def _open_parquet(source: Any, path: str) -> Any:
    import pyarrow.parquet as pq

    with _errors(path):
        return pq.ParquetFile(source, memory_map=isinstance(source, str))


class ParquetShard:
    """An opened Parquet shard: row groups decoded on first use, cached (module docstring).

    Described with ``meta["mask_of"]`` (:func:`~streamload.formats.loss_mask.mask_shard`),
    the shard reads its ``column`` as the loss mask of the token column ``mask_of``: a row
    group's flags are decoded as ``uint8`` and checked row by row against the row group's
    tokens (taken from the same cache the token shard fills).
    """

    def __init__(self, info: ShardInfo) -> None:
        self.info = info
        column = info.meta.get("column")
        if not isinstance(column, str):
            raise FormatError(f"{info.path}: shard was not described by the parquet format")
        self._column = column
        mask_of = info.meta.get("mask_of")
        self._mask_of = mask_of if isinstance(mask_of, str) else None
        self._lock = threading.Lock()  # one decode at a time per file (a remote file object)
        if info.is_remote:
            source: Any = open_token_file(info)
        else:
            source = check_size_unchanged(info.path, info.size)
        self._file = _open_parquet(source, info.path)
        counts = info.meta.get("row_group_tokens")
        if not isinstance(counts, list):  # described by an older streamload (catalog cache)
            counts, _ = row_group_tokens(self._file, self._mask_of or column, info.path)
        metadata = self._file.metadata
        groups = metadata.num_row_groups
        if len(counts) != groups or sum(counts) != info.num_tokens:
            raise FormatError(
                f"{info.path}: {groups} row groups now but {len(counts)} row groups of "
                f"{info.num_tokens} tokens in column {column!r} at start-up; the file changed"
            )
        self._starts = piece_starts(counts)
        self._starts_list: list[int] = self._starts.tolist()
        rows = [metadata.row_group(g).num_rows for g in range(groups)]
        self._rows: list[int] = piece_starts(rows).tolist()
        self._dtype = np.dtype(info.dtype)
        self._bounds: np.ndarray | None = None
        self._fields: tuple[list[str], int, Any] | None = None  # last row group's metadata

    def _row_group(self, group: int, column: str | None = None) -> Decoded:
        """Row group ``group`` of ``column`` (default: this shard's; a mask shard also reads
        its token column's), decoded once into the process's cache."""
        name = column or self._column
        key = (self.info.path, self.info.size, self.info.version, name, group)
        return row_groups.get(key, lambda: self._decode(group, name))

    def _decode(self, group: int, column: str) -> Decoded:
        """Row group ``group`` of ``column``, checked against the token counts of start-up;
        a mask's flags row by row against the tokens."""
        if column == self._column and self._mask_of is not None:
            return self._decode_mask(group, self._mask_of)
        with self._lock:
            values, offsets = _decode(self._file, group, column, self.info.path)
        expected = self._starts_list[group + 1] - self._starts_list[group]
        if values.shape[0] != expected:
            raise FormatError(
                f"{self.info.path}: row group {group} holds {values.shape[0]} tokens in column "
                f"{column!r} but held {expected} at start-up; the file changed or is corrupt"
            )
        return values, offsets

    def _decode_mask(self, group: int, mask_of: str) -> Decoded:
        """Row group ``group``'s mask flags (``uint8``), each row as long as its tokens."""
        where = f"{self.info.path}: row group {group}"
        with self._lock, _errors(self.info.path):
            table = self._file.read_row_group(group, columns=[self._column], use_threads=False)
            array = table.column(0).combine_chunks()
        flags, offsets = mask_lists(array, self._column, where)
        tokens, token_offsets = self._row_group(group, mask_of)
        columns = (mask_of, self._column)
        first_row = self._rows[group]
        check_row_lengths(token_offsets, offsets, self.info.path, first_row, columns)
        at = (self.info.path, first_row)
        values = mask_values(self._column, flags, tokens, offsets, at, mask_of)
        return values, offsets.astype(np.int64) - int(offsets[0])

    def tokens(self, start: int, stop: int) -> np.ndarray:
        return take_tokens(
            self._starts_list, lambda g: self._row_group(g)[0], start, stop, self._dtype
        )

    def document_bounds(self) -> np.ndarray:
        """Token offsets of the rows (int64, rows + 1); decodes every row group once."""
        if self._bounds is None:
            groups = len(self._starts_list) - 1
            offsets = [self._row_group(g)[1] for g in range(groups)]
            self._bounds = pieces_bounds(offsets, self._starts)
        return self._bounds

    def document_metadata(self, i: int, id_column: str | None = None) -> dict[str, Any]:
        """The metadata of document (row) ``i``: its id (the ``id_column`` value, by default
        the ``id`` column's) as ``id``, then its other scalar columns
        (:mod:`~streamload.formats.arrow._metadata`; ``{}`` when there are none). Decodes
        those columns of the row's row group only (the last row group read is kept).

        Raises:
            FormatError: a named ``id_column`` that the file does not have.
        """
        columns = metadata_columns(self._file.schema_arrow, id_column, self.info.path)
        if not columns:
            return {}
        group, row = locate_row(self._rows, i)
        names = [name for name, _ in columns]
        kept = self._fields
        if kept is None or kept[:2] != (names, group):
            with self._lock, _errors(self.info.path):
                table = self._file.read_row_group(group, columns=names, use_threads=False)
            kept = self._fields = (names, group, table)
        return row_metadata(kept[2], row, columns)


class ParquetFormat:
    """Parquet files with a list-of-integers token column (module docstring)."""

    name = "parquet"
    has_documents = True

    def sniff(self, path: str, head: bytes, siblings: frozenset[str]) -> bool:
        return head.startswith(PARQUET_MAGIC)

    def describe(self, fs: Any, file: ListedFile, options: ReadOptions) -> ShardInfo:
        column = column_name(options.column)
        local = local_path(file.path)
        with contextlib.ExitStack() as stack:
            source = local if local is not None else stack.enter_context(open_head(fs, file.path))
            pf = _open_parquet(source, file.path)
            dtype = token_dtype(pf.schema_arrow, column, file.path)
            what = f"column {column!r} holds {dtype.name} tokens"
            check_configured_dtype(options.dtype, dtype, file.path, what)
            counts, decoded = row_group_tokens(pf, column, file.path)
            metadata = pf.metadata
            others = list_columns(pf.schema_arrow, column)
            types = column_types(pf.schema_arrow)
        meta: dict[str, Any] = {
            "column": column,
            "documents": metadata.num_rows,
            "row_groups": metadata.num_row_groups,
            "counts_from": "statistics" if not decoded else "decoded",
            "decoded_row_groups": decoded,
            "row_group_tokens": counts,
        }
        if others:
            meta["list_columns"] = others
        meta["column_types"] = types
        tokens = sum(counts)
        return ShardInfo(
            file.path, file.relpath, file.size, self.name, dtype.str, 0, tokens, None, meta
        )

    def open(self, info: ShardInfo) -> ParquetShard:
        return ParquetShard(info)


FORMAT = ParquetFormat()
