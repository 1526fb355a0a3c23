"""Deterministic, low-discrepancy allocation of global batches to sources.

Each global batch of ``B`` samples gives source ``s`` either ``floor(w_s·B)`` or
``ceil(w_s·B)`` samples (within one sample of its weight, in every batch). Which sources get
the ceiling is decided by the largest *deficit* since the start of the current schedule phase:
``d_s = w_s·(g + B) − (drawn_s + floor(w_s·B))`` where ``g`` samples of the phase have been
allocated and ``drawn_s`` of them went to ``s``; ties go to the lowest source index (as in
Megatron's ``build_blending_indices``). Only sources whose ``w_s·B`` is fractional can get a
ceiling, so a zero weight never draws.

Worked example, weights (0.7, 0.3), B = 4 (w·B = 2.8, 1.2; floors 2, 1; one extra sample):

| batch | deficits before the extra | extra to | counts | drawn after |
|---|---|---|---|---|
| 0 | 0.8, 0.2 | web | 3, 1 | 3, 1 |
| 1 | 0.6, 0.4 | web | 3, 1 | 6, 2 |
| 2 | 0.4, 0.6 | code | 2, 2 | 8, 4 |

Every decision is exact: the weights are read as exact integers
(:mod:`streamload.plan._exact`), so floors, extras and deficit ties are the same on every
machine and Python version. A weight of 0.7 is 7/10: with B = 10 it gets exactly 7 rows.

Within a batch, sources are interleaved evenly (source s's k-th sample sits at fraction
``(k + ½) / c_s`` of the batch), so every rank's contiguous share sees the same mix.

Per-source batches (``Phase.per_source``, ``[mixture] batching = "per_source"``): each
global batch goes whole to one source, chosen by the quota rule of
:mod:`streamload.plan._source_rule`; the cursor, replay and bounds keep their meaning.

Schedules: phase ``p`` starts at global step ``start_step`` with new weights; deficits are
measured from the phase start, so a change applies exactly at that batch and per-source
cursors simply continue — no source skips or repeats data because weights changed.

Derivable position: the whole cursor (per-source counts, phase start and its counts) is a
pure function of the phases, the number of global batches ``step`` and the global batch
size used for each of them. The cursor carries the latter as ``batch_sizes``, pairs
``(first step, B)`` starting at step 0 (one pair unless a run was resumed with another
global batch size), so :func:`replay_cursor` recomputes the cursor from ``step`` alone and a
loaded state can be checked field by field. The rule has no closed form (which sources lead
depends on the whole history: a source's deficit can exceed one sample), so a replay is
O(step): the walk is vectorized (:mod:`streamload.plan._mixture_rule`: numpy over many
sources, about 40 µs a batch at 1,000 sources; plain Python over a few, about 0.5 µs a source),
and a long position is checked instead against :func:`cursor_bounds`, in O(sources): its
phase start exactly, the samples before and since it exactly, each count between the sums
of its floors and ceilings.
"""

from __future__ import annotations

import bisect
import decimal
import itertools
from dataclasses import dataclass

import numpy as np

from streamload.plan._mixture_rule import PhaseWalk, exact_rule
from streamload.plan._source_rule import SourceWalk, share_bounds

__all__ = [
    "ALLOCATION",
    "MixtureCursor",
    "Phase",
    "advance_cursor",
    "allocate_batches",
    "CursorBounds",
    "batch_counts",
    "counts_for",
    "cursor_bounds",
    "effective_weights",
    "interleave",
    "phase_at",
    "replay_cursor",
]

ALLOCATION = "exact-1"
"""The allocation rule's name, part of a mixture's fingerprint: its decisions are exact
integer comparisons (:mod:`streamload.plan._exact`). A state saved under the float rule before
it (unnamed) is refused by name rather than resumed on other ties."""


def effective_weights(weights: np.ndarray, temperature: float = 1.0) -> np.ndarray:
    """Normalized weights after temperature scaling ``w^(1/T)`` (KempnerForge); 0 stays 0.

    The same bits on every machine: the division and numpy's sum of a float64 vector are
    IEEE operations in a fixed order, and the power is computed in 40-digit decimals and
    rounded once (``numpy.power`` may take a SIMD path whose last bit differs from libm's).
    """
    w = np.asarray(weights, dtype=np.float64)
    if temperature != 1.0:
        w = _powered(w / w.max(), 1.0 / temperature)
    return w / w.sum()


