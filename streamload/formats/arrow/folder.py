"""Write a Hugging Face ``datasets.save_to_disk`` folder that ``datasets.load_from_disk``
opens: ``data-00000-of-0000N.arrow``, ``dataset_info.json``, ``state.json``.

The layout is that of datasets 5.2.0 (``Dataset.save_to_disk``; the fixtures in
``tests/fixtures/hf`` were written by it, ``tests/fixtures/hf_streamload`` by this writer
and read back by it):

* ``data-{index:05d}-of-{count:05d}.arrow``: Arrow IPC streams of one row per document
  (:mod:`streamload.formats.arrow._write`: ``input_ids`` ``list<dtype>``, with masks a
  ``labels_mask`` ``list<uint8>`` of the same shape, record batches of 1,000 rows);
* ``dataset_info.json``: ``{"citation", "description", "features", "homepage",
  "license"}`` (keys sorted, ``indent=2``), the features ``List(Value(dtype))``;
* ``state.json``: ``_data_files`` (the files, in row order), ``_fingerprint``,
  ``_format_columns: null``, ``_format_kwargs: {}``, ``_format_type: null``,
  ``_output_all_columns: false``, ``_split: null`` (``sort_keys``, ``indent=2``).

``datasets`` cuts a dataset into shards of equal row counts sized by ``max_shard_size``;
this writer, which sees the documents once, rolls a file where the next document would take
it past ``max_file_bytes`` (:mod:`streamload.formats.arrow._rolling_folder`, as the Parquet
folder writer: 500 MB of Arrow row bytes, masks included; documents never split). The
fingerprint, which ``datasets`` keys its ``map`` cache files by (they go into this folder),
is a 64-bit BLAKE2b of the dtype, every row's length, tokens and flags: the same data gives
the same folder, byte for byte, and other data another fingerprint.

Example: documents ``[5, 6, 0]``, ``[7, 0]`` as uint16 with ``max_file_bytes = 16`` give
``data-00000-of-00002.arrow`` (the first row: 10 bytes; with the second it would be 18)
and ``data-00001-of-00002.arrow``.
"""

from __future__ import annotations

import hashlib
import json
import os
from typing import Any

import numpy as np

from streamload.formats.arrow._rolling_folder import (
    MAX_FILE_BYTES,
    RollingFolderWriter,
)
from streamload.formats.arrow._write import BATCH_ROWS, ArrowStreamWriter, features
from streamload.formats.arrow.save_to_disk import INFO_FILE, STATE_FILE

__all__ = ["MAX_FILE_BYTES", "ArrowFolderWriter", "data_file_name"]


def data_file_name(index: int, count: int) -> str:
    """``data-{index:05d}-of-{count:05d}.arrow``, ``save_to_disk``'s name of a shard."""
    return f"data-{index:05d}-of-{count:05d}.arrow"


class ArrowFolderWriter(RollingFolderWriter):
    """Write documents as a ``save_to_disk`` folder (module docstring).

    Args:
        folder: The output folder; it must not exist, or be empty.
        dtype: Token dtype (the list's value type).
        max_file_bytes: Arrow bytes of rows per file (module docstring).
        batch_rows: Rows per record batch (``datasets``' ``writer_batch_size``).
        save_loss_masks: Write each document's loss mask as its ``labels_mask`` row.

    Raises:
        ValueError: a bad dtype or a limit below 1.
        ConfigError: the folder exists and is not empty.
    """

    _file: ArrowStreamWriter

    def __init__(
        self,
        folder: str | os.PathLike[str],
        dtype: Any,
        *,
        max_file_bytes: int = MAX_FILE_BYTES,
        batch_rows: int = BATCH_ROWS,
        save_loss_masks: bool = False,
    ) -> None:
        if batch_rows < 1:
            raise ValueError(f"{os.fspath(folder)}: batch_rows {batch_rows} must be >= 1")
        self._batch_rows = batch_rows
        super().__init__(
            folder, dtype, max_file_bytes=max_file_bytes, save_loss_masks=save_loss_masks
        )
        self._hash = hashlib.blake2b(self._dtype.str.encode(), digest_size=8)

    def _part_name(self, index: int) -> str:
        return f"data-{index:05d}.arrow"

    def _file_name(self, index: int, count: int) -> str:
        return data_file_name(index, count)

    def _open_part(self, path: str) -> list[Any]:
        self._file = ArrowStreamWriter(
            path, self._dtype, masks=self._save_masks, batch_rows=self._batch_rows
        )
        return [self._file]

    def _write_row(self, doc: np.ndarray, mask: np.ndarray | None) -> None:
        self._file.add_document(doc, mask)
        self._hash.update(np.int64(doc.size).tobytes())
        self._hash.update(doc.data)
        if mask is not None:
            self._hash.update(np.ascontiguousarray(mask != 0).data)

    def _write_companions(self, names: list[str]) -> None:
        """``dataset_info.json`` and ``state.json``, as ``save_to_disk`` writes them."""
        info = {
            "citation": "",
            "description": "",
            "features": features(self._dtype, self._save_masks),
            "homepage": "",
            "license": "",
        }
        state: dict[str, Any] = {
            "_data_files": [{"filename": name} for name in names],
            "_fingerprint": self._hash.hexdigest(),
            "_format_columns": None,
            "_format_kwargs": {},
            "_format_type": None,
            "_output_all_columns": False,
            "_split": None,
        }
        with open(os.path.join(self._inner, INFO_FILE), "w", encoding="utf-8") as fh:
            json.dump(info, fh, indent=2)
        with open(os.path.join(self._inner, STATE_FILE), "w", encoding="utf-8") as fh:
            json.dump(state, fh, indent=2, sort_keys=True)
