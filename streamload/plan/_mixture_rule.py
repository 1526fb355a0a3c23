"""The exact-1 allocation rule of :mod:`streamload.plan.mixture` and its walk over a phase's
batches, in plain Python for a few sources and vectorized with numpy for many.

The rule gives source ``i`` ``floor_i`` samples of a batch plus one *extra* when its key
``T·(since_i + floor_i) − n_i·t`` is among the ``E`` smallest (ties to the lowest index), where
weight ``i`` is exactly ``n_i / T`` (:mod:`streamload.plan._exact`), ``since_i`` counts its
samples since the phase began and ``t`` the phase's samples after the batch. The key is ``−T``
times the deficit ``x_i = (n_i / T)·t − (since_i + floor_i)``.

The vectorized walk decides each batch on float deficits and falls back to the exact keys only
where floats could be wrong. ``r_i``, the float deficit, is within ``δ`` of ``x_i`` (one
rounding of ``n_i / T``, one of the product with ``t < 2**52``, one of the difference:
``|r_i − x_i| <= 2⁻⁵²·t + 2⁻⁵³·|r_i|``; ``δ`` is four times that). With ``v`` the ``E``-th
largest ``r``: a source with ``r_i > v + 2δ`` is beaten exactly by fewer than ``E`` others (only
those with ``r_j > v`` can be) and takes an extra; one with ``r_i < v − 2δ`` is beaten strictly
by at least ``E`` (all with ``r_j >= v``) and does not; the sources in between, usually exactly
the ones needed, are ranked by their exact integer keys. So every decision is the rule's own.

Example:
    >>> rule = exact_rule((0.7, 0.3), 4)
    >>> rule.floors, rule.extra, rule.candidates
    ((2, 1), 1, (0, 1))
    >>> PhaseWalk(rule, np.zeros(2, np.int64)).block(3).tolist()
    [[3, 1], [3, 1], [2, 2]]
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import numpy as np

from streamload.plan._exact import integer_weights

__all__ = ["VECTOR_MIN_CANDIDATES", "ExactRule", "PhaseWalk", "exact_rule"]

VECTOR_MIN_CANDIDATES = 64
"""Sources with a fractional share from which a batch is decided by numpy (about 30 µs a
batch whatever the count) rather than plain Python (about 0.3 µs a source)."""
_FLOAT_EXACT = 1 << 52
"""Below it, the phase's samples and every ``since + floor`` are exact float64 integers."""


@dataclass(frozen=True)
class ExactRule:
    """The allocation rule of one (weights, B): what does not change from batch to batch.

    Weight ``i`` is exactly ``nums[i] / total`` (:func:`streamload.plan._exact.integer_weights`),
    so floors, candidates and deficits are integers and no tie is decided by rounding.
    """

    nums: tuple[int, ...]
    total: int
    floors: tuple[int, ...]
    extra: int
    candidates: tuple[int, ...]
    global_batch: int

    def counts(self, phase_samples: int, since: list[int]) -> list[int]:
        """Samples per source of the next batch, ``phase_samples`` into the phase, each source
        having drawn ``since`` of them (the reference decision, one batch in plain Python)."""
        counts = list(self.floors)
        if self.extra > 0:
            n, s, t = self.nums, self.total, phase_samples + self.global_batch
            # s times the deficit w·t − (drawn + floor), negated: ascending is largest first.
            order = sorted(self.candidates, key=lambda i: s * (since[i] + counts[i]) - n[i] * t)
            for i in order[: self.extra]:  # sorted is stable: ties go to the lowest index
                counts[i] += 1
        return counts

    @functools.cached_property
    def candidate_weights(self) -> tuple[list[int], np.ndarray]:
        """The candidates' ``nums`` and their weights ``nums / total`` as float64, each
        correctly rounded (Python's int division), computed once per rule."""
        nums = [self.nums[i] for i in self.candidates]
        return nums, np.array([n / self.total for n in nums], dtype=np.float64)