def _powered(ratios: np.ndarray, exponent: float) -> np.ndarray:
    """``ratios ** exponent`` (0 for ratios <= 0), each correctly rounded but in
    astronomically rare near-halfway cases, identically on every platform."""
    out = np.zeros(ratios.shape, dtype=np.float64)
    with decimal.localcontext(decimal.Context(prec=40)):
        power = decimal.Decimal(exponent)
        for i, ratio in enumerate(ratios.tolist()):
            if ratio > 0:
                out[i] = float(decimal.Decimal(ratio) ** power)
    return out


@dataclass(frozen=True)
class Phase:
    """Weights in force from global step ``start_step`` on (normalized, temperature applied).

    ``per_source``: every optimizer step is drawn whole from one source
    (:mod:`streamload.plan._source_rule`); the same in every phase of a mixture
    (``[mixture] batching``).
    """

    start_step: int
    weights: tuple[float, ...]
    per_source: bool = False


def phase_at(phases: tuple[Phase, ...], step: int) -> int:
    """Index of the phase in force at ``step`` (phases sorted by start, the first at 0)."""
    starts = [p.start_step for p in phases]
    return int(np.searchsorted(starts, step, side="right")) - 1


def batch_counts(
    weights: np.ndarray, global_batch: int, phase_samples: int, phase_drawn: np.ndarray
) -> np.ndarray:
    """Samples per source in the next global batch.

    Args:
        weights: Normalized weights ``[S]``.
        global_batch: B.
        phase_samples: Samples allocated since the phase started.
        phase_drawn: Per-source samples drawn since the phase started ``[S]``.

    Returns:
        int64 ``[S]`` summing to B, each ``floor(w·B)`` or ``ceil(w·B)``.
    """
    rule = exact_rule(tuple(float(x) for x in weights), global_batch)
    return np.array(rule.counts(phase_samples, [int(x) for x in phase_drawn]), dtype=np.int64)


def interleave(counts: np.ndarray) -> np.ndarray:
    """Source index of each position of a batch, sources spread evenly (stable by index).

    The keys ``(j + ½) / c`` are exact in effect: IEEE division is correctly rounded, so
    equal fractions give equal keys, and two different ones differ by at least
    ``1 / (4·c·c')``, far more than an ulp for any count below 2²³.
    """
    sources = np.repeat(np.arange(counts.shape[0]), counts)
    ranks = np.concatenate([np.arange(c) for c in counts.tolist()]) if counts.size else sources
    keys = (ranks + 0.5) / np.repeat(np.maximum(counts, 1), counts)
    return sources[np.argsort(keys, kind="stable")]


@dataclass(frozen=True)
class MixtureCursor:
    """Where the mixture stands after ``step`` global batches.

    Args:
        step: Global batches allocated.
        drawn: Per-source samples drawn since training started.
        phase_step: Step at which the current phase's counting started.
        phase_drawn: ``drawn`` at ``phase_step``.
        batch_sizes: ``(first step, global batch size)`` of every run of equal global batch
            sizes so far (empty before the first batch); it makes the rest derivable.
    """

    step: int
    drawn: tuple[int, ...]
    phase_step: int
    phase_drawn: tuple[int, ...]
    batch_sizes: tuple[tuple[int, int], ...] = ()

    @classmethod
    def start(cls, num_sources: int) -> MixtureCursor:
        """The cursor before any batch."""
        zeros = (0,) * num_sources
        return cls(0, zeros, 0, zeros)


def counts_for(
    phases: tuple[Phase, ...],
    global_batch: int,
    step: int,
    phase_step: int,
    drawn: np.ndarray,
    phase_drawn: np.ndarray,
) -> tuple[np.ndarray, int, np.ndarray]:
    """Counts of batch ``step``, and the phase start (step, drawn) it is measured from."""
    p = phase_at(phases, step)
    if phases[p].start_step > phase_step:  # a new phase starts at this batch
        phase_step, phase_drawn = phases[p].start_step, drawn.copy()
    weights = np.asarray(phases[p].weights)
    since = drawn - phase_drawn
    # Samples since the phase began, counted (not step * B): B may change on a resume.
    samples = int(since.sum())
    return batch_counts(weights, global_batch, samples, since), phase_step, phase_drawn


