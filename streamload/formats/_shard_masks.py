"""Loss masks of the writers that cut their output into several files (MDS shards, LitData
chunks, a folder of Parquet files): each file gets the mask of exactly its tokens beside it,
named by :func:`~streamload.formats.mask_names.mask_path_for` (``shard.00000.mds.loss``,
``chunk-0-0.bin.loss``), which the catalog finds by itself.

A writer keeps the masks of the documents it has not yet written to a file
(:meth:`PendingMasks.add`) and writes them when it writes that file
(:meth:`PendingMasks.write`); the documents of one file are few enough to hold (a shard is
buffered whole anyway).
"""

from __future__ import annotations

import os
from typing import Any

import numpy as np

from streamload.formats.loss_mask import LossMaskWriter
from streamload.formats.mask_names import mask_path_for

__all__ = ["PendingMasks", "document_mask"]


def document_mask(loss_mask: Any, doc: np.ndarray, where: str) -> np.ndarray:
    """The loss mask given with document ``doc`` (``None``: every token trained).

    Raises:
        ValueError: a mask of another shape than the document's (``where`` names it).
    """
    if loss_mask is None:
        return np.ones(doc.shape, dtype=bool)
    mask = np.asarray(loss_mask)
    if mask.shape != doc.shape:
        raise ValueError(f"{where}: loss_mask shape {mask.shape} != tokens {doc.shape}")
    return mask


class PendingMasks:
    """The loss masks of the documents not yet written to a file (nothing when disabled).

    Args:
        enabled: Whether the writer writes masks at all.
    """

    def __init__(self, enabled: bool) -> None:
        self.enabled = enabled
        self._pending: list[np.ndarray] = []

    def add(self, loss_mask: Any, doc: np.ndarray, where: str) -> None:
        """Keep document ``doc``'s mask (:func:`document_mask`) until its file is written."""
        if self.enabled:
            self._pending.append(document_mask(loss_mask, doc, where))

    def write(self, token_file: str | os.PathLike[str]) -> None:
        """Write the kept masks beside ``token_file`` (which holds exactly their documents'
        tokens) and forget them."""
        if not self.enabled:
            return
        with LossMaskWriter(mask_path_for(os.fspath(token_file))) as writer:
            for mask in self._pending:
                writer.add(mask)
        self._pending = []
