"""Which source gives which rows of a variable-length global batch (``vsl`` mixtures).

A step of length ``L_k`` holds ``R_k`` rows. Its sources are those with pieces of that
length (:func:`bucket_weights`). Their rows follow a fixed **pattern** of ``P`` rows
(``P`` the smallest multiple of ``R_k`` that is ``>= 4096``): source ``s`` holds ``n_s``
of them, ``n`` its weight's share of ``P`` by largest remainders, spread evenly over the
pattern (:func:`streamload.plan.mixture.interleave`). The bucket's rows, batch after batch,
walk the pattern over and over: batch ``J`` takes rows ``[J·R, (J+1)·R)`` of it. So

* every batch has exactly ``R`` rows, and a source's count is monotone in ``J``;
* after any number of batches a source is within a row or two of the pattern's share, which
  is its weight to within ``1/P``;
* the rows a source gave in the first ``J`` batches are a closed form (whole patterns plus a
  prefix count), so a resumed run replays nothing.

A deficit rule (concat mixtures) needs the history; cumulative rounding of the weights'
running boundaries is not monotone (a source can "lose" a row between batches), which a
source's draw sequence cannot allow. A schedule phase starts a new pattern from the counts
at its first batch (:mod:`streamload.modes.vsl.draws`).

Each (source, bucket) is an endless sequence of draws: draw ``d`` is slot ``d mod E`` of
epoch ``d // E`` of the source's keyed permutation of its pieces of that length (``E``: the
pieces an epoch uses; see :class:`streamload.modes.vsl.stream.VslStream`).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from streamload.plan.mixture import interleave
from streamload.plan.vsl_curriculum import apportion

__all__ = ["PATTERN_ROWS", "RowPattern", "bucket_weights", "row_pattern"]

PATTERN_ROWS = 4096
"""Rows of a pattern at least: the precision of a source's share is ``1 / PATTERN_ROWS``."""


def bucket_weights(weights: np.ndarray, has_pieces: np.ndarray) -> np.ndarray:
    """float64 ``[sources]``: ``weights`` over the sources with pieces of the bucket,
    normalized to sum 1; when every source with pieces has weight 0 (a phase that turned them
    off), those sources share the bucket equally (its steps need rows); all zero when no
    source has pieces."""
    has = np.asarray(has_pieces, dtype=bool)
    w = np.where(has, np.asarray(weights, dtype=np.float64), 0.0)
    if w.sum() <= 0:
        w = has.astype(np.float64)
    total = w.sum()
    return w / total if total > 0 else w


@dataclass(frozen=True)
class RowPattern:
    """The repeating assignment of a bucket's rows to sources.

    Args:
        rows: Rows per batch R.
        sources: int64 ``[P]``: the source of each row of the pattern.
        counts: int64 ``[sources]``: rows of each source in one pattern.
    """

    rows: int
    sources: np.ndarray
    counts: np.ndarray

    def drawn(self, batches: int) -> np.ndarray:
        """int64 ``[sources]``: rows each source gave in the first ``batches`` batches."""
        whole, part = divmod(batches * self.rows, self.sources.size)
        head = np.bincount(self.sources[:part], minlength=self.counts.size)
        return whole * self.counts + head

    def place(self, batch: int) -> tuple[np.ndarray, np.ndarray]:
        """``(source of each row, rank of the row among its source's rows of the batch)``
        of batch number ``batch``."""
        first = (batch * self.rows) % self.sources.size
        positions = (first + np.arange(self.rows)) % self.sources.size
        sources = self.sources[positions]
        order = np.argsort(sources, kind="stable")
        ranks = np.empty(self.rows, dtype=np.int64)
        counts = np.bincount(sources, minlength=self.counts.size)
        ranks[order] = np.arange(self.rows) - np.repeat(np.cumsum(counts) - counts, counts)
        return sources, ranks


def row_pattern(shares: np.ndarray, rows: int) -> RowPattern:
    """The pattern of a bucket of ``rows`` rows per batch for ``shares``
    (:func:`bucket_weights`; all zero: no source, an empty pattern of zeros)."""
    period = rows * -(-PATTERN_ROWS // rows)
    counts = apportion(period, shares.tolist()) if shares.sum() > 0 else None
    if counts is None:
        return RowPattern(rows, np.zeros(period, np.int64), np.zeros(shares.size, np.int64))
    return RowPattern(rows, interleave(counts).astype(np.int64), counts.astype(np.int64))
