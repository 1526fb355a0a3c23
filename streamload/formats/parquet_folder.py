"""Write a folder of Hub-sized Parquet files: ``train-00000-of-00003.parquet``, ….

The names are those recent ``datasets``' ``push_to_hub`` gives a split's shards
(``{split}-{index:05d}-of-{count:05d}.parquet``; older versions added a fingerprint), which
the Hub reads as split ``train`` and a folder listing sorts in row order. Each file is what
:class:`ParquetWriter` writes (one ``input_ids`` column, row groups of whole documents of
about ``ROW_GROUP_TOKENS`` tokens); a file ends before the document that would take its
data past ``max_file_bytes``, measured as ``datasets`` measures ``max_shard_size`` (the
Arrow bytes of the rows: the tokens, plus 4 bytes of list offset per document). The file
itself is smaller when its tokens compress, and up to ~15-30% larger when they do not
(random ids), as ``datasets``' shards are. Documents are never split: one larger than the
limit is a file of its own; an empty document never starts a file (it stays with the tokens
before it, 4 bytes over the limit at most per empty document), so no file but the only one
of a dataset without tokens is without tokens (readers refuse such a shard).

Example: three documents of 100, 100 and 50 uint16 tokens with ``max_file_bytes = 450``:
the first two take 408 bytes, the third would make 512, so ``train-00000-of-00002.parquet``
holds two rows and ``train-00001-of-00002.parquet`` one.

The files are written as ``train-NNNNN.parquet`` and renamed once their count is known; the
folder appears whole at ``close()``. Loss masks (``save_loss_masks``) go beside each file
(``train-00000-of-00002.parquet.loss``).
"""

from __future__ import annotations

import os
from typing import Any

from streamload.formats._folder_writer import FolderWriter
from streamload.formats._shard_masks import document_mask
from streamload.formats._writer_input import as_document, token_dtype
from streamload.formats.loss_mask import LossMaskWriter
from streamload.formats.mask_names import mask_path_for
from streamload.formats.parquet import ROW_GROUP_TOKENS, ParquetWriter

__all__ = ["MAX_FILE_BYTES", "ParquetFolderWriter", "hub_file_name"]

MAX_FILE_BYTES = 500 * 10**6
"""``datasets``' ``max_shard_size`` default (``"500MB"``, decimal), which the Hub's
``push_to_hub`` and Parquet conversion use."""
OFFSET_BYTES = 4
"""Arrow bytes of a row's list offset (``list<…>``: int32)."""


def hub_file_name(split: str, index: int, count: int) -> str:
    """``{split}-{index:05d}-of-{count:05d}.parquet``."""
    return f"{split}-{index:05d}-of-{count:05d}.parquet"


class ParquetFolderWriter(FolderWriter):
    """Write documents as Parquet files of at most ``max_file_bytes`` (module docstring).

    Args:
        folder: The output folder; it must not exist, or be empty.
        dtype: Token dtype (the list's value type).
        max_file_bytes: Arrow bytes of rows per file (module docstring).
        row_group_tokens: Tokens per row group (:class:`ParquetWriter`).
        split: The split the file names start with.
        save_loss_masks: Write each file's loss mask beside it.

    Raises:
        ValueError: a bad dtype or a limit below 1.
        ConfigError: the folder exists and is not empty.
    """

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
        self._dtype = token_dtype(dtype, os.fspath(folder))
        if max_file_bytes < 1 or row_group_tokens < 1:
            raise ValueError(
                f"{os.fspath(folder)}: max_file_bytes {max_file_bytes} and row_group_tokens "
                f"{row_group_tokens} must be >= 1"
            )
        self._max = max_file_bytes
        self._row_group_tokens = row_group_tokens
        self._split = split
        self._save_masks = save_loss_masks
        self._inner = self._open_folder(folder)
        self._stack.push(self._discard_file)  # unwound before the staging folder goes
        self._file: ParquetWriter | None = None
        self._mask: LossMaskWriter | None = None
        self._bytes = self._tokens = 0  # of the open file
        self._paths: list[str] = []
        self._documents = 0

    def add_document(self, tokens: Any, *, loss_mask: Any = None) -> None:
        """Append one document as one row (with ``save_loss_masks``, its loss mask)."""
        where = f"{self.folder}: document {self._documents}"
        doc = as_document(tokens, self._dtype, where)
        grows = doc.nbytes + OFFSET_BYTES
        if self._file is None or (doc.size and self._tokens and self._bytes + grows > self._max):
            self._start_file()
        assert self._file is not None  # started above
        self._file.add_document(doc)
        if self._mask is not None:
            self._mask.add(document_mask(loss_mask, doc, where))
        self._bytes += grows
        self._tokens += doc.size
        self._documents += 1

    def _start_file(self) -> None:
        self._close_file()
        path = os.path.join(self._inner, f"{self._split}-{len(self._paths):05d}.parquet")
        self._file = ParquetWriter(path, self._dtype, self._row_group_tokens)
        if self._save_masks:
            self._mask = LossMaskWriter(mask_path_for(path))
        self._paths.append(path)
        self._bytes = self._tokens = 0

    def _close_file(self) -> None:
        file, mask, self._file, self._mask = self._file, self._mask, None, None
        if mask is not None:
            mask.close()
        if file is not None:
            file.close()

    def _discard_file(self, exc_type: Any, exc: Any, tb: Any) -> None:
        """On a failure, close the open file's writers without publishing them."""
        for writer in (self._mask, self._file):
            if writer is not None:
                writer.__exit__(exc_type, exc, tb)

    def _finish(self) -> None:
        if self._file is None:
            self._start_file()  # no documents: one empty file, as a single-file output
        self._close_file()
        count = len(self._paths)
        for index, path in enumerate(self._paths):
            final = os.path.join(self._inner, hub_file_name(self._split, index, count))
            if self._save_masks:
                os.rename(mask_path_for(path), mask_path_for(final))
            os.rename(path, final)
