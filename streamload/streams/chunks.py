"""What flows between stages: a chunk's plan, and its tokens."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

__all__ = ["ChunkPlan", "TokenChunk"]


@dataclass(frozen=True)
class ChunkPlan:
    """A run of consecutive batches of one rank.

    Args:
        pass_index: The pass these samples belong to.
        sample_ids: Pass-relative global sample ids, int64 ``[batches, batch_size]``.
        sources: Source index of each sample, int16, same shape.
        local_ids: Each sample's index in its source's own sequence, int64, same shape.
    """

    pass_index: int
    sample_ids: np.ndarray
    sources: np.ndarray
    local_ids: np.ndarray


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
    """

    plan: ChunkPlan
    tokens: np.ndarray
    starts: np.ndarray
    doc_starts: np.ndarray | None = None
    skipped_rows: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    lengths: np.ndarray | None = None
