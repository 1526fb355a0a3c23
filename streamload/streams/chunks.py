"""What flows between stages: a chunk's plan, and its tokens."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

__all__ = [
    "ChunkPlan",
    "TokenChunk",
    "new_loss_mask",
    "put_loss_mask",
    "put_rows",
    "source_window_starts",
]


@dataclass(frozen=True)
class ChunkPlan:
    """A run of consecutive batches of one rank.

    Args:
        pass_index: The pass these samples belong to.
        sample_ids: Pass-relative global sample ids, int64 ``[batches, batch_size]``.
        sources: Source index of each sample, int16, same shape.
        local_ids: Each sample's index in its source's own sequence, int64, same shape.
        padding: Evaluation loaders only (``None`` elsewhere): bool, same shape, true for a
            row past the end of the pass, which repeats a real sample (its ids above) and
            is delivered with ``sample_mask`` false, ``sample_index`` -1 and labels -100.
        row_length: Sequence-length warm-up only (``None`` elsewhere): the chunk's steps
            run at this length, so each window is cut into ``seq_len / row_length`` rows
            (:mod:`streamload.streams.seq_len`).
    """

    pass_index: int
    sample_ids: np.ndarray
    sources: np.ndarray
    local_ids: np.ndarray
    padding: np.ndarray | None = None
    row_length: int | None = None


@dataclass(frozen=True)
class TokenChunk:
    """The tokens of a chunk.

    Args:
        plan: The chunk plan.
        tokens: ``[batches * batch_size, seq_len + 1]`` in the sources' common dtype.
        starts: Stream offset of each window in its source, int64 ``[batches * batch_size]``.
        doc_starts: Document starts ``[batches * batch_size, seq_len + 1]`` (from a format's
            index or EOS), or ``None`` when masks are off.
        skipped_rows: Rows skipped under ``on_error = "skip"`` (their bytes stayed
            unreadable; their tokens are zeros), int64 row indices into ``tokens``.
        lengths: Tokens of each row that are data, int64 ``[batches * batch_size]``; the rest
            of the row is padding (packed and padded modes). ``None``: every token is data.
        loss_mask: Per-token loss flags from the sources' mask files, uint8 like ``tokens``'
            shape (nonzero: the token is trained as a label; rows of sources without masks
            are all ones); ``None`` when no source has a mask.
    """

    plan: ChunkPlan
    tokens: np.ndarray
    starts: np.ndarray
    doc_starts: np.ndarray | None = None
    skipped_rows: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    lengths: np.ndarray | None = None
    loss_mask: np.ndarray | None = None


def new_loss_mask(sources: Sequence[Any], shape: tuple[int, ...]) -> np.ndarray | None:
    """A loss-mask block of ``shape`` to fill row by row with :func:`put_loss_mask`, when
    any of ``sources`` (each with a ``loss_masks`` shard set or ``None``) has masks; else
    ``None``. Uninitialized: untouched memory costs no page until a row is written."""
    if all(getattr(s, "loss_masks", None) is None for s in sources):
        return None
    return np.empty(shape, dtype=np.uint8)


def put_rows(block: np.ndarray, rows: np.ndarray, part: np.ndarray) -> np.ndarray:
    """``block`` with its ``rows`` set to ``part`` (one source's rows of a chunk). When the
    rows are the whole block and ``part`` has its dtype, ``part`` itself is the block (no
    copy: a chunk of one source)."""
    if rows.shape[0] == block.shape[0] and part.dtype == block.dtype:
        return part
    block[rows] = part
    return block


def put_loss_mask(block: np.ndarray, rows: np.ndarray, part: np.ndarray | None) -> np.ndarray:
    """:func:`put_rows` of a source's mask rows; ``None``: a source without masks, all
    trained."""
    if part is None:
        block[rows] = 1
        return block
    return put_rows(block, rows, part)


def source_window_starts(sources: Sequence[Any], src: np.ndarray, local: np.ndarray) -> np.ndarray:
    """Where each sample's tokens start in its source: ``sources[src[i]].window_starts(
    local[i])``, one call per source present (any shape)."""
    out = np.empty(src.shape, dtype=np.int64)
    for index in np.unique(src).tolist():
        where = src == index
        out[where] = sources[index].window_starts(local[where])
    return out
