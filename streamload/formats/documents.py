"""Document bounds of a shard, whatever the format records (the one rule for every tool and
sampling mode that needs documents).

Three sources of truth, in order: the format's document index (Megatron ``document_indices``,
Dolma CSV, datatrove ``.ds.index``, Modalities pickle), else an EOS token (a document ends
after each EOS; a trailing partial document counts), else the whole shard is one document.
Token data is streamed in blocks of :data:`BLOCK_TOKENS`, so memory stays bounded on any
shard size.
"""

from __future__ import annotations

import numpy as np

from streamload.formats.base import TokenShard

__all__ = ["BLOCK_TOKENS", "document_bounds"]

BLOCK_TOKENS = 1 << 24
"""Tokens read per block when scanning a shard."""


def _eos_bounds(shard: TokenShard, eos_token_id: int) -> np.ndarray:
    total = shard.info.num_tokens
    ends = []
    for start in range(0, total, BLOCK_TOKENS):
        block = np.asarray(shard.tokens(start, min(total, start + BLOCK_TOKENS)))
        ends.append(np.flatnonzero(block == eos_token_id) + start + 1)
    bounds = np.concatenate([[0], *ends]).astype(np.int64)
    return bounds if bounds[-1] == total else np.append(bounds, total)


def document_bounds(
    shard: TokenShard, eos_token_id: int | None = None, sequences: bool = False
) -> np.ndarray:
    """Token bounds of the shard's documents: document i is ``[b[i], b[i+1])``.

    Args:
        shard: An opened shard.
        eos_token_id: EOS that ends documents when the format has no index.
        sequences: For Megatron, list sequences (what GPTDataset calls documents).
    """
    if sequences:
        seq = getattr(shard, "sequence_bounds", None)
        if seq is not None:
            return np.asarray(seq())
    bounds = shard.document_bounds()
    if bounds is not None:
        return np.asarray(bounds)
    if eos_token_id is not None:
        return _eos_bounds(shard, eos_token_id)
    return np.array([0, shard.info.num_tokens], dtype=np.int64)
