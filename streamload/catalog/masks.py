"""Find each shard's loss mask: beside it by name, or as the source's ``label_masks`` say.

``[[sources]] label_masks``:

* ``"auto"`` (default): a shard whose folder listing holds its conventional mask
  (:mod:`streamload.formats.mask_names`: OLMo-core ``labels_mask<rest>`` beside
  ``token_ids<rest>``, else ``<file>.loss``, datatrove's ``X.ds.loss``) uses it; the others
  are all trained;
* ``"none"``: masks are ignored;
* a folder, glob, file or list of those: the mask files, listed like a source's path (each
  entry sorted) and paired in that order with the source's listed shards, one each.

Arrow and Parquet shards, and JSONL rows of token ids, may hold their mask as a column (a
field) of the token file
(:mod:`streamload.formats.arrow.masks`): the source's ``mask_column`` (required in every
such file), else with ``"auto"`` the first of ``loss_mask``, ``labels_mask``, ``labels``
(read as ``labels != -100``), ``assistant_masks``, ``completion_mask`` that a file has, where
no mask file lies beside it (both is refused: say which with ``mask_column`` or
``label_masks``). The column is chosen from the column types describing recorded, so it
costs no read either; its shard's :attr:`~streamload.formats.base.ShardInfo.loss_mask` is
the token file itself and ``meta["mask_column"]`` the column.

Masks are attached right after the shards are described, and the catalog cache keeps the
shards with their masks (its key holds ``label_masks``, ``mask_column`` and the column names
found by name, :func:`streamload.catalog.store.catalog_description`): the folder listings are
those the description made, so ``"auto"`` costs no request, and a named mask costs one
listing per entry. A mask must hold one byte per token of
its shard; anything else is refused naming both files. The mask's listed version goes with
the shard's companions, so a remote mask is read only in that version.
"""

from __future__ import annotations

import dataclasses
import posixpath
from collections.abc import Sequence
from typing import Any

from streamload.catalog.listing import Siblings, list_entries, source_url
from streamload.config import SourceConfig
from streamload.config.storage import StorageConfig
from streamload.errors import ConfigError, FormatError
from streamload.formats.arrow.masks import pick_mask_column
from streamload.formats.base import ListedFile, ShardInfo
from streamload.formats.mask_names import mask_conventions

__all__ = ["attach_masks"]

_TABLE_FORMATS = ("arrow", "parquet", "jsonl")
"""Formats whose shards may hold their loss mask as a column (``mask_column``; a JSONL
file's rows of token ids, :mod:`streamload.formats.arrow.jsonl_rows`, not its text)."""


def attach_masks(
    fs: Any,
    source: SourceConfig,
    storage: StorageConfig,
    shards: tuple[ShardInfo, ...],
    listed: Sequence[tuple[str, Siblings]],
) -> tuple[ShardInfo, ...]:
    """``shards`` with their loss masks (:attr:`ShardInfo.loss_mask`).

    Args:
        fs: The source's file system.
        source: The source (its ``label_masks``).
        storage: Listing retries.
        shards: The described shards (a subset of ``listed`` when some were skipped).
        listed: Every listed token file's path (as in :attr:`ShardInfo.path`) and its
            folder's files, in listing order.

    Raises:
        ConfigError: named masks that do not pair one to one with the listed shards.
        FormatError: a mask whose size is not one byte per token of its shard.
    """
    if source.label_masks == "none":
        return shards
    if source.mask_paths:
        masks = _named(fs, source, storage, [path for path, _ in listed])
        return tuple(_with_mask(info, masks.get(info.path)) for info in shards)
    masks = _beside(fs, listed)
    beside = (_with_mask(info, masks.get(info.path)) for info in shards)
    return tuple(_with_column_mask(info, source) for info in beside)


def _with_column_mask(info: ShardInfo, source: SourceConfig) -> ShardInfo:
    """``info`` with its mask column, if a table format's shard has one (module docstring).

    Raises:
        FormatError: the configured column is missing or not a list of flags, or a mask
            file lies beside a file whose mask column was found by its name.
    """
    if info.format not in _TABLE_FORMATS or "column" not in info.meta:
        return info
    column = pick_mask_column(info.path, info.meta, source.mask_column)
    if column is None:
        return info
    if info.loss_mask is not None:
        if source.mask_column is None:
            raise FormatError(
                f"{info.path}: both its column {column!r} and the file {info.loss_mask} look "
                f"like its loss mask; name one: mask_column = {column!r}, or label_masks = "
                f"{info.loss_mask!r}"
            )
        info = dataclasses.replace(info, loss_mask=None)  # the configured column wins
    meta = {**info.meta, "mask_column": column}
    return dataclasses.replace(info, loss_mask=info.path, meta=meta)


def _beside(fs: Any, listed: Sequence[tuple[str, Siblings]]) -> dict[str, ListedFile]:
    """The conventional masks found in the shards' folder listings."""
    out = {}
    for path, folder in listed:
        name = mask_conventions(posixpath.basename(path), folder.names)
        if name is None:
            continue
        mask = posixpath.join(posixpath.dirname(path), name)
        size = folder.sizes.get(name, -1)
        if size < 0:  # a listing without sizes (an HTTP index page)
            size = int(fs.size(_stripped(fs, mask)))
        out[path] = ListedFile(mask, name, size, folder.versions.get(name, ""))
    return out


def _named(
    fs: Any, source: SourceConfig, storage: StorageConfig, paths: list[str]
) -> dict[str, ListedFile]:
    """The masks ``label_masks`` names, paired in order with the listed token files."""
    entries = [_stripped(fs, entry) for entry in source.mask_paths]
    masks = list_entries(fs, source, source.mask_paths, entries, storage, masks=True)
    if len(masks) != len(paths):
        raise ConfigError(
            f"source {source.name!r}: label_masks = {source.label_masks!r} lists {len(masks)} "
            f"files but the source lists {len(paths)} token files; they pair one to one, in "
            "listing order"
        )
    return {
        path: dataclasses.replace(mask, path=source_url(fs, mask.path, source))
        for path, mask in zip(paths, masks, strict=True)
    }


def _with_mask(info: ShardInfo, mask: ListedFile | None) -> ShardInfo:
    if mask is None:
        return info
    if mask.size != info.num_tokens:
        raise FormatError(
            f"{mask.path}: {mask.size} bytes, but it is the loss mask of {info.path}, which "
            f"holds {info.num_tokens} tokens; a loss mask holds one byte per token"
        )
    name = posixpath.basename(mask.path)
    companions = {**info.companions, name: mask.version} if mask.version else info.companions
    return dataclasses.replace(info, loss_mask=mask.path, companions=companions)


def _stripped(fs: Any, path: str) -> str:
    return str(fs._strip_protocol(path))
