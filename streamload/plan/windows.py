"""Carving fixed-length windows out of a source's token stream.

A window holds ``seq_len + 1`` tokens; windows start every ``seq_len`` tokens, so consecutive
windows share one token (labels are inputs shifted by one — Megatron's stride).

Worked example, shards of 10 and 7 tokens (T = 17), seq_len L = 4:

* ``cross_shard=True``: the stream is 17 tokens; ``(17 - 1) // 4 = 4`` windows starting at
  tokens 0, 4, 8, 12 — window 2 covers tokens 8..12 and spans both shards.
* ``cross_shard=False``: shard 0 gives ``(10 - 1) // 4 = 2`` windows (0, 4), shard 1 gives
  ``(7 - 1) // 4 = 1`` window starting at its own token 0, i.e. stream token 10.

A split (:mod:`streamload.plan.split`) restricts the windows to a token range ``[lo, hi)`` of
the stream: each shard keeps its part ``[lo_i, hi_i)`` of it, and windows are carved inside
those parts exactly as above (``cross_shard=True``: from ``lo``, ``(hi - lo - 1) // L``
windows; ``False``: ``(hi_i - lo_i - 1) // L`` per shard, from ``lo_i``), so no window holds a
token outside the range. With the range ``[6, 17)`` the example gives windows at 6 and 10
(``cross_shard=True``), or only 10 (``False``: shard 0's part, tokens 6..9, holds fewer than
``L + 1``).

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
        span: Stream token range ``[lo, hi)`` the windows lie in (a split); ``None``: all.
    """

    def __init__(
        self,
        shard_tokens: np.ndarray,
        seq_len: int,
        cross_shard: bool,
        span: tuple[int, int] | None = None,
    ) -> None:
        tokens = np.asarray(shard_tokens, dtype=np.int64)
        self.seq_len = seq_len
        self.cross_shard = cross_shard
        self.shard_offsets = np.concatenate([[0], np.cumsum(tokens)]).astype(np.int64)
        total = int(self.shard_offsets[-1])
        lo, hi = (0, total) if span is None else (max(0, span[0]), min(total, span[1]))
        self.span = (lo, max(lo, hi))
        if cross_shard:
            self.num_windows = max(0, (self.span[1] - lo - 1) // seq_len)
            self._window_offsets = None
        else:
            self._shard_lo = np.clip(lo, self.shard_offsets[:-1], self.shard_offsets[1:])
            shard_hi = np.clip(hi, self.shard_offsets[:-1], self.shard_offsets[1:])
            per_shard = np.maximum(0, (shard_hi - self._shard_lo - 1) // seq_len)
            self._window_offsets = np.concatenate([[0], np.cumsum(per_shard)]).astype(np.int64)
            self.num_windows = int(self._window_offsets[-1])

    def starts(self, window_ids: np.ndarray) -> np.ndarray:
        """Stream offset (int64) of the first token of each window id."""
        w = np.asarray(window_ids, dtype=np.int64)
        if self._window_offsets is None:
            return self.span[0] + w * self.seq_len
        shard = np.searchsorted(self._window_offsets, w, side="right") - 1
        return self._shard_lo[shard] + (w - self._window_offsets[shard]) * self.seq_len
