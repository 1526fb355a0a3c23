"""The token column of an Arrow or Parquet table: found by name, type-checked, decoded.

Hugging Face ``datasets`` stores a tokenized corpus as one row per document with a
``list<int*>`` column (``input_ids`` by default): the list offsets are the document index and
the list values, concatenated, are the token stream. Both the Arrow IPC reader
(:mod:`streamload.formats.arrow.arrow`) and the Parquet reader
(:mod:`streamload.formats.arrow.parquet`) check the column here, so a missing column, a float,
string or nested column and nulls are refused with the same message, naming the file, the
column and what it holds.

pyarrow is an optional dependency (the ``arrow`` extra); it is imported only when an Arrow or
Parquet file is described or read.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import numpy as np

from streamload.errors import FormatError
from streamload.formats._io_errors import is_parse_error

__all__ = [
    "DEFAULT_COLUMN",
    "ID_COLUMN",
    "arrow_errors",
    "column_name",
    "document_id_column",
    "import_pyarrow",
    "list_columns",
    "list_values",
    "token_dtype",
    "token_lists",
]

DEFAULT_COLUMN = "input_ids"
"""The token column when a source names none (what ``datasets`` tokenizing writes)."""
ID_COLUMN = "id"
"""The document id column ``docs`` and ``show`` print when a source names none."""


def import_pyarrow(path: str) -> Any:
    """The ``pyarrow`` module, or a :class:`FormatError` saying which extra installs it."""
    try:
        import pyarrow
    except ImportError:
        raise FormatError(
            f"{path}: reading Arrow and Parquet files needs pyarrow; install it with "
            "pip install 'streamload[arrow]'"
        ) from None
    return pyarrow


@contextlib.contextmanager
def arrow_errors(path: str, kind: str) -> Iterator[None]:
    """pyarrow's parse errors inside the block as :class:`FormatError` naming ``path``
    (``kind``: "Arrow IPC", "Parquet").

    Converted: any ``pyarrow.lib.ArrowException``, and a plain ``OSError`` without an
    ``errno`` (exactly that type: what pyarrow raises for a corrupt or truncated file, e.g.
    "Couldn't deserialize thrift"). Everything else propagates unchanged, so the storage
    layer's retries see a network error, not a corrupt file: pyarrow re-raises what a Python
    file object raised, and a remote file system's errors are ``OSError`` subclasses
    (``ConnectionResetError``, ``TimeoutError``...) or carry an ``errno`` (s3fs turns a 500
    into ``OSError(EREMOTEIO, ...)``: issue 36, once refused as a corrupt Parquet footer).
    """
    pa = import_pyarrow(path)
    try:
        yield
    except (pa.lib.ArrowException, OSError) as exc:
        if not isinstance(exc, pa.lib.ArrowException) and not is_parse_error(exc):
            raise
        raise FormatError(
            f"{path}: not a readable {kind} file ({exc}); it is truncated or corrupt"
        ) from exc


def column_name(column: str | None) -> str:
    """The configured token column, else :data:`DEFAULT_COLUMN`."""
    return column or DEFAULT_COLUMN


def document_id_column(schema: Any, id_column: str | None, path: str) -> str | None:
    """The column whose row values are the documents' ids: ``id_column``, else
    :data:`ID_COLUMN` when the file has one (``None`` when it has not).

    Raises:
        FormatError: the file has no column ``id_column`` (the columns that exist are named).
    """
    if id_column is None:
        return ID_COLUMN if ID_COLUMN in schema.names else None
    if id_column not in schema.names:
        raise FormatError(
            f"{path}: no column {id_column!r} to show as the document id; the file has "
            f"columns {', '.join(schema.names)}"
        )
    return id_column


def token_dtype(schema: Any, column: str, path: str) -> np.dtype:
    """The numpy dtype of the tokens in ``column`` of a pyarrow ``schema``.

    Raises:
        FormatError: no such column (the columns that exist are listed), or it is not a
            ``list``/``large_list`` of integers (the type found is named).
    """
    import pyarrow as pa

    if column not in schema.names:
        raise FormatError(
            f"{path}: no column {column!r}; the file has columns {', '.join(schema.names)}; "
            'name the token column with column = "..." in [[sources]]'
        )
    kind = schema.field(column).type
    if not (pa.types.is_list(kind) or pa.types.is_large_list(kind)):
        raise FormatError(
            f"{path}: column {column!r} is {kind}; expected a list of integer token ids per "
            "row (list<int32>, large_list<int64>...), one row per document"
        )
    value = kind.value_type
    if not pa.types.is_integer(value):
        raise FormatError(
            f"{path}: column {column!r} holds {value} values; token ids must be integers "
            "(int8..int64, uint8..uint64)"
        )
    return np.dtype(value.to_pandas_dtype()).newbyteorder("<")


def list_columns(schema: Any, column: str) -> str:
    """The other list-of-integer (or boolean) columns, comma-separated: candidates for a
    per-token mask (``attention_mask``, a loss mask) that ``inspect`` may report."""
    import pyarrow as pa

    found = []
    for field in schema:
        kind = field.type
        if field.name == column or not (pa.types.is_list(kind) or pa.types.is_large_list(kind)):
            continue
        if pa.types.is_integer(kind.value_type) or pa.types.is_boolean(kind.value_type):
            found.append(field.name)
    return ",".join(found)


def token_lists(array: Any, column: str, where: str) -> tuple[np.ndarray, np.ndarray]:
    """The tokens and document offsets of one list array (a record batch's or row group's
    token column), as numpy arrays sharing the array's buffers (no copy).

    Returns:
        ``(values, offsets)``: ``values`` holds exactly the rows' tokens, ``offsets`` the
        ``rows + 1`` list offsets, ``offsets[0]`` the position of ``values[0]`` in the list
        array's value buffer (subtract it to get offsets into ``values``).

    Raises:
        FormatError: a null row or a null token (named by the row where known).
    """
    values, offsets = list_values(array, column, where)
    return values.to_numpy(zero_copy_only=True), offsets


def list_values(array: Any, column: str, where: str, what: str = "token id") -> tuple[Any, Any]:
    """The values of a list array's rows (a pyarrow array, no copy) and its ``rows + 1``
    list offsets (numpy, ``offsets[0]`` where the values begin in the array's buffer).

    Raises:
        FormatError: a null row or a null value (``what``: "token id", "loss-mask flag").
    """
    if array.null_count:
        row = int(array.is_null().to_numpy(zero_copy_only=False).argmax())
        raise FormatError(
            f"{where}: column {column!r} has {array.null_count} null row(s), the first at "
            f"row {row}; every row must be a list of {what}s (an empty document is [])"
        )
    offsets = array.offsets.to_numpy()
    first, last = int(offsets[0]), int(offsets[-1])
    values = array.values.slice(first, last - first)
    if values.null_count:
        raise FormatError(
            f"{where}: column {column!r} holds {values.null_count} null {what}(s); every "
            f"{what} must be {'an integer' if what == 'token id' else '0 or 1'}"
        )
    return values, offsets
