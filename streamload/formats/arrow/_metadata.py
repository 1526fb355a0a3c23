"""Per-document metadata of Arrow and Parquet rows: the row's scalar column values.

A Hugging Face dataset keeps the columns it was tokenized from beside the tokens (``id``,
``source``, ``url``, a score, a timestamp...). ``streamload docs`` and ``show`` report them
as the document's metadata (:func:`~streamload.tools.documents.document_metadata`), as
Dolma's CSV gives ``id``, ``src`` and ``loc``:

* the id column first, under the key ``id``: the column a source names (``id_column``),
  else the column ``id`` where the file has one (a file's own ``id`` column is then left
  out: its key is taken);
* then every other *scalar* column, in the file's column order: strings, integers, floats,
  booleans and nulls as they are; dates, times and timestamps as ISO 8601 text
  (``2024-01-02T03:04:05.123456789``, ``Z`` or ``+0100`` for a time zone), decimals as text;
  dictionary-encoded columns by their values. List, struct, map, binary, duration and
  interval columns (the tokens, a loss mask, ``attention_mask``, raw bytes) are not
  metadata, nor is a name that two columns share.

Example: a row of ``input_ids`` (``list<int32>``), ``id``, ``source``, ``score``
(``double``), ``tags`` (``list<string>``) and ``crawled`` (``timestamp[s]``) gives
``{"id": "doc-3", "source": "web", "score": 0.5, "crawled": "2024-01-02T03:04:05"}``.

Only the row asked for is converted: its values of a record batch (Arrow, views of the
map) or of the row group's decoded scalar columns (Parquet).
"""

from __future__ import annotations

import bisect
from typing import Any

from streamload.formats.arrow.columns import ID_COLUMN, document_id_column

__all__ = ["is_scalar", "locate_row", "metadata_columns", "row_metadata"]


def is_scalar(kind: Any) -> bool:
    """Whether a column of pyarrow type ``kind`` holds one plain value per row (module
    docstring: what is and is not metadata)."""
    import pyarrow as pa

    types = pa.types
    if types.is_dictionary(kind):
        return is_scalar(kind.value_type)
    return bool(
        types.is_null(kind)
        or types.is_boolean(kind)
        or types.is_integer(kind)
        or types.is_floating(kind)
        or types.is_string(kind)
        or types.is_large_string(kind)
        or types.is_string_view(kind)
        or types.is_date(kind)
        or types.is_time(kind)
        or types.is_timestamp(kind)
        or types.is_decimal(kind)
    )


def metadata_columns(schema: Any, id_column: str | None, path: str) -> list[tuple[str, str]]:
    """The columns of a pyarrow ``schema`` to report, as ``(column, key)`` pairs: the id
    column as ``id`` first (``id_column``, else ``id`` where the file has one), then the
    other scalar columns, in the schema's order (``[]``: nothing to report).

    Raises:
        FormatError: the file has no column ``id_column`` (the columns that exist are named).
    """
    id_name = document_id_column(schema, id_column, path)
    names = list(schema.names)
    columns = [] if id_name is None else [(id_name, ID_COLUMN)]
    for field in schema:
        name = field.name
        if name in (id_name, ID_COLUMN) or names.count(name) > 1:
            continue
        if is_scalar(field.type):
            columns.append((name, name))
    return columns


def locate_row(starts: list[int], row: int) -> tuple[int, int]:
    """``(piece, row in the piece)`` of shard row ``row``, where ``starts`` holds each
    piece's (record batch's, row group's) first row and then the row count.

    Raises:
        IndexError: ``row`` is not in ``[0, starts[-1])``.
    """
    if not 0 <= row < starts[-1]:
        raise IndexError(f"document {row} out of range [0, {starts[-1]})")
    piece = bisect.bisect_right(starts, row) - 1
    return piece, row - starts[piece]


def row_metadata(table: Any, row: int, columns: list[tuple[str, str]]) -> dict[str, Any]:
    """``{key: value}`` of row ``row`` of a pyarrow record batch or table holding
    ``columns`` (:func:`metadata_columns`), as JSON-ready Python values."""
    return {key: _plain(table.column(name)[row]) for name, key in columns}


def _plain(scalar: Any) -> Any:
    """A pyarrow scalar as a JSON-ready value: temporal and decimal values as text."""
    import pyarrow as pa

    if isinstance(scalar, pa.DictionaryScalar):
        scalar = scalar.value
    if scalar is None or not scalar.is_valid:
        return None
    kind = scalar.type
    types = pa.types
    if types.is_timestamp(kind):
        return str(scalar.cast(pa.string()).as_py()).replace(" ", "T", 1)
    if types.is_date(kind) or types.is_time(kind) or types.is_decimal(kind):
        return scalar.cast(pa.string()).as_py()
    return scalar.as_py()
