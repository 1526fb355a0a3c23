"""Write a folder of real NumPy ``.npy`` token shards (KempnerForge / nanoGPT style).

Shards are ``{prefix}00000.npy``, ``{prefix}00001.npy``, … each holding exactly
``max_tokens_per_shard`` tokens except the last: the documents are one token stream cut at
fixed sizes, so a document may continue in the next shard (documents are then found by EOS).
Each file is what ``numpy.save`` writes for the same 1-D array, byte for byte.

Streaming: a shard's header is written first for an empty array and rewritten in place with
the final shape at close. numpy pads every header so the length of the shape can grow to 21
digits without moving the data (``GROWTH_AXIS_MAX_DIGITS``), so the final header has the same
length; it is checked, never assumed.

Loss masks (``save_loss_masks``): each shard gets its mask beside it, one byte per token,
named by :func:`~streamload.formats.mask_names.mask_path_for` (``shard_00000.npy.loss``;
``labels_mask_part_00000.npy`` for ``prefix="token_ids_part_"``, OLMo-core's names), cut at
the same token counts and published just before its shard.
"""

from __future__ import annotations

import contextlib
import io
import os
from typing import Any, BinaryIO

import numpy as np
from numpy.lib import format as npformat

from streamload.formats._stack_writer import StackWriter
from streamload.formats._writer_input import as_document, token_dtype
from streamload.formats.loss_mask import LossMaskWriter
from streamload.formats.mask_names import mask_path_for
from streamload.util.files import atomic_output

__all__ = ["NumpyShardWriter"]


def _npy_header(dtype: np.dtype, count: int) -> bytes:
    """The header ``numpy.save`` writes for a 1-D C-order array of ``count`` items."""
    fields = {"descr": npformat.dtype_to_descr(dtype), "fortran_order": False, "shape": (count,)}
    buf = io.BytesIO()
    npformat.write_array_header_1_0(buf, fields)
    return buf.getvalue()


class NumpyShardWriter(StackWriter):
    """Stream documents into NPY shards of a fixed size.

    Args:
        folder: Output folder (created if missing).
        dtype: Token dtype of every shard.
        max_tokens_per_shard: Tokens per shard; only the last shard may hold fewer.
        prefix: File name prefix; shard ``i`` is ``{prefix}{i:05d}.npy``.
        save_loss_masks: Also write each shard's loss mask (``add_document(...,
            loss_mask=...)``; module docstring).

    Each shard is written under a temporary name and renamed when full (or at ``close()``),
    so an interrupted run leaves only complete shards, but possibly a prefix of the data. To
    publish the whole folder at once (what ``streamload convert --to numpy`` does), write it
    inside :func:`streamload.util.files.staged_output` (or use
    :func:`streamload.tools.convert.open_writer`), which renames the finished folder into
    place. No documents: no files. Use as a context manager; an exception inside the block
    discards the shard being written.
    """

    def __init__(
        self,
        folder: str | os.PathLike[str],
        dtype: Any,
        max_tokens_per_shard: int,
        prefix: str = "shard_",
        *,
        save_loss_masks: bool = False,
    ) -> None:
        self.folder = os.fspath(folder)
        self._dtype = token_dtype(dtype, self.folder)
        if isinstance(max_tokens_per_shard, bool) or max_tokens_per_shard < 1:
            raise ValueError(
                f"{self.folder}: max_tokens_per_shard = {max_tokens_per_shard} must be >= 1"
            )
        self._max = int(max_tokens_per_shard)
        self._prefix = prefix
        self._save_masks = save_loss_masks
        self._mask: LossMaskWriter | None = None
        self._header = _npy_header(self._dtype, 0)
        self._stack: contextlib.ExitStack | None = None
        self._file: BinaryIO | None = None
        self._count = 0
        self._documents = 0
        self._closed = False
        self.paths: list[str] = []
        """Shards written so far (the last one is complete once closed)."""

    def _start(self) -> BinaryIO:
        path = os.path.join(self.folder, f"{self._prefix}{len(self.paths):05d}.npy")
        self._stack = contextlib.ExitStack()
        tmp = self._stack.enter_context(atomic_output(path))
        self._file = self._stack.enter_context(open(tmp, "wb"))  # noqa: SIM115
        if self._save_masks:  # entered last: closed (published) before the shard
            self._mask = self._stack.enter_context(LossMaskWriter(mask_path_for(path)))
        self._file.write(self._header)
        self._count = 0
        self.paths.append(path)
        return self._file

    def _finish(self) -> None:
        if self._stack is None or self._file is None:
            return
        header = _npy_header(self._dtype, self._count)
        if len(header) != len(self._header):  # pragma: no cover - numpy pads for growth
            raise RuntimeError(f"{self.paths[-1]}: NPY header length changed with the shape")
        self._file.seek(0)
        self._file.write(header)
        stack, self._stack, self._file, self._mask = self._stack, None, None, None
        stack.close()

    def add_document(self, tokens: Any, *, loss_mask: Any = None) -> None:
        """Append one document's tokens to the stream (an empty document adds nothing).

        Args:
            tokens: Token ids.
            loss_mask: With ``save_loss_masks``: per-token flags (default all trained).
        """
        where = f"{self.folder}: document {self._documents}"
        doc = as_document(tokens, self._dtype, where)
        mask = None
        if self._save_masks:
            mask = np.ones(doc.size, dtype=bool) if loss_mask is None else np.asarray(loss_mask)
            if mask.shape != doc.shape:
                raise ValueError(f"{where}: loss_mask shape {mask.shape} != tokens {doc.shape}")
        self._documents += 1
        done = 0
        while done < doc.size:
            fh = self._file if self._file is not None else self._start()
            take = min(doc.size - done, self._max - self._count)
            fh.write(doc[done : done + take].tobytes())
            if self._mask is not None and mask is not None:
                self._mask.add(mask[done : done + take])
            self._count += take
            done += take
            if self._count == self._max:
                self._finish()

    def close(self) -> None:
        """Finish the last shard and move it into place."""
        if not self._closed:
            self._closed = True
            self._finish()
