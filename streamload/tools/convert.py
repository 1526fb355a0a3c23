"""Converting token data between formats, document by document, with bounded memory.

Documents come from the source format's index, else from an EOS token, else one per shard
(:mod:`streamload.tools.documents`); they are written by the target format's writer, which writes
under temporary names and renames when complete.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from streamload.catalog.sources import SourceCatalog
from streamload.errors import ConfigError
from streamload.formats.base import DocumentWriter
from streamload.formats.registry import open_shard
from streamload.tools.documents import document_bounds, iter_documents

__all__ = ["TARGETS", "ConvertStats", "convert", "open_writer"]

TARGETS = ("megatron", "modalities", "dolma", "numpy", "datatrove")
"""Formats ``streamload convert`` writes."""

NUMPY_SHARD_TOKENS = 1 << 28
"""Tokens per NPY shard when converting to a shard folder."""


@dataclass
class ConvertStats:
    """What a conversion wrote."""

    documents: int = 0
    tokens: int = 0


def open_writer(
    fmt: str, destination: str, dtype: np.dtype, *, tokenizer_name: str | None = None
) -> DocumentWriter:
    """A writer of ``fmt`` at ``destination``.

    ``destination`` is a path prefix for ``megatron`` (``out/web_text_document``), a file for
    ``modalities`` (``.pbin``), ``dolma`` (``.npy``) and ``datatrove`` (``.ds``), and a folder
    for ``numpy``.

    Raises:
        ConfigError: an unknown format, or a dtype the format cannot store.
    """
    dtype = np.dtype(dtype)
    if fmt == "megatron":
        from streamload.formats.megatron import MegatronWriter

        return MegatronWriter(destination.removesuffix(".bin").removesuffix(".idx"), dtype)
    if fmt == "dolma":
        from streamload.formats.dolma import DolmaWriter

        return DolmaWriter(destination, dtype)
    if fmt == "numpy":
        from streamload.formats.numpy_folder import NumpyShardWriter

        return NumpyShardWriter(destination, dtype, NUMPY_SHARD_TOKENS)
    if fmt in ("datatrove", "modalities"):
        return _unsigned_writer(fmt, destination, dtype, tokenizer_name)
    raise ConfigError(f"--to {fmt!r} is not a format streamload writes ({', '.join(TARGETS)})")


def _unsigned_writer(
    fmt: str, destination: str, dtype: np.dtype, tokenizer_name: str | None
) -> DocumentWriter:
    """datatrove (2 or 4 bytes) and Modalities (1, 2 or 4 bytes) store unsigned tokens."""
    widths = (2, 4) if fmt == "datatrove" else (1, 2, 4)
    if dtype.itemsize not in widths:
        raise ConfigError(
            f"{fmt} stores {' or '.join(map(str, widths))}-byte tokens; --dtype {dtype.name} "
            "does not fit: pass --dtype uint16 or uint32"
        )
    if fmt == "datatrove":
        from streamload.formats.datatrove import DatatroveWriter

        return DatatroveWriter(destination, tokenizer_name, dtype.itemsize)
    from streamload.formats.modalities import ModalitiesWriter

    return ModalitiesWriter(destination, dtype.itemsize)


def convert(
    catalog: SourceCatalog,
    writer: DocumentWriter,
    *,
    eos_token_id: int | None = None,
    progress: Callable[[int, int], Any] | None = None,
) -> ConvertStats:
    """Copy every document of ``catalog`` into ``writer``, in storage order, then close it.

    Args:
        catalog: The source shards.
        writer: An open writer; closed (moved into place) on success, discarded on error.
        eos_token_id: Splits documents where the source format has no index.
        progress: Called with (documents, tokens) written, after each document.
    """
    stats = ConvertStats()
    with writer:
        for info in catalog.shards:
            shard = open_shard(info)
            for doc in iter_documents(shard, document_bounds(shard, eos_token_id)):
                writer.add_document(np.asarray(doc))
                stats.documents += 1
                stats.tokens += int(doc.shape[0])
                if progress is not None:
                    progress(stats.documents, stats.tokens)
    return stats


def default_destination(fmt: str, destination: str) -> str:
    """Name a file inside ``destination`` when a folder is given for a single-file format."""
    if not os.path.isdir(destination) or fmt in ("numpy",):
        return destination
    names = {
        "megatron": "data_text_document",
        "modalities": "data.pbin",
        "dolma": "part-0-00000.npy",
        "datatrove": "data_00000_unshuffled.ds",
    }
    return os.path.join(destination, names[fmt])
