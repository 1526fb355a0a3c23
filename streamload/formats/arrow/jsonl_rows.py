"""JSONL rows of token ids: pre-tokenized SFT data as scripts write it (``format = "jsonl"``).

A ``.jsonl`` file without a tokenization record (``X.tok.json``,
:mod:`streamload.formats.jsonl`) and read without a ``tokenizer`` holds one JSON object per
line with a list of token ids (``column``, default ``input_ids``), one line per document:
what ``datasets``' ``to_json`` writes for a tokenized dataset, and what a script dumping
``tokenizer.apply_chat_template(..., tokenize=True)`` rows writes. Beside the ids a line
may carry its loss mask, found by the same names and in the same order as a table's columns
(:data:`~streamload.formats.arrow.masks.MASK_COLUMNS`): ``loss_mask``, ``labels_mask``,
``labels`` (transformers' labels, -100 = not trained, read as ``labels != -100`` and refused
unless a masked copy of ``input_ids``), TRL's ``assistant_masks``, ``completion_mask``
(1 = trained); ``mask_column`` names another.

The file is parsed whole by ``pyarrow.json`` into one table when it is described (the
catalog caches the description) and again when it is opened (once per process, kept for the
token and the mask shard; ~1.3 M tokens/s a parse on a loaded 2-core machine,
``benchmarks/jsonl_rows.py``): its token column is then read exactly as an Arrow file's
(:mod:`streamload.formats.arrow.columns`, :mod:`streamload.formats.arrow.masks`). Token ids
are kept as ``uint32`` (``dtype`` may name another): a file is held in memory, 4 bytes a
token, so datasets of many GB are better converted to Parquet first (docs/formats.md). Blank
lines are skipped; messages name a row by its line (1-based, blank lines counted).

The reader is a pyarrow table reader, so it lives in the Arrow family; the ``jsonl`` format
(:class:`~streamload.formats.jsonl.JsonlFormat`) hands such a file to it by name through the
registry (:data:`FORMAT`, an open-only format: never sniffed, listed or configured), and its
shards keep the ``jsonl`` format name, with ``meta["kind"] == "rows"``.

Example: ``{"input_ids": [5, 17, 0], "labels": [-100, 17, 0]}`` then ``{"input_ids": [4, 2],
"labels": [-100, 2]}``: tokens ``[5, 17, 0, 4, 2]``, documents ``[0, 3, 5]``, mask
``[0, 1, 1, 0, 1]``; a second line's ``"labels": [-100]`` is refused as "line 2 has 2 tokens
in column 'input_ids' but 1 flags in its loss-mask column 'labels'".
"""

from __future__ import annotations

import functools
import os
from typing import Any

import numpy as np

