"""Which source gives which rows of a variable-length global batch (``vsl`` mixtures).

A step of length ``L_k`` holds ``R_k`` rows. Its sources are those with pieces of that
length; their weights, renormalized over them, decide their rows by **cumulative rounding**:
after ``J`` batches of bucket ``k`` (counted from the start of training), source ``s`` has
given ``floor(J·R·c_s) − floor(J·R·c_{s−1})`` rows, ``c_s`` the cumulative weight of the
sources up to ``s``. So a batch gives each source ``floor`` or ``ceil`` of its share, the
running deviation stays under one row per source, and — unlike a deficit rule that needs the
history — the count after any ``J`` is a closed form: a resumed run needs no replay.

Each (source, bucket) is an endless sequence of draws: draw ``d`` is slot ``d mod E`` of
epoch ``d // E`` of the source's keyed permutation of its pieces of that length (``E``: the
pieces an epoch uses; see :class:`streamload.streams.vsl.VslStream`).
"""

from __future__ import annotations

import numpy as np

from streamload.plan.mixture import interleave

__all__ = ["bucket_weights", "drawn_rows", "step_rows"]


def bucket_weights(weights: np.ndarray, has_pieces: np.ndarray) -> np.ndarray:
    """float64 ``[sources]``: ``weights`` over the sources with pieces of the bucket,
    normalized to sum 1 (all zero when none has pieces or weight)."""
    w = np.where(has_pieces, np.asarray(weights, dtype=np.float64), 0.0)
    total = w.sum()
    return w / total if total > 0 else w


def drawn_rows(shares: np.ndarray, rows: int, batches: np.ndarray | int) -> np.ndarray:
    """int64 ``[..., sources]``: rows each source gave in the first ``batches`` batches of a
    bucket of ``rows`` rows per batch, by cumulative rounding of ``shares``
    (:func:`bucket_weights`)."""
    j = np.asarray(batches, dtype=np.int64)[..., None]
    cumulative = np.cumsum(shares)
    bounds = np.floor(j * rows * cumulative).astype(np.int64)
    if shares.size and cumulative[-1] > 0:
        bounds[..., -1] = j[..., 0] * rows  # exact: every row goes to some source
    return np.diff(bounds, axis=-1, prepend=0)


def step_rows(shares: np.ndarray, rows: int, batch: int) -> tuple[np.ndarray, np.ndarray]:
    """``(source of each row, draw index of each row in its source's sequence)`` of the
    bucket's batch number ``batch``: sources spread evenly over the rows
    (:func:`streamload.plan.mixture.interleave`), each source's rows in draw order."""
    before, after = drawn_rows(shares, rows, np.array([batch, batch + 1]))
    counts = after - before
    sources = interleave(counts)
    order = np.argsort(sources, kind="stable")
    draws = np.empty(sources.size, dtype=np.int64)
    draws[order] = np.concatenate(
        [np.arange(b, b + c, dtype=np.int64) for b, c in zip(before, counts, strict=True)]
    )
    return sources, draws
