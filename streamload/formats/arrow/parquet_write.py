"""Write a Parquet file of documents: what ``streamload convert --to parquet`` publishes.

One row per document: an ``input_ids`` column of ``list<dtype>`` and, with masks, a
``labels_mask`` column of ``list<uint8>`` holding each token's loss-mask flag (0/1), the
column the Arrow ``save_to_disk`` writer gives (:mod:`streamload.formats.arrow._write`) and
the Parquet reader finds by name (:mod:`streamload.formats.arrow.masks`). Rows are buffered
until they hold ``row_group_tokens`` tokens, then written as one row group (compressed with
pyarrow's default codec, with statistics, which make describing the file a footer read).

Example: documents ``[5, 6, 0]`` and ``[7, 0]`` with masks ``[0, 1, 1]`` and ``[1, 1]`` give
one row group of two rows: ``input_ids`` ``[[5, 6, 0], [7, 0]]``, ``labels_mask``
``[[0, 1, 1], [1, 1]]``.
"""

from __future__ import annotations

import contextlib
import os
from typing import Any

import numpy as np

from streamload.formats._shard_masks import document_mask
from streamload.formats._stack_writer import StackWriter
from streamload.formats._writer_input import as_document
from streamload.formats._writer_input import token_dtype as writer_dtype
from streamload.formats.arrow._write import MASK_COLUMN, MASK_DTYPE
from streamload.formats.arrow.columns import DEFAULT_COLUMN, import_pyarrow
from streamload.util.files import atomic_output

__all__ = ["MASK_COLUMN", "ROW_GROUP_TOKENS", "ParquetWriter"]

ROW_GROUP_TOKENS = 1 << 20
"""Tokens per row group :class:`ParquetWriter` aims at (whole documents: a row group ends
with the first document that reaches it): ~2-8 MiB decoded, small enough to decode per
window run, large enough for the Hub's readers."""


class ParquetWriter(StackWriter):
    """Write documents (and their loss masks) as a Parquet file (module docstring).

    Output goes to a temporary name renamed into place by :meth:`close`; an exception inside
    the ``with`` block leaves nothing.

    Args:
        path: Output ``.parquet`` path.
        dtype: Token dtype (the list's value type).
        row_group_tokens: Tokens per row group (whole documents).
        column: Name of the token column.
        masks: Write a ``labels_mask`` column; each document then comes with its flags.
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        dtype: Any,
        row_group_tokens: int = ROW_GROUP_TOKENS,
        column: str = DEFAULT_COLUMN,
        *,
        masks: bool = False,
    ) -> None:
        self.path = os.fspath(path)
        if row_group_tokens < 1:
            raise ValueError(f"{self.path}: row_group_tokens = {row_group_tokens} must be >= 1")
        pa = import_pyarrow(self.path)
        import pyarrow.parquet as pq

        self._dtype = writer_dtype(dtype, self.path)
        self._row_group_tokens = row_group_tokens
        self._masks = masks
        self._pending: list[np.ndarray] = []
        self._flags: list[np.ndarray] = []
        self._pending_tokens = 0
        self._closed = False
        self._type = pa.list_(pa.from_numpy_dtype(self._dtype))
        fields = [pa.field(column, self._type)]
        if masks:
            fields.append(pa.field(MASK_COLUMN, pa.list_(pa.from_numpy_dtype(MASK_DTYPE))))
        self._schema = pa.schema(fields)
        self._stack = contextlib.ExitStack()
        tmp = self._stack.enter_context(atomic_output(self.path))
        self._writer = pq.ParquetWriter(tmp, self._schema)
        self._stack.callback(self._writer.close)

    def add_document(self, tokens: Any, *, loss_mask: Any = None) -> None:
        """Append one document (1-D integer tokens fitting the dtype; may be empty); with
        ``masks``, ``loss_mask`` holds its flags (nonzero = trained, one per token; ``None``:
        all trained).

        Raises:
            ValueError: tokens that are not 1-D integers of the dtype's range, or a mask of
                another length.
        """
        doc = as_document(tokens, self._dtype, self.path)
        if self._masks:
            flags = document_mask(loss_mask, doc, self.path)
            self._flags.append((flags != 0).astype(MASK_DTYPE))
        self._pending.append(doc)
        self._pending_tokens += doc.shape[0]
        if self._pending_tokens >= self._row_group_tokens:
            self._flush()

    def _flush(self) -> None:
        """Write the buffered documents as one row group."""
        if not self._pending:
            return
        import pyarrow as pa

        lengths = np.fromiter((d.shape[0] for d in self._pending), np.int64, len(self._pending))
        offsets = np.zeros(lengths.shape[0] + 1, dtype=np.int64)
        np.cumsum(lengths, out=offsets[1:])
        if offsets[-1] >= 2**31:  # list<...> has 32-bit offsets
            raise ValueError(
                f"{self.path}: a row group of {offsets[-1]} tokens does not fit 32-bit list "
                "offsets; documents of over 2**31 tokens cannot be written"
            )
        starts = pa.array(offsets, pa.int32())
        values = pa.array(np.concatenate(self._pending), self._type.value_type)
        arrays = [pa.ListArray.from_arrays(starts, values)]
        if self._masks:
            arrays.append(pa.ListArray.from_arrays(starts, pa.array(np.concatenate(self._flags))))
        table = pa.Table.from_arrays(arrays, schema=self._schema)
        self._writer.write_table(table, row_group_size=lengths.shape[0])
        self._pending, self._flags, self._pending_tokens = [], [], 0

    def close(self) -> None:
        """Write the last row group, close the file and move it into place."""
        if self._closed:
            return
        self._flush()
        self._closed = True
        self._stack.close()
