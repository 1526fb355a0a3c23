"""Carving fixed-length windows out of a source's token stream.

A window holds ``seq_len + 1`` tokens; windows start every ``seq_len`` tokens, so consecutive
windows share one token (labels are inputs shifted by one — Megatron's stride).

Worked example, shards of 10 and 7 tokens (T = 17), seq_len L = 4:

* ``cross_shard=True``: the stream is 17 tokens; ``(17 - 1) // 4 = 4`` windows starting at
  tokens 0, 4, 8, 12 — window 2 covers tokens 8..12 and spans both shards.
* ``cross_shard=False``: shard 0 gives ``(10 - 1) // 4 = 2`` windows (0, 4), shard 1 gives
  ``(7 - 1) // 4 = 1`` window starting at its own token 0, i.e. stream token 10.

Output of :meth:`WindowLayout.starts` is always an offset into the source's concatenated
token stream, so readers need only the per-shard cumulative token counts.
"""

from __future__ import annotations

import numpy as np

__all__ = ["WindowLayout"]


class WindowLayout:
    """Window count and window → stream offset for one source.

    Args:
        shard_tokens: Token count of each shard, in shard order.
        seq_len: L; windows hold L + 1 tokens.
        cross_shard: Whether windows may span two shards.
    """

    def __init__(self, shard_tokens: np.ndarray, seq_len: int, cross_shard: bool) -> None:
        tokens = np.asarray(shard_tokens, dtype=np.int64)
        self.seq_len = seq_len
        self.cross_shard = cross_shard
        self.shard_offsets = np.concatenate([[0], np.cumsum(tokens)]).astype(np.int64)
        if cross_shard:
            total = int(self.shard_offsets[-1])
            self.num_windows = max(0, (total - 1) // seq_len)
            self._window_offsets = None
        else:
            per_shard = np.maximum(0, (tokens - 1) // seq_len)
            self._window_offsets = np.concatenate([[0], np.cumsum(per_shard)]).astype(np.int64)
            self.num_windows = int(self._window_offsets[-1])

    def starts(self, window_ids: np.ndarray) -> np.ndarray:
        """Stream offset (int64) of the first token of each window id."""
        w = np.asarray(window_ids, dtype=np.int64)
        if self._window_offsets is None:
            return w * self.seq_len
        shard = np.searchsorted(self._window_offsets, w, side="right") - 1
        return self.shard_offsets[shard] + (w - self._window_offsets[shard]) * self.seq_len
