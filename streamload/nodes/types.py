"""What flows between stages."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

__all__ = ["ChunkPlan", "TokenChunk"]


@dataclass(frozen=True)
class ChunkPlan:
    """A run of consecutive batches of one rank.

    Args:
        pass_index: The pass these samples belong to.
        sample_ids: Pass-relative sample ids, int64 ``[batches, batch_size]``.
    """

    pass_index: int
    sample_ids: np.ndarray


@dataclass(frozen=True)
class TokenChunk:
    """The tokens of a chunk.

    Args:
        plan: The chunk plan.
        tokens: ``[batches * batch_size, seq_len + 1]`` in the file dtype.
        starts: Stream offset of each window, int64 ``[batches * batch_size]``.
        doc_starts: Document starts ``[batches * batch_size, seq_len + 1]`` from the format's
            index, or ``None`` (then EOS tokens mark documents).
    """

    plan: ChunkPlan
    tokens: np.ndarray
    starts: np.ndarray
    doc_starts: np.ndarray | None = None
