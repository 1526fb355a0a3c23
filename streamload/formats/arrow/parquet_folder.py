"""Write a folder of Hub-sized Parquet files: ``train-00000-of-00003.parquet``, ….

The names are those recent ``datasets``' ``push_to_hub`` gives a split's shards
(``{split}-{index:05d}-of-{count:05d}.parquet``; older versions added a fingerprint), which
the Hub reads as split ``train`` and a folder listing sorts in row order. Each file is what
:class:`ParquetWriter` writes (one ``input_ids`` column, row groups of whole documents of
about ``ROW_GROUP_TOKENS`` tokens); a file ends before the document that would take its
data past ``max_file_bytes``, measured as ``datasets`` measures ``max_shard_size`` (the
Arrow bytes of the rows: the tokens, plus 4 bytes of list offset per document). The file
itself is smaller when its tokens compress, and up to ~15-30% larger when they do not
(random ids), as ``datasets``' shards are. Documents are never split
(:mod:`streamload.formats.arrow._rolling_folder`, shared with the Arrow ``save_to_disk`` writer).

Example: three documents of 100, 100 and 50 uint16 tokens with ``max_file_bytes = 450``:
the first two take 408 bytes, the third would make 512, so ``train-00000-of-00002.parquet``
holds two rows and ``train-00001-of-00002.parquet`` one.

The files are written as ``train-NNNNN.parquet`` and renamed once their count is known; the
folder appears whole at ``close()``. Loss masks (``save_loss_masks``) are each file's
``labels_mask`` column (:mod:`streamload.formats.arrow.parquet_write`), counted in its size.
"""

from __future__ import annotations

import os
from typing import Any

import numpy as np

from streamload.formats.arrow._rolling_folder import MAX_FILE_BYTES, RollingFolderWriter
from streamload.formats.arrow.parquet_write import ROW_GROUP_TOKENS, ParquetWriter

__all__ = ["MAX_FILE_BYTES", "ParquetFolderWriter", "hub_file_name"]


def hub_file_name(split: str, index: int, count: int) -> str:
    """``{split}-{index:05d}-of-{count:05d}.parquet``."""
    return f"{split}-{index:05d}-of-{count:05d}.parquet"


class ParquetFolderWriter(RollingFolderWriter):
    """Write documents as Parquet files of at most ``max_file_bytes`` (module docstring).

    Args:
        folder: The output folder; it must not exist, or be empty.
        dtype: Token dtype (the list's value type).
        max_file_bytes: Arrow bytes of rows per file (module docstring).
        row_group_tokens: Tokens per row group (:class:`ParquetWriter`).
        split: The split the file names start with.
        save_loss_masks: Write each document's loss mask as its ``labels_mask`` row.

    Raises:
        ValueError: a bad dtype or a limit below 1.
        ConfigError: the folder exists and is not empty.
    """

    _file: ParquetWriter

    def __init__(
        self,
        folder: str | os.PathLike[str],
        dtype: Any,
        *,
        max_file_bytes: int = MAX_FILE_BYTES,
        row_group_tokens: int = ROW_GROUP_TOKENS,
        split: str = "train",
        save_loss_masks: bool = False,
    ) -> None:
        if row_group_tokens < 1:
            raise ValueError(
                f"{os.fspath(folder)}: row_group_tokens {row_group_tokens} must be >= 1"
            )
        self._row_group_tokens = row_group_tokens
        self._split = split
        super().__init__(
            folder, dtype, max_file_bytes=max_file_bytes, save_loss_masks=save_loss_masks
        )

    def _part_name(self, index: int) -> str:
        return f"{self._split}-{index:05d}.parquet"

    def _file_name(self, index: int, count: int) -> str:
        return hub_file_name(self._split, index, count)

    def _open_part(self, path: str) -> list[Any]:
        self._file = ParquetWriter(
            path, self._dtype, self._row_group_tokens, masks=self._save_masks
        )
        return [self._file]

    def _write_row(self, doc: np.ndarray, mask: np.ndarray | None) -> None:
        self._file.add_document(doc, loss_mask=mask)
