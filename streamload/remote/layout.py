"""Which cached pieces hold which byte ranges of a remote token file (vectorized per chunk).

A piece is the unit the store caches and fetches: an aligned block of ``storage.block_size``
bytes (``storage.window_reads = "blocks"``), else exactly one window's byte range (a file read
whole, ``storage.whole_shard_size``, is mapped from the disk cache and has no pieces). A
chunk's windows are laid out at once, with numpy, so the store is asked once per shard and
chunk.

Example:
    >>> layout = piece_layout(100, np.array([0, 30]), np.array([20, 50]), "blocks", 32)
    >>> layout.pieces, layout.first.tolist(), layout.last.tolist()
    ([(0, 32), (32, 64)], [0, 0], [0, 1])
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

__all__ = ["PieceLayout", "piece_layout"]


@dataclass(frozen=True)
class PieceLayout:
    """The sorted distinct ``pieces`` (byte ranges) holding a set of ranges, and for range
    ``i`` the indices ``first[i]..last[i]`` of the pieces it spans."""

    pieces: list[tuple[int, int]]
    first: np.ndarray
    last: np.ndarray


def piece_layout(
    size: int, starts: np.ndarray, ends: np.ndarray, reads: str, block: int
) -> PieceLayout:
    """The pieces of byte ranges ``[starts[i], ends[i])`` (non-empty, inside the file).

    Args:
        size: File bytes.
        starts: First bytes, int64.
        ends: End bytes (exclusive), int64.
        reads: ``"exact"`` or ``"blocks"`` (``storage.window_reads``).
        block: ``storage.block_size``.
    """
    if reads == "blocks":
        first, last = starts // block, (ends - 1) // block
        bounds = zip(first.tolist(), last.tolist(), strict=True)
        spans = [np.arange(f, t + 1) for f, t in bounds if t - f > 1]
        ids = np.unique(np.concatenate([first, last, *spans]))
        pieces = [(i * block, min((i + 1) * block, size)) for i in ids.tolist()]
        return PieceLayout(pieces, np.searchsorted(ids, first), np.searchsorted(ids, last))
    # Distinct (start, end) pairs in order; a lexsort is ~10x cheaper than np.unique(axis=0).
    order = np.lexsort((ends, starts))
    lo, hi = starts[order], ends[order]
    new = np.empty(lo.shape[0], dtype=bool)
    new[:1] = True
    new[1:] = (lo[1:] != lo[:-1]) | (hi[1:] != hi[:-1])
    index = np.empty(lo.shape[0], dtype=np.int64)
    index[order] = np.cumsum(new) - 1
    pieces = list(zip(lo[new].tolist(), hi[new].tolist(), strict=True))
    return PieceLayout(pieces, index, index)
