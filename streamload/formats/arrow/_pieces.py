"""A shard's tokens held in consecutive pieces: Arrow record batches or Parquet row groups.

An Arrow IPC file stores its token column once per record batch (``datasets`` writes batches
of 1,000 rows), a Parquet file once per row group; each piece's values are contiguous, the
pieces are not. A token range inside one piece is a view of it (no copy); a range across
pieces is copied into a new array. Document offsets are each piece's list offsets moved to
the piece's first token.

Example: pieces of 3, 0 and 2 tokens have ``starts = [0, 3, 3, 5]``; tokens ``[1, 3)`` are a
view of piece 0, tokens ``[2, 4)`` join piece 0's last token and piece 2's first.
"""

from __future__ import annotations

import bisect
from collections.abc import Callable, Sequence

import numpy as np

__all__ = ["piece_starts", "pieces_bounds", "take_tokens"]


def piece_starts(counts: Sequence[int]) -> np.ndarray:
    """Token offset of each piece's first token, and the total last (int64, ``k + 1``)."""
    starts = np.zeros(len(counts) + 1, dtype=np.int64)
    np.cumsum(np.asarray(counts, dtype=np.int64), out=starts[1:])
    return starts


def take_tokens(
    starts: list[int],
    piece: Callable[[int], np.ndarray],
    start: int,
    stop: int,
    dtype: np.dtype,
) -> np.ndarray:
    """Tokens ``[start, stop)`` of pieces whose offsets are ``starts`` (a list, ``k + 1``
    long): a view of one piece when the range lies inside it, else a new array.

    Args:
        starts: :func:`piece_starts` as a Python list (``bisect`` on it costs ~0.2 us).
        piece: The tokens of piece ``i`` (exactly its tokens, ``starts[i + 1] - starts[i]``).
        start: First token.
        stop: End token (exclusive); clipped to the total.
        dtype: dtype of an empty result.
    """
    stop = min(stop, starts[-1])
    if stop <= start:
        return np.empty(0, dtype=dtype)
    index = bisect.bisect_right(starts, start) - 1
    base = starts[index]
    if stop <= starts[index + 1]:
        return piece(index)[start - base : stop - base]
    parts = []
    while start < stop:
        end = min(stop, starts[index + 1])
        parts.append(piece(index)[start - starts[index] : end - starts[index]])
        start, index = end, index + 1
    return np.concatenate(parts)


def pieces_bounds(offsets: Sequence[np.ndarray], starts: np.ndarray) -> np.ndarray:
    """Document bounds of the whole shard (int64, ``documents + 1``) from each piece's list
    offsets (``rows + 1`` each, starting anywhere) and the pieces' token offsets."""
    parts = [
        np.asarray(o[:-1], dtype=np.int64) - int(o[0]) + int(s)
        for o, s in zip(offsets, starts[:-1].tolist(), strict=True)
    ]
    parts.append(starts[-1:].astype(np.int64))
    return np.concatenate(parts)
