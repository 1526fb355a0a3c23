"""Describe a listed file: pick its format (configured, or sniffed), read its header."""

from __future__ import annotations

import posixpath
from typing import Any

from streamload.errors import FormatError
from streamload.formats.base import SNIFF_BYTES, ListedFile, ReadOptions, ShardInfo, open_head
from streamload.formats.registry import get_format, sniff_format
from streamload.formats.tatm_metadata import TATM_METADATA, tatm_dtype

__all__ = ["MAX_METADATA_BYTES", "describe_shard", "folder_dtype"]

MAX_METADATA_BYTES = 1 << 20
"""Largest tatm ``metadata.yaml`` read (real ones are a few hundred bytes)."""


def folder_dtype(fs: Any, folder: str, cache: dict[str, str | None]) -> str | None:
    """The dtype declared by a tatm ``metadata.yaml`` in ``folder`` (cached per folder)."""
    if folder not in cache:
        meta_path = posixpath.join(folder, TATM_METADATA)
        cache[folder] = None
        if fs.isfile(meta_path):
            with open_head(fs, meta_path) as fh:
                data = fh.read(MAX_METADATA_BYTES + 1)
            if len(data) > MAX_METADATA_BYTES:
                raise FormatError(
                    f"{meta_path}: larger than {MAX_METADATA_BYTES} bytes; a tatm metadata.yaml "
                    "is a few hundred bytes (is it another file?)"
                )
            cache[folder] = tatm_dtype(data.decode("utf-8", errors="replace"), meta_path)
    return cache[folder]


def describe_shard(
    fs: Any, file: ListedFile, fmt: str, options: ReadOptions, siblings: frozenset[str]
) -> ShardInfo:
    """Describe one file.

    Args:
        fs: fsspec file system holding the file.
        file: The listed file.
        fmt: Configured format name, or ``"auto"`` to sniff.
        options: dtype and vocabulary facts from the config.
        siblings: Names of the files in the same folder.

    Raises:
        FormatError: empty, unreadable, inconsistent, or of an unknown width.
    """
    if file.size == 0:
        raise FormatError(f"{file.path}: shard is empty (0 bytes); remove it or regenerate it")
    if fmt == "auto":
        with open_head(fs, file.path) as fh:
            head = fh.read(SNIFF_BYTES)
        spec = sniff_format(file.path, head, siblings)
    else:
        spec = get_format(fmt)
    info = spec.describe(fs, file, options)
    if info.num_tokens == 0:
        raise FormatError(f"{file.path}: shard holds 0 tokens; remove it or regenerate it")
    return info
