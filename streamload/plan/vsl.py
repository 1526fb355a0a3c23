"""Dataset decomposition: a source's documents → pieces of power-of-two lengths, in buckets.

Pouransari et al. 2024 ("Dataset Decomposition", arXiv 2405.13226) and OLMo-core's
``NumpyVSLDataset`` cut each document into pieces by the binary representation of its
length; this module is that cut, vectorized over all documents at once (pure numpy, no I/O).

A piece of ``L`` inputs reads ``L + 1`` tokens (inputs and their labels, shifted by one) that
lie inside one document, and consecutive pieces overlap by one token, so every next-token
pair of the kept part of a document is trained exactly once and no label crosses into the
next document (OLMo-core's pieces hold ``L`` tokens and lose the pair at each cut). A
document of ``T`` tokens has ``n = T − 1`` pairs:

* ``n // max_len`` pieces of ``max_len`` first, from the document's start;
* then one piece for each set bit of ``r = n mod max_len`` that is ``>= min_len``, largest
  first;
* the last ``r mod min_len`` pairs (the document's tail, usually its EOS) are in no piece:
  they are *dropped*, and counted (OLMo-core drops them silently).

Example (``min_len = 4``, ``max_len = 16``): a document of 46 tokens has 45 pairs = 2·16 +
8 + 4 + 1: pieces of 16, 16, 8 and 4 inputs at offsets 0, 16, 32, 40; 1 pair dropped.

Pieces of one length form a **bucket**; buckets are listed from the shortest length up,
and each bucket's pieces are in storage order (stream offset).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from streamload.plan.packing import checked_bounds

__all__ = ["PieceBuckets", "bucket_lengths", "decompose"]


def bucket_lengths(min_len: int, max_len: int) -> tuple[int, ...]:
    """The powers of two from ``min_len`` to ``max_len`` (both powers of two), ascending."""
    if min_len < 1 or max_len < min_len or min_len & (min_len - 1) or max_len & (max_len - 1):
        raise ValueError(f"lengths {min_len}..{max_len}: expected powers of two, min <= max")
    return tuple(1 << k for k in range(min_len.bit_length() - 1, max_len.bit_length()))


@dataclass(frozen=True)
class PieceBuckets:
    """A source's pieces, bucket by bucket.

    Args:
        lengths: Inputs per piece of each bucket, ascending powers of two.
        starts: int64 ``[pieces]``: stream offset of each piece's first token, bucket after
            bucket, in storage order inside a bucket.
        offsets: int64 ``[buckets + 1]``: bucket ``k`` is ``starts[offsets[k]:offsets[k+1]]``.
        documents: Documents holding at least one token.
        dropped_tokens: Next-token pairs (input positions) in no piece: each document's tail
            shorter than the shortest length.
    """

    lengths: tuple[int, ...]
    starts: np.ndarray
    offsets: np.ndarray
    documents: int
    dropped_tokens: int

    def count(self, bucket: int) -> int:
        """Pieces in ``bucket``."""
        return int(self.offsets[bucket + 1] - self.offsets[bucket])

    @property
    def kept_tokens(self) -> int:
        """Input positions covered by pieces (one epoch)."""
        sizes = np.diff(self.offsets)
        return int(np.dot(sizes, np.asarray(self.lengths, dtype=np.int64)))


def decompose(doc_bounds: np.ndarray, min_len: int, max_len: int) -> PieceBuckets:
    """Cut documents into pieces (see the module docstring).

    Args:
        doc_bounds: int64 ``[d + 1]``, non-decreasing stream offsets; document ``i`` is tokens
            ``[doc_bounds[i], doc_bounds[i + 1])``.
        min_len: Shortest piece (inputs), a power of two.
        max_len: Longest piece (inputs), a power of two ``>= min_len``.

    Raises:
        ValueError: bad lengths, or ``doc_bounds`` is not a non-decreasing 1-D array >= 0.
    """
    lengths = bucket_lengths(min_len, max_len)
    bounds, sizes = checked_bounds(doc_bounds)
    pairs = np.maximum(sizes - 1, 0)
    full, rest = np.divmod(pairs, max_len)
    firsts = bounds[:-1]
    parts = [_bit_pieces(firsts, full * max_len, rest, length) for length in lengths[:-1]]
    parts.append(_full_pieces(firsts, full, max_len))
    offsets = np.zeros(len(lengths) + 1, dtype=np.int64)
    offsets[1:] = np.cumsum([p.size for p in parts])
    return PieceBuckets(
        lengths=lengths,
        starts=np.concatenate(parts) if parts else np.zeros(0, np.int64),
        offsets=offsets,
        documents=int(np.count_nonzero(sizes)),
        dropped_tokens=int((rest & (min_len - 1)).sum()),
    )


def _full_pieces(firsts: np.ndarray, full: np.ndarray, max_len: int) -> np.ndarray:
    """Starts of each document's ``full[i]`` pieces of ``max_len``, in storage order."""
    total = int(full.sum())
    within = np.arange(total, dtype=np.int64) - np.repeat(np.cumsum(full) - full, full)
    return np.repeat(firsts, full) + within * max_len


def _bit_pieces(firsts: np.ndarray, base: np.ndarray, rest: np.ndarray, length: int) -> np.ndarray:
    """Starts of the pieces of ``length`` (a set bit of ``rest``): after the full pieces
    (``base``) and the pieces of the higher bits."""
    has = (rest & length) != 0
    higher = rest[has] & ~np.int64(2 * length - 1)
    return firsts[has] + base[has] + higher