def _walk(
    phases: tuple[Phase, ...],
    global_batch: int,
    cursor: MixtureCursor,
    count: int,
    rows: list[np.ndarray] | None = None,
) -> MixtureCursor:
    """The cursor after ``count`` batches from ``cursor``; with ``rows``, append the int64
    ``[n, S]`` counts of the batches, block by block. One walk (the rule of
    :func:`counts_for`, :class:`streamload.plan._mixture_rule.PhaseWalk`) serves allocation,
    advance and replay, so they cannot disagree."""
    starts = [p.start_step for p in phases]
    drawn = np.array(cursor.drawn, dtype=np.int64)
    phase_drawn = np.array(cursor.phase_drawn, dtype=np.int64)
    phase_step, step, end = cursor.phase_step, cursor.step, cursor.step + count
    while step < end:
        p = bisect.bisect_right(starts, step) - 1
        if starts[p] > phase_step:  # a new phase starts at this batch
            phase_step, phase_drawn = starts[p], drawn.copy()
        stop = min(end, starts[p + 1]) if p + 1 < len(starts) else end
        # Samples since the phase began are counted, not step * B: B may change on a resume.
        walk: PhaseWalk | SourceWalk
        if phases[p].per_source:
            walk = SourceWalk(phases[p].weights, global_batch, drawn - phase_drawn)
        else:
            walk = PhaseWalk(exact_rule(phases[p].weights, global_batch), drawn - phase_drawn)
        if rows is None:
            walk.skip(stop - step)
        else:
            rows.append(walk.block(stop - step))
        drawn = phase_drawn + walk.since
        step = stop
    sizes = cursor.batch_sizes
    if count > 0 and (not sizes or sizes[-1][1] != global_batch):
        sizes = (*sizes, (cursor.step, global_batch))
    return MixtureCursor(end, tuple(drawn.tolist()), phase_step, tuple(phase_drawn.tolist()), sizes)


def advance_cursor(
    phases: tuple[Phase, ...], global_batch: int, cursor: MixtureCursor, count: int
) -> MixtureCursor:
    """The cursor after ``count`` more global batches (counts only; no per-sample work)."""
    return _walk(phases, global_batch, cursor, count)


def replay_cursor(
    phases: tuple[Phase, ...],
    num_sources: int,
    batch_sizes: tuple[tuple[int, int], ...],
    step: int,
) -> MixtureCursor:
    """The cursor after ``step`` global batches from the start, recomputed.

    Args:
        phases: The mixture's phases.
        num_sources: S.
        batch_sizes: ``(first step, B)`` pairs: strictly increasing first steps from 0, each
            below ``step``, consecutive B different (empty when ``step`` is 0).
        step: Global batches.

    Returns:
        The cursor the same run holds after ``step`` batches. O(step).
    """
    cursor = MixtureCursor.start(num_sources)
    ends = [first for first, _ in batch_sizes[1:]] + [step] if batch_sizes else []
    for (first, size), end in zip(batch_sizes, ends, strict=True):
        cursor = _walk(phases, size, cursor, end - first)
    return cursor


@dataclass(frozen=True)
class CursorBounds:
    """What every cursor after ``step`` global batches of given sizes satisfies, found in
    O(sources × (phases + batch size changes)) without a replay.

    Each batch gives a source ``floor(w·B)`` or ``ceil(w·B)`` samples, so its count over a
    stretch of batches lies between the sums of those; the samples of a stretch are exact.

    Args:
        phase_step: The cursor's ``phase_step`` (exact).
        before: Samples allocated before ``phase_step`` (``sum(phase_drawn)``, exact).
        since: Samples allocated from ``phase_step`` on (``sum(drawn − phase_drawn)``).
        phase_low, phase_high: int64 ``[S]``: bounds of ``phase_drawn``.
        since_low, since_high: int64 ``[S]``: bounds of ``drawn − phase_drawn``.
    """

    phase_step: int
    before: int
    since: int
    phase_low: np.ndarray
    phase_high: np.ndarray
    since_low: np.ndarray
    since_high: np.ndarray