@functools.lru_cache(maxsize=256)
def exact_rule(weights: tuple[float, ...], global_batch: int) -> ExactRule:
    """The rule of ``weights`` (normalized) at global batch ``global_batch`` (cached).

    Raises:
        ValueError: every weight is 0.
    """
    nums, total = integer_weights(weights)
    if total <= 0:
        raise ValueError(f"weights {list(weights)}: expected at least one above 0")
    exact = [n * global_batch for n in nums]  # w·B times total
    floors = tuple(x // total for x in exact)
    candidates = tuple(i for i, x in enumerate(exact) if x % total)
    extra = global_batch - sum(floors)
    return ExactRule(tuple(nums), total, floors, extra, candidates, global_batch)


class PhaseWalk:
    """The batches of one phase of one global batch size, from a position in the phase.

    Args:
        rule: The phase's rule.
        since: int64 ``[S]``: samples each source drew since the phase began (copied).
        vector_from: Candidates from which batches are decided by numpy (default
            :data:`VECTOR_MIN_CANDIDATES`, read when called: tests change it).

    Attributes:
        since: The counts after the batches walked so far.
    """

    def __init__(self, rule: ExactRule, since: np.ndarray, vector_from: int | None = None) -> None:
        self.rule = rule
        self.since = np.array(since, dtype=np.int64)
        self.samples = int(self.since.sum())
        self.floors = np.array(rule.floors, dtype=np.int64)
        self.columns = np.array(rule.candidates, dtype=np.int64)
        least = VECTOR_MIN_CANDIDATES if vector_from is None else vector_from
        self.vector = rule.extra > 0 and len(rule.candidates) >= least
        if self.vector:
            self.nums, self.weights = rule.candidate_weights

    def block(self, count: int) -> np.ndarray:
        """int64 ``[count, S]``: the samples per source of the next ``count`` batches."""
        rows = np.tile(self.floors, (count, 1))
        rows[:, self.columns] += self._extras(count)
        self.since += rows.sum(axis=0)
        return rows

    def skip(self, count: int, chunk: int = 1024) -> None:
        """Walk ``count`` batches keeping only the counts (bounded memory)."""
        if not self.vector and self.rule.extra > 0 and self.columns.size:
            _, extras = self._python_choices(self.since[self.columns].tolist(), count, keep=False)
            self.since += count * self.floors
            self.since[self.columns] += np.array(extras, dtype=np.int64)
            return
        for first in range(0, count, chunk):
            n = min(chunk, count - first)
            extras = self._extras(n).sum(axis=0)  # decided from the counts before them
            self.since += n * self.floors
            self.since[self.columns] += extras

    def _extras(self, count: int) -> np.ndarray:
        """int64 ``[count, candidates]``: 1 where a candidate gets the extra; advances
        ``samples`` (``since`` is the caller's to update)."""
        out = np.zeros((count, self.columns.size), dtype=np.int64)
        if self.rule.extra == 0 or not self.columns.size:  # every batch the same
            self.samples += count * self.rule.global_batch
            return out
        if not self.vector:
            flat, _ = self._python_choices(self.since[self.columns].tolist(), count)
            out[np.repeat(np.arange(count), self.rule.extra), flat] = 1
            return out
        # Candidates' since + floor before each batch: the exact integers of the keys.
        drawn = self.since[self.columns] + self.floors[self.columns]
        floors = self.floors[self.columns]
        for row in range(count):
            t = self.samples + self.rule.global_batch
            if t < _FLOAT_EXACT and int(drawn.max()) < _FLOAT_EXACT:
                chosen = self._vector_choice(drawn, t)
            else:  # beyond exact floats: the rule itself (it advances samples to t)
                since = (drawn - floors).tolist()
                chosen = np.array(self._python_choices(since, 1)[0], dtype=np.int64)
            out[row, chosen] = 1
            drawn[chosen] += 1
            drawn += floors
            self.samples = t
        return out

    def _python_choices(
        self, since: list[int], count: int, keep: bool = True
    ) -> tuple[list[int], list[int]]:
        """The rule's decisions (:meth:`ExactRule.counts`) in plain Python integers, for the
        next ``count`` batches from ``since`` (each candidate's count since the phase began):
        the positions (among candidates) given an extra, batch after batch, ``extra`` each
        (none kept unless ``keep``), and each candidate's extras in all. Advances ``samples``.

        Batch ``k`` (from 1) ranks candidate ``j`` by its key ``A_j + total·x_j − k·r_j``:
        ``x_j`` its extras so far, ``r_j = n_j·B − total·floor_j`` and ``A_j = total·since_j −
        n_j·samples`` (the key of :meth:`ExactRule.counts` rewritten), so a batch updates only
        the candidates it gives an extra.
        """
        rule = self.rule
        total, extra, big = rule.total, rule.extra, rule.global_batch
        nums = [rule.nums[i] for i in rule.candidates]
        rests = [nums[j] * big - total * rule.floors[i] for j, i in enumerate(rule.candidates)]
        start = [total * s - n * self.samples for s, n in zip(since, nums, strict=True)]
        keys = list(start)
        positions = range(len(since))
        out: list[int] = []
        for k in range(1, count + 1):
            # Ascending key is the largest deficit first; sorted is stable: lowest index first.
            chosen = sorted(positions, key=lambda j: keys[j] - k * rests[j])[:extra]
            for j in chosen:
                keys[j] += total
            if keep:
                out += chosen
        self.samples += count * big
        return out, [(key - a) // total for key, a in zip(keys, start, strict=True)]

    def _vector_choice(self, drawn: np.ndarray, t: int) -> np.ndarray:
        """Positions (among candidates) of the extras of the batch ending at ``t`` (module
        docstring: why the float shortcut decides exactly)."""
        extra, size = self.rule.extra, drawn.size
        deficits = self.weights * float(t) - drawn
        v = np.partition(deficits, size - extra)[size - extra]  # the extra-th largest
        delta = 2.0**-50 * (t + float(np.abs(deficits).max()) + 1.0)
        sure = deficits > v + 2 * delta
        unsure = np.flatnonzero((deficits >= v - 2 * delta) & ~sure)
        need = extra - int(np.count_nonzero(sure))
        if unsure.size > need:
            unsure = self._rank_exactly(unsure, drawn, t)[:need]
        return np.concatenate([np.flatnonzero(sure), unsure])

    def _rank_exactly(self, positions: np.ndarray, drawn: np.ndarray, t: int) -> np.ndarray:
        """``positions`` by the exact key, then position (= source index: candidates rise)."""
        total, nums = self.rule.total, self.nums
        keys = [total * int(drawn[p]) - nums[p] * t for p in positions.tolist()]
        order = sorted(range(len(keys)), key=lambda q: (keys[q], q))
        return positions[order]
