"""Per-token loss masks beside token files: read like tokens, one byte each.

A loss mask says, for every token of a shard, whether the token is trained as a label:
headerless, one byte per token, nonzero = trained, 0 = not (its label is ``-100``). Two
producers write them: datatrove's ``DocumentTokenizer(save_loss_metadata=True)`` (``X.ds.loss``,
``no_loss_ranges`` of a document zeroed) and OLMo-core / open-instruct SFT data
(``labels_mask_part_NNNN.npy`` beside ``token_ids_part_NNNN.npy``, ``np.bool_`` dumped
headerless). The catalog finds them (:mod:`streamload.catalog.masks`) and records the file in
:attr:`ShardInfo.loss_mask <streamload.formats.base.ShardInfo.loss_mask>`.

A shard's mask is read exactly as its tokens are: :func:`mask_shard` describes it as a shard of
``uint8`` "tokens" (same token count, same storage), so a
:class:`~streamload.streams.shard_set.ShardSet` of masks maps it locally, reads it by byte range
remotely, prefetches and stitches windows across shards with the very code that reads tokens.
A shard without a mask file in a source where others have one reads as all ones (trained).
An Arrow or Parquet shard's mask, or a JSONL-rows shard's, may instead be a column of its own
file (``loss_mask``, ``labels_mask``, ``labels``, ``assistant_masks``, ``completion_mask`` or
``[[sources]] mask_column``: :mod:`streamload.formats.arrow.masks`); its mask shard is then
the token file read through that column, by the token file's format.

This module is openable through the registry (``open_shard``) but never sniffed or listed: a
mask is not a token file.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import posixpath
from typing import Any, BinaryIO

import numpy as np

from streamload.errors import FormatError
from streamload.formats.base import ListedFile, MemmapShard, ReadOptions, ShardInfo
from streamload.util.files import atomic_output

__all__ = [
    "FORMAT",
    "AllTrained",
    "LossMaskFormat",
    "LossMaskWriter",
    "is_mask_column",
    "mask_shard",
]

MASK_DTYPE = np.dtype("u1")
"""One byte per token."""


def mask_shard(info: ShardInfo) -> ShardInfo:
    """Token shard ``info``'s loss mask as a shard of ``uint8`` values, read like tokens:
    the same token count and storage, the mask file's listed version (an all-trained shard,
    path ``""``, when ``info`` has no mask). A mask column of the token file itself
    (``meta["mask_column"]``: Arrow, Parquet) is that file described again with the mask
    column as its column and ``mask_of`` the token column, opened by the token file's
    format."""
    if is_mask_column(info):
        meta = {**info.meta, "column": info.meta["mask_column"], "mask_of": info.meta["column"]}
        return dataclasses.replace(info, dtype=MASK_DTYPE.str, meta=meta, loss_mask=None)
    path = info.loss_mask or ""
    version = info.companions.get(posixpath.basename(path), "") if path else ""
    return ShardInfo(
        path=path,
        relpath=info.relpath,
        size=info.num_tokens if path else 0,
        format=FORMAT.name,
        dtype=MASK_DTYPE.str,
        offset=0,
        num_tokens=info.num_tokens,
        version=version,
        storage=info.storage,
        companions=info.companions,
    )


def is_mask_column(info: ShardInfo) -> bool:
    """Whether shard ``info``'s loss mask is a column of its own token file."""
    return info.loss_mask is not None and info.meta.get("mask_column") is not None


class AllTrained:
    """The mask of a shard without a mask file: every token trained (no file is opened;
    slices are read-only views of a single byte, so a whole-shard slice costs nothing)."""

    remote_array = None  # read like a mapped shard: slices, no range reads

    def __init__(self, info: ShardInfo) -> None:
        self.info = info

    def tokens(self, start: int, stop: int) -> np.ndarray:
        start, stop = max(0, start), min(stop, self.info.num_tokens)
        return np.broadcast_to(np.ones(1, dtype=MASK_DTYPE), (max(0, stop - start),))

    def document_bounds(self) -> np.ndarray | None:
        return None


class LossMaskFormat:
    """Opens the mask shards :func:`mask_shard` describes (never sniffed, never listed)."""

    name = "loss_mask"
    has_documents = False

    def sniff(self, path: str, head: bytes, siblings: frozenset[str]) -> bool:
        return False

    def describe(self, fs: Any, file: ListedFile, options: ReadOptions) -> ShardInfo:
        raise FormatError(
            f"{file.path}: a loss mask is not a token file; name the token files as the "
            "source's path (their masks are found beside them, or by label_masks)"
        )

    def open(self, info: ShardInfo) -> MemmapShard | AllTrained:
        return MemmapShard(info) if info.path else AllTrained(info)


class LossMaskWriter:
    """Write a loss-mask file (one byte per token, 1 = trained) to a temporary name, renamed
    into place by :meth:`close`; an exception inside a ``with`` block discards it.

    Args:
        path: The mask file to write.
    """

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = os.fspath(path)
        self.written = 0
        self._stack = contextlib.ExitStack()
        tmp = self._stack.enter_context(atomic_output(self.path))
        self._fh: BinaryIO = self._stack.enter_context(open(tmp, "wb"))  # noqa: SIM115

    def add(self, mask: Any) -> None:
        """Append the flags of some tokens (any array of booleans or 0/1 integers)."""
        flags = np.asarray(mask)
        if flags.ndim != 1 or (flags.size and flags.dtype.kind not in "biu"):
            raise FormatError(
                f"{self.path}: a loss mask is a 1-D array of booleans, got {flags.dtype} "
                f"of shape {flags.shape}"
            )
        self._fh.write((flags != 0).astype(MASK_DTYPE).tobytes())
        self.written += int(flags.size)

    def close(self) -> None:
        """Finish the file and move it into place."""
        self._stack.close()

    def __enter__(self) -> LossMaskWriter:
        return self

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        if exc_type is None:
            self.close()
        else:
            self._stack.__exit__(exc_type, exc, tb)


FORMAT = LossMaskFormat()
