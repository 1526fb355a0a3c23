"""The order of one epoch's variable-length batches: which length each step uses.

An epoch has a fixed set of global batches: bucket ``k`` (length ``L_k``) gives
``batches[k] = pieces_k // (tokens_per_batch / L_k)`` of them (the leftover pieces of each
bucket are not used in that epoch). A curriculum only *orders* that set, so every piece is
used at most once per epoch and the realized share of each length is exactly its count:

* **Step 0** is a batch of the longest length (when there is one), as in OLMo-core: a step
  that runs out of memory does so at once. The curriculum orders the remaining batches.
* The remaining batches are cut into **segments**; segment ``s`` holds ``counts[s, k]``
  batches of bucket ``k``, in a keyed shuffle of the segment (key: seed, epoch, source,
  segment). ``natural``: one segment, all batches. ``grow_p2`` / ``grow_linear`` /
  ``cyclic_p2`` (the paper's Grow-P2 and Grow-Linear, OLMo-core's ``VSLGrowthCurriculum``):
  ``num_cycles`` cycles of one segment per bucket (*sub-cycles*); a bucket's batches are
  split evenly over the cycles, and inside a cycle over its sub-cycles by odds that rotate
  so that sub-cycle ``j`` favours length ``j`` (shortest first): ``2^(e-1)`` for
  ``grow_p2``/``cyclic_p2`` or ``e`` for ``grow_linear``, ``e`` from OLMo-core's rotation
  (:func:`growth_odds`). Counts are apportioned by largest remainders, so they always add
  up (OLMo-core rounds each share and can hand out more batches than a bucket has).
* A **table** (``[[sampling.curriculum]]``): phases from epoch steps ``start_step`` on, each
  one segment whose batches are apportioned by the phase's weights per length; a length
  whose batches are used up gives its share to the others (:func:`table_order`), and the last
  phase holds whatever is left.
* Inside a bucket, batch ``i`` of the epoch takes the bucket's pieces at positions
  ``[i·R, (i+1)·R)`` of the bucket's own keyed permutation (key: seed, epoch, source, length).

Locating a step is O(segments + buckets) to set up and O(1) per step: no per-epoch array of
steps is ever built, so resuming at step ``s`` computes only step ``s``.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from streamload.plan._exact import integer_weights
from streamload.plan.permutation import KeyedPermutation, derive_key

__all__ = [
    "APPORTION",
    "CURRICULA",
    "EpochOrder",
    "apportion",
    "epoch_order",
    "growth_odds",
    "table_order",
]

APPORTION = "exact-1"
"""The apportioning rule's name, part of a vsl fingerprint: largest remainders decided by exact
integer comparisons (a state saved under the float rule before it is refused by name)."""

CURRICULA = ("natural", "grow_p2", "grow_linear", "cyclic_p2")


def apportion(total: int, weights: Sequence[float]) -> np.ndarray:
    """``total`` split in proportion to ``weights`` by largest remainders (ties to the
    lowest index): int64 counts that add up to ``total``.

    Exact: the weights are read as integers (:mod:`streamload.plan._exact`), so quotas,
    remainders and their ties are the same on every machine.
    """
    nums, denominator = integer_weights(weights)
    if total == 0 or denominator <= 0:
        return np.zeros(len(nums), dtype=np.int64)
    scaled = [total * n for n in nums]  # quota times the denominator
    counts = [x // denominator for x in scaled]
    short = total - sum(counts)
    if short > 0:  # sorted is stable: equal remainders go to the lowest index
        order = sorted(range(len(nums)), key=lambda i: -(scaled[i] % denominator))
        for i in order[:short]:
            counts[i] += 1
    return np.array(counts, dtype=np.int64)


def growth_odds(bucket: int, buckets: int, power: bool) -> list[int]:
    """Odds of ``bucket`` in each of a cycle's ``buckets`` sub-cycles: exponents rotate so
    that the shortest length peaks first and the longest last (the paper's Grow-P2 with
    ``power``, Grow-Linear without; OLMo-core's ``_get_bucket_odds_for_cycle``)."""
    first = buckets - bucket
    odds = []
    for sub in range(buckets):
        e = first + sub if first + sub <= buckets else first - (first + sub) % buckets
        odds.append(2 ** (e - 1) if power else e)
    return odds


@dataclass(frozen=True)
class EpochOrder:
    """Where every step of an epoch lies: the head and the segments' counts.

    Args:
        head: Bucket of step 0, or -1 (no batch of the longest length: no head).
        counts: int64 ``[segments, buckets]``: batches of each bucket in each segment.
    """

    head: int
    counts: np.ndarray
    _segment_starts: np.ndarray = field(init=False, repr=False)
    _before: np.ndarray = field(init=False, repr=False)
    _within: np.ndarray = field(init=False, repr=False)

    def __post_init__(self) -> None:
        counts = np.asarray(self.counts, dtype=np.int64)
        sizes = counts.sum(axis=1)
        object.__setattr__(self, "_segment_starts", np.concatenate([[0], np.cumsum(sizes)]))
        before = np.cumsum(counts, axis=0) - counts  # batches of bucket k in earlier segments
        if self.head >= 0:
            before[:, self.head] += 1  # the head is the bucket's batch 0
        object.__setattr__(self, "_before", before)
        within = np.zeros((counts.shape[0], counts.shape[1] + 1), dtype=np.int64)
        within[:, 1:] = np.cumsum(counts, axis=1)
        object.__setattr__(self, "_within", within)

    @property
    def segment_steps(self) -> np.ndarray:
        """int64 ``[segments + 1]``: segment ``s`` is the epoch's steps
        ``[segment_steps[s], segment_steps[s + 1])`` (after the head, when there is one)."""
        return self._segment_starts + (self.head >= 0)

    @property
    def steps(self) -> int:
        """Global batches in the epoch."""
        return int(self._segment_starts[-1]) + (self.head >= 0)

    def bucket_totals(self) -> np.ndarray:
        """int64 ``[buckets]``: batches of each bucket in the epoch."""
        totals = self.counts.sum(axis=0)
        if self.head >= 0:
            totals[self.head] += 1
        return totals

    def locate(
        self, steps: np.ndarray, keys: tuple[int, int, str] | None
    ) -> tuple[np.ndarray, np.ndarray]:
        """``(bucket, batch index inside the bucket's epoch)`` of epoch-relative steps.

        Args:
            steps: int64 steps in ``[0, self.steps)``, any shape.
            keys: ``(seed, epoch, stream name)`` of the segments' shuffles; ``None``: no
                shuffle (each segment in bucket order).
        """
        s = np.asarray(steps, dtype=np.int64).ravel()
        if s.size and (s.min() < 0 or s.max() >= self.steps):
            raise IndexError(f"step out of range [0, {self.steps})")
        bucket = np.full(s.size, self.head, dtype=np.int64)
        index = np.zeros(s.size, dtype=np.int64)
        rest = s - (self.head >= 0)
        body = np.flatnonzero(rest >= 0)
        segment = np.searchsorted(self._segment_starts, rest[body], "right") - 1
        for seg in np.unique(segment).tolist():
            rows = body[segment == seg]
            pos = rest[rows] - self._segment_starts[seg]
            if keys is not None:
                seed, epoch, name = keys
                size = int(self._segment_starts[seg + 1] - self._segment_starts[seg])
                key = derive_key(seed=seed, epoch=epoch, stream=f"{name}/vsl/segment={seg}")
                pos = KeyedPermutation(size, key)(pos)
            b = np.searchsorted(self._within[seg], pos, "right") - 1
            bucket[rows] = b
            index[rows] = self._before[seg, b] + pos - self._within[seg, b]
        shape = np.shape(steps)
        return bucket.reshape(shape), index.reshape(shape)


def epoch_order(batches: Sequence[int], curriculum: str, cycles: int = 1) -> EpochOrder:
    """The order of an epoch of ``batches[k]`` batches of bucket ``k`` (ascending lengths).

    Raises:
        ValueError: an unknown curriculum or ``cycles < 1``.
    """
    if curriculum not in CURRICULA:
        raise ValueError(f"curriculum {curriculum!r}: expected one of {CURRICULA}")
    if cycles < 1:
        raise ValueError(f"cycles = {cycles}: expected >= 1")
    left = np.asarray(batches, dtype=np.int64).copy()
    head = len(left) - 1 if left.size and left[-1] > 0 else -1
    if head >= 0:
        left[head] -= 1
    if curriculum == "natural":
        return EpochOrder(head, left.reshape(1, -1))
    k = left.size
    counts = np.zeros((cycles * k, k), dtype=np.int64)
    for b in range(k):
        odds = growth_odds(b, k, curriculum != "grow_linear")
        for c, per_cycle in enumerate(apportion(int(left[b]), [1.0] * cycles).tolist()):
            counts[c * k : (c + 1) * k, b] = apportion(per_cycle, odds)
    return EpochOrder(head, counts)


def table_order(batches: Sequence[int], starts: Sequence[int], weights: np.ndarray) -> EpochOrder:
    """The order of a table curriculum: phase ``p`` holds the epoch's steps from
    ``starts[p]`` (``starts[0] = 0``, increasing) to the next start, its batches apportioned
    by ``weights[p]`` (per bucket) among the buckets with batches left, capped by what is
    left; the last phase takes all that is left.

    Raises:
        ValueError: ``starts`` does not begin at 0 and increase, or shapes disagree.
    """
    left = np.asarray(batches, dtype=np.int64).copy()
    w = np.asarray(weights, dtype=np.float64)
    if list(starts[:1]) != [0] or any(b <= a for a, b in itertools.pairwise(starts)):
        raise ValueError(f"starts {list(starts)}: expected 0, then increasing")
    if w.shape != (len(starts), left.size):
        raise ValueError(f"weights of shape {w.shape}: expected {(len(starts), left.size)}")
    total = int(left.sum())
    head = left.size - 1 if left.size and left[-1] > 0 else -1
    if head >= 0:
        left[head] -= 1
    bounds = [min(max(int(a), int(head >= 0)), total) for a in starts] + [total]
    counts = np.zeros((len(starts), left.size), dtype=np.int64)
    for p in range(len(starts)):
        size = bounds[p + 1] - bounds[p]
        counts[p] = left.copy() if p == len(starts) - 1 else _capped(size, w[p], left)
        left -= counts[p]
    return EpochOrder(head, counts)


def _capped(size: int, weights: np.ndarray, left: np.ndarray) -> np.ndarray:
    """``size`` batches by ``weights`` among buckets with batches left, none above ``left``
    (what a full bucket cannot take goes to the others by weight, else by what they hold)."""
    out = np.zeros(left.size, dtype=np.int64)
    size = min(size, int(left.sum()))
    while size > 0:
        room = left - out
        w = np.where(room > 0, weights, 0.0)
        if w.sum() <= 0:
            w = room.astype(np.float64)
        more = np.minimum(apportion(size, w.tolist()), room)
        out += more
        size -= int(more.sum())
    return out