from streamload.errors import FormatError
from streamload.formats.arrow._metadata import metadata_columns, row_metadata
from streamload.formats.arrow.columns import (
    column_name,
    import_pyarrow,
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
from streamload.formats.base import (
    ListedFile,
    ReadOptions,
    ShardInfo,
    check_size_unchanged,
    local_path,
)

__all__ = [
    "FORMAT",
    "ROWS_FORMAT",
    "ROWS_KIND",
    "JsonlRowsFormat",
    "JsonlRowsShard",
    "describe_rows",
    "line_numbers",
]

ROWS_FORMAT = "jsonl_rows"
"""This reader's name in the registry (open-only: its shards are ``jsonl`` shards)."""
ROWS_KIND = "rows"
"""``meta["kind"]`` of a shard read as JSONL rows (a record-backed one has none)."""
_BLOCK_BYTES = 1 << 24
"""pyarrow's JSON block: a line longer than it cannot be parsed (a 64k-token row is ~0.5 MB)."""
_AUTO_DTYPE = np.dtype("<u4")


def _parse(source: Any, path: str) -> Any:
    """The rows of a JSONL file (a path or a pyarrow buffer reader) as a pyarrow table whose
    columns are one chunk each.

    Raises:
        FormatError: not JSON lines pyarrow can read (the parser's message names the row),
            or no rows.
    """
    pa = import_pyarrow(path)
    from pyarrow import json as pa_json

    options = pa_json.ReadOptions(block_size=_BLOCK_BYTES)
    try:
        table = pa_json.read_json(source, read_options=options)
    except pa.lib.ArrowException as exc:
        raise FormatError(
            f"{path}: not JSONL rows ({exc}; rows count the non-blank lines from 0): every "
            "line must be a JSON object and a field must hold the same kind of value on every "
            "line (a list of integer token ids)"
        ) from exc
    if table.num_rows == 0:
        raise FormatError(f"{path}: holds no JSON lines; expected one object per document")
    return table.combine_chunks()


@functools.lru_cache(maxsize=4)
def _local_table(path: str, size: int, mtime_ns: int) -> Any:
    """A local file's table, parsed once per process for its token and mask shards (and
    again when the file's size or mtime moves)."""
    return _parse(path, path)


def _read_table(fs: Any, file: ListedFile, local: str | None) -> Any:
    if local is not None:
        return _local_table(local, file.size, os.stat(local).st_mtime_ns)
    pa = import_pyarrow(file.path)
    with fs.open(file.path, "rb") as fh:
        return _parse(pa.BufferReader(fh.read()), file.path)


@functools.lru_cache(maxsize=4)
def _lines(path: str, size: int) -> tuple[int, ...]:
    lines = []
    with open(path, "rb") as fh:
        for number, line in enumerate(fh, start=1):
            if line.strip():
                lines.append(number)
    return tuple(lines)


def line_numbers(path: str) -> tuple[int, ...]:
    """The 1-based line of each row of a local JSONL file (blank lines hold no row)."""
    return _lines(path, os.path.getsize(path))


def _namer(path: str | None) -> Any:
    """How messages name row ``r``: its line in a local file, else ``row r``."""
    if path is None:
        return lambda row: f"row {row}"

    def name(row: int) -> str:
        lines = line_numbers(path)
        return f"line {lines[row]}" if row < len(lines) else f"row {row}"

    return name


def _column(table: Any, column: str, path: str, local: str | None) -> Any:
    """The list array of ``column``, after checking every line holds it.

    Raises:
        FormatError: a line without the field (or with ``null``), naming the first.
    """
    array = table.column(column).chunk(0) if table.column(column).num_chunks else None
    if array is None or array.null_count:
        row = 0 if array is None else int(array.is_null().to_numpy(zero_copy_only=False).argmax())
        count = table.num_rows if array is None else array.null_count
        raise FormatError(
            f"{path}: {_namer(local)(row)} has no field {column!r} (or it is null), and so "
            f"do {count - 1} other line(s); every line needs it, a list per document ([] "
            "for an empty one)"
        )
    return array


def _token_values(table: Any, column: str, path: str, local: str | None) -> Any:
    """``(values, offsets)`` of the token column (:func:`token_lists`).

    Raises:
        FormatError: no line has the field (text lines: their tokenization record is
            missing), it is not a list of integers, or a line lacks it.
    """
    if column not in table.schema.names:
        record = f"{path.rsplit('/', 1)[-1].rsplit('.', 1)[0]}.tok.json"
        raise FormatError(
            f"{path}: no field {column!r} of token ids on any line; the lines have "
            f'{", ".join(table.schema.names)} (name the token field with column = "..."); '
            f"read as text, its tokenization record {record} is missing: prepare the file "
            "with: streamload tokenize --format jsonl --documents FILE --tokenizer TOK.json "
            "--eos-token-id ID"
        )
    token_dtype(table.schema, column, path)  # a list of integers, or a clear refusal
    array = _column(table, column, path, local)
    return token_lists(array, column, path)


def _as_dtype(values: np.ndarray, offsets: np.ndarray, dtype: np.dtype, where: Any) -> np.ndarray:
    """Token ids in ``dtype`` after checking each fits (a cast would wrap silently).

    Raises:
        FormatError: an id below 0 or above the dtype's maximum, naming its line.
    """
    info = np.iinfo(dtype)
    outside = np.flatnonzero((values < max(info.min, 0)) | (values > info.max))
    if outside.size:
        at = int(outside[0])
        row = int(np.searchsorted(offsets - offsets[0], at, side="right")) - 1
        raise FormatError(
            f"{where[0]}: {where[1](row)} holds token id {int(values[at])}, outside [0, "
            f"{info.max}] ({dtype.name}); token ids are non-negative (set dtype to widen)"
        )
    return values.astype(dtype, copy=False)


def describe_rows(fs: Any, file: ListedFile, local: str | None, options: ReadOptions) -> ShardInfo:
    """The shard of a JSONL file of token rows (module docstring).

    Raises:
        FormatError: unreadable lines, no token field on a line, ids that are not integers
            or do not fit the dtype.
    """
    table = _read_table(fs, file, local)
    column = column_name(options.column)
    values, offsets = _token_values(table, column, file.path, local)
    dtype = _AUTO_DTYPE if options.dtype == "auto" else np.dtype(options.dtype).newbyteorder("<")
    _as_dtype(values, offsets, dtype, (file.path, _namer(local)))
    meta: dict[str, Any] = {"kind": ROWS_KIND, "column": column, "documents": table.num_rows}
    others = list_columns(table.schema, column)
    if others:
        meta["list_columns"] = others
    meta["column_types"] = column_types(table.schema)
    tokens = int(offsets[-1]) - int(offsets[0])
    return ShardInfo(file.path, file.relpath, file.size, "jsonl", dtype.str, 0, tokens, None, meta)


class JsonlRowsShard:
    """An opened JSONL file of token rows: the whole column in memory, read by slicing.

    Described with ``meta["mask_of"]`` (:func:`~streamload.formats.loss_mask.mask_shard`),
    the shard is the loss mask of the token column ``mask_of``: its ``column`` read as flags
    (a ``labels`` column checked against the tokens), each line as long as its tokens.
    """

    remote_array = None  # one array in memory: read through slices, no range reads

    def __init__(self, info: ShardInfo) -> None:
        self.info = info
        local = check_size_unchanged(info.path, info.size, info.storage, info.version or None)
        self._table = _local_table(local, info.size, os.stat(local).st_mtime_ns)
        column, mask_of = info.meta["column"], info.meta.get("mask_of")
        where = (info.path, _namer(local))
        tokens, offsets = _token_values(self._table, mask_of or column, info.path, local)
        if mask_of is None:
            self._values = _as_dtype(tokens, offsets, np.dtype(info.dtype), where)
        else:
            array = _column(self._table, column, info.path, local)
            flags, mask_offsets = mask_lists(array, column, info.path)
            check_row_lengths(offsets, mask_offsets, info.path, 0, (mask_of, column), where[1])
            at = (info.path, 0)
            self._values = mask_values(column, flags, tokens, offsets, at, mask_of, where[1])
        self._bounds = offsets.astype(np.int64) - int(offsets[0])
        if int(self._bounds[-1]) != info.num_tokens:
            raise FormatError(
                f"{info.path}: now holds {int(self._bounds[-1])} tokens but held "
                f"{info.num_tokens} at start-up; the file changed"
            )

    def tokens(self, start: int, stop: int) -> np.ndarray:
        return self._values[max(start, 0) : stop]

    def document_bounds(self) -> np.ndarray:
        """Token offsets of the lines (int64, rows + 1; an empty row repeats a value)."""
        return self._bounds

    def document_metadata(self, i: int, id_column: str | None = None) -> dict[str, Any]:
        """Line ``i``'s scalar fields, its id (``id_column``, else ``id``) first."""
        columns = metadata_columns(self._table.schema, id_column, self.info.path)
        if not 0 <= i < self._table.num_rows:
            raise IndexError(f"document {i} out of range [0, {self._table.num_rows})")
        return row_metadata(self._table, i, columns) if columns else {}


class JsonlRowsFormat:
    """Describes and opens JSONL rows of token ids for the ``jsonl`` format (never sniffed,
    listed or configured: :class:`~streamload.formats.jsonl.JsonlFormat` hands files to it)."""

    name = ROWS_FORMAT
    has_documents = True

    def sniff(self, path: str, head: bytes, siblings: frozenset[str]) -> bool:
        return False

    def describe(self, fs: Any, file: ListedFile, options: ReadOptions) -> ShardInfo:
        return describe_rows(fs, file, local_path(file.path), options)

    def open(self, info: ShardInfo) -> JsonlRowsShard:
        return JsonlRowsShard(info)


FORMAT = JsonlRowsFormat()
