"""Loss masks through ``convert``, ``merge`` and ``validate``.

A source shard's mask is :attr:`ShardInfo.loss_mask <streamload.formats.base.ShardInfo>`
(found by the catalog), read like tokens through
:func:`~streamload.formats.loss_mask.mask_shard`. Every target streamload writes can hold a
mask: datatrove its own ``.ds.loss``, Arrow and Parquet output a ``labels_mask`` column,
every other token file the file
:func:`~streamload.formats.mask_names.mask_path_for` names beside it (``out.npy.loss``,
``out.bin.loss``, ``labels_mask_part_0.npy`` for ``token_ids_part_0.npy``), which the
catalog finds by itself. So the rules are:

* inputs with masks give an output with masks, unless ``--drop-masks``;
* inputs of which only some have masks are refused (the output's mask would be made up for
  the others), unless ``--assume-trained`` (those without a mask are all trained, as the
  loader reads them) or ``--drop-masks``;
* inputs without masks give an output without one (as before masks existed).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

import numpy as np

from streamload.errors import ConfigError
from streamload.formats.base import DocumentWriter, ShardInfo, TokenShard
from streamload.formats.loss_mask import LossMaskWriter, is_mask_column, mask_shard
from streamload.formats.mask_names import mask_path_for
from streamload.formats.registry import open_shard
from streamload.tools.documents import BLOCK_TOKENS
from streamload.util.files import staged_output

__all__ = [
    "MaskedWriter",
    "check_mask",
    "mask_reader",
    "merge_megatron_with_masks",
    "wants_masks",
]


def wants_masks(
    shards: Sequence[ShardInfo], *, drop_masks: bool = False, assume_trained: bool = False
) -> bool:
    """Whether the output of ``shards`` gets a loss mask (module docstring).

    Raises:
        ConfigError: some shards have a mask and others none, without ``assume_trained``
            or ``drop_masks``.
    """
    masked = sum(info.loss_mask is not None for info in shards)
    if drop_masks or masked == 0:
        return False
    if masked < len(shards) and not assume_trained:
        bare = [info.path for info in shards if info.loss_mask is None]
        more = f" and {len(bare) - 1} more" if len(bare) > 1 else ""
        raise ConfigError(
            f"{masked} of {len(shards)} input files have a loss mask but {bare[0]}{more} "
            "has none; pass --assume-trained to train every token of the files without one, "
            "or --drop-masks to write no mask"
        )
    return True


def mask_reader(info: ShardInfo) -> TokenShard:
    """The loss mask of shard ``info`` read like its tokens (all ones without a mask file)."""
    return open_shard(mask_shard(info))


class MaskedWriter:
    """A format writer of one token file and that file's loss mask, written together.

    Args:
        writer: The format's writer (``add_document(tokens)``).
        mask_path: Where the mask goes (:func:`~streamload.formats.mask_names.mask_path_for`
            of the token file).
    """

    def __init__(self, writer: DocumentWriter, mask_path: str) -> None:
        self._writer = writer
        self._mask = LossMaskWriter(mask_path)

    def add_document(self, tokens: np.ndarray, *, loss_mask: Any = None) -> None:
        """Append one document and its loss mask (one flag per token; default: trained)."""
        mask = np.ones(np.shape(tokens), dtype=bool) if loss_mask is None else np.asarray(loss_mask)
        if mask.shape != np.shape(tokens):
            raise ValueError(
                f"{self._mask.path}: loss mask of shape {mask.shape} for a document of shape "
                f"{np.shape(tokens)}"
            )
        self._writer.add_document(tokens)
        self._mask.add(mask)

    def close(self) -> None:
        """Finish the mask, then the token file (a listing takes the token file last)."""
        self._mask.close()
        self._writer.close()

    def __enter__(self) -> MaskedWriter:
        return self

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        if exc_type is None:
            self.close()
            return
        self._mask.__exit__(exc_type, exc, tb)
        self._writer.__exit__(exc_type, exc, tb)


def check_mask(info: ShardInfo) -> list[str]:
    """Problems of shard ``info``'s loss mask file: its size against the token count (one
    byte per token) and bytes other than 0 and 1 (of a mask column: values other than 0
    and 1; rows of other lengths than their tokens raise FormatError); empty when sound or
    without a mask."""
    path = info.loss_mask
    if path is None:
        return []
    if is_mask_column(info):  # its rows' lengths are checked as it is read, below
        path = f"{path} column {info.meta['mask_column']!r}"
    try:
        size = os.path.getsize(path) if "://" not in path and path == info.loss_mask else None
    except OSError as exc:
        return [f"loss mask {path}: cannot read it: {exc.strerror}"]
    if size is not None and size != info.num_tokens:
        return [
            f"loss mask {path} is {size:,} bytes; expected {info.num_tokens:,} (one byte per "
            "token of its token file)"
        ]
    mask = mask_reader(info)
    first: tuple[int, int] | None = None
    count = 0
    for start in range(0, info.num_tokens, BLOCK_TOKENS):
        block = np.asarray(mask.tokens(start, min(info.num_tokens, start + BLOCK_TOKENS)))
        bad = np.flatnonzero(block > 1)
        if bad.size and first is None:
            first = (start + int(bad[0]), int(block[bad[0]]))
        count += int(bad.size)
    if first is None:
        return []
    return [
        f"loss mask {path}: {count:,} bytes are neither 0 (not trained) nor 1 (trained), the "
        f"first at byte {first[0]:,} ({first[1]}); was it written by another tool?"
    ]


def merge_megatron_with_masks(shards: Sequence[ShardInfo], out_prefix: str) -> list[str]:
    """:func:`~streamload.formats.megatron.merge_megatron` of ``shards`` into ``out_prefix``,
    with the merged loss mask (each shard's, all trained where it has none), all published
    at once: ``.idx``, the mask, then ``.bin``. Returns the published paths.

    Raises:
        ConfigError: an output exists already (never replaced).
        FormatError: an input is missing, corrupt, or of another dtype.
    """
    from streamload.formats.megatron.megatron import merge_megatron

    prefix = os.path.abspath(out_prefix.removesuffix(".bin").removesuffix(".idx"))
    name = os.path.basename(prefix)
    paths = [prefix + ".idx", mask_path_for(prefix + ".bin"), prefix + ".bin"]
    with staged_output(*paths) as staging:
        with LossMaskWriter(os.path.join(staging, os.path.basename(paths[1]))) as mask:
            for info in shards:
                reader = mask_reader(info)
                for start in range(0, info.num_tokens, BLOCK_TOKENS):
                    stop = min(info.num_tokens, start + BLOCK_TOKENS)
                    mask.add(np.asarray(reader.tokens(start, stop)))
        merge_megatron([info.path for info in shards], os.path.join(staging, name))
    return paths
