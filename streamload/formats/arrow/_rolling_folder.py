"""Cutting a folder output into files of at most a data size, as ``datasets`` sizes shards.

A file ends before the document that would take its rows past ``max_file_bytes``, measured
as ``datasets`` measures ``max_shard_size`` (the Arrow bytes of the rows: each column's
values, plus 4 bytes of list offset per row and list column;
:meth:`RollingFolderWriter._row_bytes`). Documents are never split: one larger than the
limit is a file of its own; an empty document never starts a file (it stays with the tokens
before it, a few bytes over the limit at most per empty document), so no file but the only
one of a dataset without tokens is without tokens (readers refuse such a shard).

Example: three documents of 100, 100 and 50 uint16 tokens with ``max_file_bytes = 450``:
the first two take 408 bytes, the third would make 512, so the first file holds two rows
and the second one.

The files are written under a name that does not know their count (``_part_name``) and
renamed once it is known (``_file_name``: ``train-00000-of-00002.parquet``); the folder
appears whole at ``close()`` (:class:`~streamload.formats._folder_writer.FolderWriter`).
"""

from __future__ import annotations

import os
from typing import Any

import numpy as np

from streamload.formats._folder_writer import FolderWriter
from streamload.formats._shard_masks import document_mask
from streamload.formats._writer_input import as_document, token_dtype

__all__ = ["MAX_FILE_BYTES", "OFFSET_BYTES", "RollingFolderWriter"]

MAX_FILE_BYTES = 500 * 10**6
"""``datasets``' ``max_shard_size`` default (``"500MB"``, decimal), which ``save_to_disk``,
the Hub's ``push_to_hub`` and Parquet conversion use."""
OFFSET_BYTES = 4
"""Arrow bytes of a row's list offset (``list<…>``: int32)."""


class RollingFolderWriter(FolderWriter):
    """Documents into files of at most ``max_file_bytes`` of rows each (module docstring).

    A subclass names the files (:meth:`_part_name`, :meth:`_file_name`), opens one
    (:meth:`_open_part`: its writers, closed in that order), writes a row into it
    (:meth:`_write_row`) and may write files beside them at the end
    (:meth:`_write_companions`).

    Args:
        folder: The output folder; it must not exist, or be empty.
        dtype: Token dtype.
        max_file_bytes: Arrow bytes of rows per file.
        save_loss_masks: Each document comes with its loss mask (given to :meth:`_write_row`).

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
        save_loss_masks: bool = False,
    ) -> None:
        self._dtype = token_dtype(dtype, os.fspath(folder))
        if max_file_bytes < 1:
            raise ValueError(f"{os.fspath(folder)}: max_file_bytes {max_file_bytes} must be >= 1")
        self._max = max_file_bytes
        self._save_masks = save_loss_masks
        self._inner = self._open_folder(folder)
        self._stack.push(self._discard_file)  # unwound before the staging folder goes
        self._writers: list[Any] = []  # of the open file
        self._bytes = self._tokens = 0  # of the open file
        self._paths: list[str] = []
        self._documents = 0

    def add_document(self, tokens: Any, *, loss_mask: Any = None) -> None:
        """Append one document as one row (with ``save_loss_masks``, its loss mask: one
        flag per token, ``None`` for all trained)."""
        where = f"{self.folder}: document {self._documents}"
        doc = as_document(tokens, self._dtype, where)
        mask = document_mask(loss_mask, doc, where) if self._save_masks else None
        grows = self._row_bytes(doc)
        if not self._writers or (doc.size and self._tokens and self._bytes + grows > self._max):
            self._start_file()
        self._write_row(doc, mask)
        self._bytes += grows
        self._tokens += doc.size
        self._documents += 1

    def _row_bytes(self, doc: np.ndarray) -> int:
        """Arrow bytes of ``doc``'s row: its tokens and list offset, and with masks (a
        ``labels_mask`` column) a flag per token and the mask's list offset."""
        masks = doc.size + OFFSET_BYTES if self._save_masks else 0
        return doc.nbytes + OFFSET_BYTES + masks

    def _part_name(self, index: int) -> str:  # pragma: no cover - every writer defines it
        raise NotImplementedError

    def _file_name(self, index: int, count: int) -> str:  # pragma: no cover - defined
        raise NotImplementedError

    def _open_part(self, path: str) -> list[Any]:  # pragma: no cover - every writer defines it
        raise NotImplementedError

    def _write_row(self, doc: np.ndarray, mask: np.ndarray | None) -> None:  # pragma: no cover
        raise NotImplementedError

    def _rename_part(self, path: str, final: str) -> None:
        """Give a finished file its final name."""
        os.rename(path, final)

    def _write_companions(self, names: list[str]) -> None:
        """Write the files beside the data files (``names``, in order); none by default."""

    def _start_file(self) -> None:
        self._close_file()
        path = os.path.join(self._inner, self._part_name(len(self._paths)))
        self._paths.append(path)
        self._writers = self._open_part(path)
        self._bytes = self._tokens = 0

    def _close_file(self) -> None:
        writers, self._writers = self._writers, []
        for writer in writers:
            writer.close()

    def _discard_file(self, exc_type: Any, exc: Any, tb: Any) -> None:
        """On a failure, close the open file's writers without publishing them."""
        for writer in self._writers:
            writer.__exit__(exc_type, exc, tb)

    def _finish(self) -> None:
        if not self._paths:
            self._start_file()  # no documents: one empty file, as a single-file output
        self._close_file()
        count = len(self._paths)
        names = [self._file_name(index, count) for index in range(count)]
        for path, name in zip(self._paths, names, strict=True):
            self._rename_part(path, os.path.join(self._inner, name))
        self._write_companions(names)