def cursor_bounds(
    phases: tuple[Phase, ...],
    num_sources: int,
    batch_sizes: tuple[tuple[int, int], ...],
    step: int,
) -> CursorBounds:
    """The bounds of the cursor :func:`replay_cursor` would give (same arguments), without
    walking its batches: a check of a loaded cursor in O(sources), not O(step)."""
    starts = [p.start_step for p in phases]
    phase_step = starts[phase_at(phases, step - 1)] if step > 0 else 0
    if phases[0].per_source:
        return _source_bounds(phases, num_sources, batch_sizes, step, phase_step)
    low = [np.zeros(num_sources, np.int64), np.zeros(num_sources, np.int64)]
    high = [np.zeros(num_sources, np.int64), np.zeros(num_sources, np.int64)]
    samples = [0, 0]
    ends = [first for first, _ in batch_sizes[1:]] + [step] if batch_sizes else []
    for (first, size), end in zip(batch_sizes, ends, strict=True):
        cuts = sorted({first, end, *(s for s in starts if first < s < end), phase_step})
        for lo, hi in itertools.pairwise(c for c in cuts if first <= c <= end):
            rule = exact_rule(phases[phase_at(phases, lo)].weights, size)
            floors = np.array(rule.floors, dtype=np.int64)
            part = int(lo >= phase_step)  # 0: before the phase, 1: in it
            low[part] += (hi - lo) * floors
            high[part] += (hi - lo) * floors
            high[part][list(rule.candidates)] += hi - lo
            samples[part] += (hi - lo) * size
    return CursorBounds(phase_step, samples[0], samples[1], low[0], high[0], low[1], high[1])


def _source_bounds(
    phases: tuple[Phase, ...],
    num_sources: int,
    batch_sizes: tuple[tuple[int, int], ...],
    step: int,
    phase_step: int,
) -> CursorBounds:
    """:func:`cursor_bounds` of per-source batches: each phase's counts bounded as a whole
    (:func:`streamload.plan._source_rule.share_bounds`), since the rule counts from its start."""
    starts = [p.start_step for p in phases]
    samples = [0] * len(phases)
    sizes: list[set[int]] = [set() for _ in phases]
    ends = [first for first, _ in batch_sizes[1:]] + [step] if batch_sizes else []
    for (first, size), end in zip(batch_sizes, ends, strict=True):
        cuts = sorted({first, end, *(s for s in starts if first < s < end)})
        for lo, hi in itertools.pairwise(cuts):
            p = phase_at(phases, lo)
            samples[p] += (hi - lo) * size
            sizes[p].add(size)
    low = [np.zeros(num_sources, np.int64), np.zeros(num_sources, np.int64)]
    high = [np.zeros(num_sources, np.int64), np.zeros(num_sources, np.int64)]
    for p, phase in enumerate(phases):
        if samples[p]:
            part = int(phase.start_step >= phase_step)  # 0: before the phase, 1: in it
            lo_p, hi_p = share_bounds(phase.weights, samples[p], sizes[p])
            low[part] += lo_p
            high[part] += hi_p
    since = sum(n for p, n in enumerate(samples) if starts[p] >= phase_step)
    before = sum(samples) - since
    return CursorBounds(phase_step, before, since, low[0], high[0], low[1], high[1])


def allocate_batches(
    phases: tuple[Phase, ...], global_batch: int, cursor: MixtureCursor, count: int
) -> tuple[np.ndarray, np.ndarray, MixtureCursor]:
    """Allocate ``count`` global batches from ``cursor``.

    Returns:
        ``sources`` int16 ``[count, B]`` and ``local`` int64 ``[count, B]`` (each sample's
        index in its source's own sequence), and the cursor after them.
    """
    rows: list[np.ndarray] = []
    after = _walk(phases, global_batch, cursor, count, rows)
    num_sources = len(cursor.drawn)
    counts = np.concatenate(rows) if rows else np.zeros((0, num_sources), dtype=np.int64)
    before = np.cumsum(counts, axis=0) - counts + np.array(cursor.drawn, dtype=np.int64)
    sources, local = _place(counts, before, global_batch)
    return sources, local, after


def _place(
    counts: np.ndarray, before: np.ndarray, global_batch: int
) -> tuple[np.ndarray, np.ndarray]:
    """Interleave every row at once: sort (row, (j + ½) / c, source) over all samples."""
    rows, num_sources = counts.shape
    flat = counts.ravel()
    row = np.repeat(np.repeat(np.arange(rows), num_sources), flat)
    source = np.repeat(np.tile(np.arange(num_sources), rows), flat)
    starts = np.cumsum(flat) - flat
    j = np.arange(flat.sum()) - np.repeat(starts, flat)
    key = (j + 0.5) / np.repeat(np.maximum(flat, 1), flat)
    order = np.lexsort((source, key, row))
    local = before[row, source] + j
    return (
        source[order].astype(np.int16).reshape(rows, global_batch),
        local[order].reshape(rows, global_batch),
    )
