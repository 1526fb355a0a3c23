"""Rows of text tables: the columns a tokenizer reads from a Parquet or Arrow IPC file.

A Hugging Face dataset of text is a table with one row per document: ``text`` (a string),
often ``id`` and nested ``meta`` (a struct). :func:`iter_text_rows` gives each row as a dict
of the columns asked for, as pyarrow's ``to_pylist`` converts them (strings as ``str``,
structs as dicts, lists as lists, nulls as ``None``), one record batch at a time, so a file
of any size is read in bounded memory:

* ``.parquet`` — ``pyarrow.parquet.ParquetFile.iter_batches`` over an fsspec file object
  (only the asked-for columns are decoded; a remote file is read by range);
* ``.arrow`` — an IPC stream (what ``datasets.save_to_disk`` writes) or an IPC file,
  through :func:`~streamload.formats.arrow.arrow.ipc_batches`, the token reader's own:
  memory-mapped when local, checked for its end-of-stream marker.

What the rows hold is not checked here (a null text, an int id): the caller's rules decide.

Example: ``iter_text_rows("train.parquet", ["text", "id"])`` yields ``{"text": "The quick
brown fox", "id": "t0"}``, ...; a file without ``text`` raises ``train.parquet has no column
'text' (its columns: content, id)``.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import fsspec

from streamload.errors import ConfigError, FormatError
from streamload.formats.arrow.arrow import ipc_batches
from streamload.formats.arrow.columns import arrow_errors, import_pyarrow
from streamload.formats.text_columns import requested_columns

__all__ = ["TEXT_TABLE_SUFFIXES", "iter_text_rows"]

TEXT_TABLE_SUFFIXES = (".parquet", ".arrow")
"""The file names read: Parquet, and Arrow IPC (stream or file format)."""


def iter_text_rows(
    url: str,
    columns: Sequence[str],
    storage_options: Mapping[str, Any] | None = None,
    batch_rows: int = 1024,
) -> Iterator[dict[str, Any]]:
    """Each row of a ``.parquet`` or ``.arrow`` file, as a dict of ``columns``, in file order.

    Args:
        url: A local path or an fsspec URL.
        columns: Top-level columns to read (a name given twice is read once).
        storage_options: fsspec options of the file's file system (credentials, endpoint).
        batch_rows: Rows converted to Python at a time.

    Yields:
        ``{column: value}`` per row, values as pyarrow's ``to_pylist`` gives them.

    Raises:
        MissingColumnError: (a :class:`FormatError`) a column the file does not have, naming
            the columns it has.
        FormatError: another suffix, a file pyarrow cannot parse (truncated, corrupt), or
            pyarrow missing.
        OSError: the file cannot be read (missing, a network error), unchanged so a caller's
            retries see it.
    """
    if batch_rows < 1:
        raise ConfigError(f"batch_rows is {batch_rows}; expected at least 1")
    if not url.endswith(TEXT_TABLE_SUFFIXES):
        raise FormatError(
            f"{url}: not a {' or '.join(TEXT_TABLE_SUFFIXES)} file; text tables are read "
            "from Parquet and Arrow IPC files by their suffix"
        )
    import_pyarrow(url)
    fs, _ = fsspec.core.url_to_fs(url, **dict(storage_options or {}))
    if url.endswith(".parquet"):
        return _parquet_rows(fs, url, columns, batch_rows)
    return _ipc_rows(fs, url, columns, batch_rows)


def _parquet_rows(
    fs: Any, url: str, columns: Sequence[str], batch_rows: int
) -> Iterator[dict[str, Any]]:
    import pyarrow.parquet as pq

    with fs.open(url, "rb") as fh, arrow_errors(url, "Parquet"):
        parquet = pq.ParquetFile(fh)
        names = requested_columns(url, columns, parquet.schema_arrow.names)
        for batch in parquet.iter_batches(batch_size=batch_rows, columns=names, use_threads=False):
            yield from batch.to_pylist()


def _ipc_rows(
    fs: Any, url: str, columns: Sequence[str], batch_rows: int
) -> Iterator[dict[str, Any]]:
    with ipc_batches(fs, url, fs.size(url)) as (schema, batches, _kind):
        names = requested_columns(url, columns, schema.names)
        for batch in batches:
            part = batch.select(names)
            for start in range(0, part.num_rows, batch_rows):
                yield from part.slice(start, batch_rows).to_pylist()
