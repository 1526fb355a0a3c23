"""Write one Arrow IPC stream of documents as ``datasets``' ``ArrowWriter`` does, and the
``datasets`` features that describe it.

A ``save_to_disk`` data file (datasets 5.2.0, ``Dataset._save_to_disk_single``) is an Arrow
IPC *stream* (no ``ARROW1`` magic; record batches, then the end-of-stream marker) whose
schema carries the dataset's features as metadata: ``huggingface`` =
``json.dumps({"info": {"features": ...}})``. Each row here is one document: the token column
``input_ids`` is ``list<dtype>`` (``datasets``' ``List(Value(dtype))``), and with masks a
``labels_mask`` column of the same shape holds each token's loss-mask flag as ``uint8``
0/1 (``List(Value("uint8"))``; 8-bit flags are what streamload's reader views in place).

``datasets`` cuts the rows into record batches of ``writer_batch_size`` rows: at most
1,000 (``DEFAULT_MAX_BATCH_SIZE``), fewer for rows of over 100 kB on average
(``MAX_ROW_GROUP_SIZE``, 100 MB per batch). :class:`ArrowStreamWriter` ends a batch after
``batch_rows`` rows, or once it holds ``batch_bytes`` of row data, so a batch of small
documents is ``datasets``' own and a batch of long ones stays near 100 MB.

Example: documents ``[5, 6, 0]`` and ``[7, 0]`` as uint16 with masks give one record batch
of 2 rows: ``input_ids`` offsets ``[0, 3, 5]``, values ``[5, 6, 0, 7, 0]``; ``labels_mask``
the same offsets, flags ``[0, 1, 1, 1, 1]`` for a first token untrained.
"""

from __future__ import annotations

import contextlib
import json
import os
from typing import Any

import numpy as np

from streamload.formats._shard_masks import document_mask
from streamload.formats._stack_writer import StackWriter
from streamload.formats._writer_input import as_document, token_dtype
from streamload.formats.arrow._rolling_folder import OFFSET_BYTES
from streamload.formats.arrow.columns import DEFAULT_COLUMN, import_pyarrow
from streamload.util.files import atomic_output

__all__ = [
    "BATCH_BYTES",
    "BATCH_ROWS",
    "MASK_COLUMN",
    "ArrowStreamWriter",
    "features",
    "schema_metadata",
]

BATCH_ROWS = 1000
"""Rows per record batch: ``datasets``' ``writer_batch_size`` (``DEFAULT_MAX_BATCH_SIZE``)."""
BATCH_BYTES = 100 * 10**6
"""Row bytes that end a record batch early: ``datasets``' ``MAX_ROW_GROUP_SIZE``."""
MASK_COLUMN = "labels_mask"
"""The loss-mask column written beside the tokens (read back by name; OLMo-core's name)."""
MASK_DTYPE = np.dtype("u1")


def _list_feature(dtype: str) -> dict[str, Any]:
    """``datasets``' JSON of ``List(Value(dtype))`` (``Sequence`` in datasets 5 is ``List``)."""
    return {"feature": {"dtype": dtype, "_type": "Value"}, "_type": "List"}


def features(dtype: np.dtype, masks: bool) -> dict[str, Any]:
    """The ``datasets`` features of the rows written: ``input_ids`` (and ``labels_mask``)."""
    found = {DEFAULT_COLUMN: _list_feature(np.dtype(dtype).name)}
    if masks:
        found[MASK_COLUMN] = _list_feature(MASK_DTYPE.name)
    return found


def schema_metadata(dtype: np.dtype, masks: bool) -> dict[str, str]:
    """The schema metadata ``ArrowWriter`` writes (``_build_metadata``, no fingerprint)."""
    return {"huggingface": json.dumps({"info": {"features": features(dtype, masks)}})}


class ArrowStreamWriter(StackWriter):
    """Write documents (and their loss masks) as one Arrow IPC stream (module docstring).

    Output goes to a temporary name renamed into place by :meth:`close`; an exception inside
    the ``with`` block leaves nothing.

    Args:
        path: Output ``.arrow`` path.
        dtype: Token dtype (the list's value type).
        masks: Write a ``labels_mask`` column; each document then comes with its flags.
        batch_rows: Rows per record batch.
        batch_bytes: Row bytes that end a record batch early.

    Raises:
        ValueError: a bad dtype, or a batch size below 1.
        FormatError: pyarrow is not installed.
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        dtype: Any,
        *,
        masks: bool = False,
        batch_rows: int = BATCH_ROWS,
        batch_bytes: int = BATCH_BYTES,
    ) -> None:
        self.path = os.fspath(path)
        if batch_rows < 1 or batch_bytes < 1:
            raise ValueError(
                f"{self.path}: batch_rows {batch_rows} and batch_bytes {batch_bytes} must be >= 1"
            )
        pa = import_pyarrow(self.path)
        self._dtype = token_dtype(dtype, self.path)
        self._masks = masks
        self._limits = (batch_rows, batch_bytes)
        self._docs: list[np.ndarray] = []
        self._flags: list[np.ndarray] = []
        self._bytes = 0
        self._closed = False
        fields = [pa.field(DEFAULT_COLUMN, pa.list_(pa.from_numpy_dtype(self._dtype)))]
        if masks:
            fields.append(pa.field(MASK_COLUMN, pa.list_(pa.uint8())))
        self._schema = pa.schema(fields, metadata=schema_metadata(self._dtype, masks))
        self._stack = contextlib.ExitStack()
        tmp = self._stack.enter_context(atomic_output(self.path))
        self._writer = pa.ipc.new_stream(tmp, self._schema)
        self._stack.callback(self._writer.close)

    def add_document(self, tokens: Any, loss_mask: Any = None) -> None:
        """Append one document as a row; with ``masks``, ``loss_mask`` holds its flags
        (nonzero = trained, one per token; ``None``: all trained).

        Raises:
            ValueError: tokens that are not 1-D integers of the dtype's range, or a mask
                of another length.
        """
        doc = as_document(tokens, self._dtype, self.path)
        self._docs.append(doc)
        self._bytes += doc.nbytes + OFFSET_BYTES
        if self._masks:
            flags = document_mask(loss_mask, doc, self.path)
            self._flags.append((flags != 0).astype(MASK_DTYPE))
            self._bytes += doc.size + OFFSET_BYTES
        if len(self._docs) >= self._limits[0] or self._bytes >= self._limits[1]:
            self._flush()

    def _flush(self) -> None:
        """Write the buffered rows as one record batch."""
        if not self._docs:
            return
        import pyarrow as pa

        offsets = np.zeros(len(self._docs) + 1, dtype=np.int64)
        np.cumsum([d.shape[0] for d in self._docs], out=offsets[1:])
        if offsets[-1] >= 2**31:  # list<...> has 32-bit offsets
            raise ValueError(
                f"{self.path}: a record batch of {offsets[-1]} tokens does not fit 32-bit list "
                "offsets; documents of over 2**31 tokens cannot be written"
            )
        starts = pa.array(offsets, pa.int32())
        columns = [pa.ListArray.from_arrays(starts, pa.array(np.concatenate(self._docs)))]
        if self._masks:
            columns.append(pa.ListArray.from_arrays(starts, pa.array(np.concatenate(self._flags))))
        self._writer.write_batch(pa.RecordBatch.from_arrays(columns, schema=self._schema))
        self._docs, self._flags, self._bytes = [], [], 0

    def close(self) -> None:
        """Write the last record batch, the end-of-stream marker, and move the file into
        place."""
        if self._closed:
            return
        self._flush()
        self._closed = True
        self._stack.close()
