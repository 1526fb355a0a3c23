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

Within a batch, sources are interleaved evenly (source s's k-th sample sits at fraction
``(k + ½) / c_s`` of the batch), so every rank's contiguous share sees the same mix.

Schedules: phase ``p`` starts at global step ``start_step`` with new weights; deficits are
measured from the phase start, so a change applies exactly at that batch and per-source
cursors simply continue — no source skips or repeats data because weights changed.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

__all__ = [
    "MixtureCursor",
    "Phase",
    "advance_cursor",
    "allocate_batches",
    "counts_for",
    "batch_counts",
    "effective_weights",
    "interleave",
    "phase_at",
]


def effective_weights(weights: np.ndarray, temperature: float = 1.0) -> np.ndarray:
    """Normalized weights after temperature scaling ``w^(1/T)`` (KempnerForge); 0 stays 0."""
    w = np.asarray(weights, dtype=np.float64)
    if temperature != 1.0:
        w = np.where(w > 0, np.power(w / w.max(), 1.0 / temperature), 0.0)
    return w / w.sum()


@dataclass(frozen=True)
class Phase:
    """Weights in force from global step ``start_step`` on (normalized, temperature applied)."""

    start_step: int
    weights: tuple[float, ...]


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
    # Plain Python floats: S is small and this runs once per global batch.
    w = [float(x) for x in weights]
    have = [int(x) for x in phase_drawn]
    exact = [x * global_batch for x in w]
    counts = [math.floor(x) for x in exact]
    extra = global_batch - sum(counts)
    if extra > 0:
        total = phase_samples + global_batch
        candidates = [i for i, x in enumerate(exact) if x > counts[i]]
        candidates.sort(key=lambda i: -(w[i] * total - (have[i] + counts[i])))  # stable: ties low
        for i in candidates[:extra]:
            counts[i] += 1
    return np.array(counts, dtype=np.int64)


def interleave(counts: np.ndarray) -> np.ndarray:
    """Source index of each position of a batch, sources spread evenly (stable by index)."""
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
    """

    step: int
    drawn: tuple[int, ...]
    phase_step: int
    phase_drawn: tuple[int, ...]

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


def advance_cursor(
    phases: tuple[Phase, ...], global_batch: int, cursor: MixtureCursor, count: int
) -> MixtureCursor:
    """The cursor after ``count`` more global batches (counts only; no per-sample work)."""
    drawn = np.array(cursor.drawn, dtype=np.int64)
    phase_drawn = np.array(cursor.phase_drawn, dtype=np.int64)
    phase_step = cursor.phase_step
    for step in range(cursor.step, cursor.step + count):
        counts, phase_step, phase_drawn = counts_for(
            phases, global_batch, step, phase_step, drawn, phase_drawn
        )
        drawn += counts
    return MixtureCursor(
        cursor.step + count, tuple(drawn.tolist()), phase_step, tuple(phase_drawn.tolist())
    )


def allocate_batches(
    phases: tuple[Phase, ...], global_batch: int, cursor: MixtureCursor, count: int
) -> tuple[np.ndarray, np.ndarray, MixtureCursor]:
    """Allocate ``count`` global batches from ``cursor``.

    Returns:
        ``sources`` int16 ``[count, B]`` and ``local`` int64 ``[count, B]`` (each sample's
        index in its source's own sequence), and the cursor after them.
    """
    drawn = np.array(cursor.drawn, dtype=np.int64)
    phase_drawn = np.array(cursor.phase_drawn, dtype=np.int64)
    phase_step = cursor.phase_step
    counts = np.empty((count, drawn.shape[0]), dtype=np.int64)
    before = np.empty_like(counts)
    for row in range(count):
        counts[row], phase_step, phase_drawn = counts_for(
            phases, global_batch, cursor.step + row, phase_step, drawn, phase_drawn
        )
        before[row] = drawn
        drawn = drawn + counts[row]
    sources, local = _place(counts, before, global_batch)
    after = MixtureCursor(
        cursor.step + count, tuple(drawn.tolist()), phase_step, tuple(phase_drawn.tolist())
    )
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
