"""Decide each file's format from its magic bytes and companions, then describe it.

| evidence | format |
|---|---|
| starts with ``\\x93NUMPY`` | ``npy`` (dtype from the header) |
| anything else (``.bin``, headerless ``.npy``) | ``raw`` (dtype from config or tatm metadata) |
"""

from __future__ import annotations

import posixpath
from typing import Any

from streamload.config import ShardFormat
from streamload.errors import FormatError
from streamload.formats.base import ShardInfo
from streamload.formats.npy import NPY_MAGIC, describe_npy
from streamload.formats.raw import describe_raw, tatm_dtype

__all__ = ["TATM_METADATA", "describe_shard", "folder_dtype"]

TATM_METADATA = "metadata.yaml"


def folder_dtype(fs: Any, folder: str, cache: dict[str, str | None]) -> str | None:
    """The dtype declared by a tatm ``metadata.yaml`` in ``folder`` (cached per folder)."""
    if folder not in cache:
        meta_path = posixpath.join(folder, TATM_METADATA)
        cache[folder] = None
        if fs.isfile(meta_path):
            text = fs.cat_file(meta_path).decode("utf-8", errors="replace")
            cache[folder] = tatm_dtype(text, meta_path)
    return cache[folder]


def describe_shard(
    fs: Any,
    path: str,
    relpath: str,
    size: int,
    fmt: ShardFormat,
    dtype: str,
    meta_dtype: str | None,
) -> ShardInfo:
    """Read the header of one shard and describe it.

    Args:
        fs: fsspec file system holding ``path``.
        path: Full path (as the file system names it) or URL.
        relpath: Path relative to the source root.
        size: Size in bytes, from the listing.
        fmt: Configured format (``auto`` sniffs).
        dtype: Configured dtype (``auto`` if not configured).
        meta_dtype: dtype from a tatm ``metadata.yaml`` beside the file, if any.

    Raises:
        FormatError: empty file, unreadable header, or conflicting dtypes.
    """
    if size == 0:
        raise FormatError(f"{path}: shard is empty (0 bytes); remove it or regenerate it")
    with fs.open(path, "rb") as fh:
        head = fh.read(len(NPY_MAGIC))
        fh.seek(0)
        is_npy = head == NPY_MAGIC
        if fmt is ShardFormat.NPY and not is_npy:
            raise FormatError(
                f"{path}: format = 'npy' but the file has no NPY magic (\\x93NUMPY); it is a "
                "headerless dump: use format = 'raw' with a dtype"
            )
        if is_npy and fmt is not ShardFormat.RAW:
            info = describe_npy(fh, path, relpath, size, dtype)
        else:
            info = describe_raw(
                path, relpath, size, _raw_dtype(path, dtype, meta_dtype), _why(path)
            )
    if info.num_tokens == 0:
        raise FormatError(f"{path}: shard holds 0 tokens; remove it or regenerate it")
    return info


def _raw_dtype(path: str, dtype: str, meta_dtype: str | None) -> str:
    if dtype != "auto" and meta_dtype is not None and dtype != meta_dtype:
        raise FormatError(
            f"{path}: the config says dtype = {dtype!r} but {TATM_METADATA} beside it says "
            f"{meta_dtype!r}; one of them is wrong"
        )
    return meta_dtype if dtype == "auto" and meta_dtype is not None else dtype


def _why(path: str) -> str:
    if path.endswith(".npy"):
        return "a .npy file without the \\x93NUMPY magic (a headerless raw dump, e.g. Dolma)"
    return "a headerless token file"
