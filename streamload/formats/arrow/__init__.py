"""Arrow IPC and Parquet token tables (pyarrow, the ``arrow`` extra).

* ``arrow`` — Arrow IPC files and ``datasets.save_to_disk`` folders (reader);
* ``parquet`` — Parquet files (reader and ``ParquetWriter``);
* ``columns`` — the token column: found by name, type-checked, decoded;
* ``masks`` — a table's loss-mask and id columns;
* ``save_to_disk`` — a ``save_to_disk`` folder's own record of its files;
* ``folder`` — write a ``save_to_disk`` folder; ``parquet_folder`` — a Hub-style Parquet one;
* ``jsonl_rows`` — JSONL rows of token ids (``input_ids`` and SFT masks) parsed into a table,
  for the ``jsonl`` format;
* ``_metadata`` (per-document metadata columns), ``_pieces`` (record batches or row groups
  as consecutive pieces), ``_row_groups`` (decoded row groups, bounded), ``_write`` (one
  Arrow IPC stream as ``datasets`` writes it), ``_rolling_folder`` (output cut into files).

The package re-exports the names of :mod:`streamload.formats.arrow.arrow`: that module was
``streamload.formats.arrow`` before the formats were grouped by family, and imports of the old
path keep working.
"""

from streamload.formats.arrow.arrow import (
    ARROW_FILE_MAGIC,
    FORMAT,
    STREAM_CONTINUATION,
    ArrowFormat,
    ArrowShard,
)

__all__ = [
    "ARROW_FILE_MAGIC",
    "FORMAT",
    "STREAM_CONTINUATION",
    "ArrowFormat",
    "ArrowShard",
]
