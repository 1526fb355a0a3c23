"""Sequence-length warm-up: the row length of every optimizer step (pure; no I/O, no state).

The data is always carved at the **maximum** length ``M`` (``seq_len``): sample ``g`` is a
window of ``M + 1`` tokens, in the same order whatever the schedule (OLMo-core's way, its
``SequenceLengthSchedulerCallback`` without truncation). A step of length ``L`` (``L``
divides ``M``) cuts each of its windows into ``m = M / L`` rows of ``L + 1`` tokens at
stride ``L``: row ``j`` is tokens ``[j·L, j·L + L + 1)`` of its window, so consecutive rows
overlap by one token, every next-token pair of the window is trained exactly once and no
row reaches outside its window. A step always holds ``global_batch_size`` windows, so its
tokens are constant and its rows scale (``global_batch_size · m``); a rank cuts its own
contiguous windows, so it gets the step's rows ``[r·b·m, (r+1)·b·m)``. The cursor counts
windows (tokens ``= windows · M``): a switch of length neither skips nor repeats a token.

Worked example, ``M = 8``, phases ``((0, 2), (3, 4), (5, 8))``, ``global_batch_size = 2``::

    step  0 1 2 | 3 4 | 5 …
    L     2 2 2 | 4 4 | 8 …
    rows  8 8 8 | 4 4 | 2 …      (2 windows · 8 / L)

    window tokens  t0 t1 t2 t3 t4 t5 t6 t7 t8
    L = 4 rows     [t0 … t4], [t4 … t8]
    L = 2 rows     [t0 t1 t2], [t2 t3 t4], [t4 t5 t6], [t6 t7 t8]

:func:`warmup_phases` expands ``[seq_len_warmup]`` into such phases with OLMo-core's split
warm-up rule (linear from the start length to ``M`` over ``steps``, rounded down to the start
length times a power of two), in exact integer arithmetic.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass
from typing import Any

import numpy as np

__all__ = ["CUT", "SeqLenSchedule", "warmup_phases"]

CUT = "max-windows-cut-v1"
"""The rule that turns a step's windows into rows (in the fingerprint: a change re-keys)."""


@dataclass(frozen=True)
class SeqLenSchedule:
    """Row lengths by optimizer step.

    Args:
        max_len: ``seq_len``: the length windows are carved at; every phase's length divides
            it.
        phases: ``(start_step, seq_len)`` pairs, start steps strictly increasing; steps
            before the first phase run at ``max_len``.
        global_batch: Windows per optimizer step (``global_batch_size``).
    """

    max_len: int
    phases: tuple[tuple[int, int], ...]
    global_batch: int

    def length_at(self, step: int) -> int:
        """Inputs per row of optimizer step ``step`` (counted from 0 over the whole run)."""
        index = bisect.bisect_right([p[0] for p in self.phases], step) - 1
        return self.max_len if index < 0 else self.phases[index][1]

    def lengths(self, steps: np.ndarray) -> np.ndarray:
        """:meth:`length_at` of many steps (int64, any shape)."""
        starts = np.array([p[0] for p in self.phases], dtype=np.int64)
        table = np.array([self.max_len] + [p[1] for p in self.phases], dtype=np.int64)
        return table[np.searchsorted(starts, np.asarray(steps, dtype=np.int64), side="right")]

    def next_switch(self, step: int) -> int | None:
        """The first phase start after ``step`` (``None``: its length holds to the end)."""
        later = [p[0] for p in self.phases if p[0] > step]
        return later[0] if later else None

    def started(self, step: int) -> list[list[int]]:
        """``[start_step, seq_len]`` of the phases begun by ``step`` (for the fingerprint:
        phases may still be added for later steps between a save and a resume)."""
        return [[s, length] for s, length in self.phases if s <= step]

    def describe(self) -> list[dict[str, Any]]:
        """One entry per stretch of steps (``end_step`` ``None``: to the end of the run):
        its length, the rows a window becomes and the rows and input tokens of a step."""
        bounds = [(0, self.max_len)] if not self.phases or self.phases[0][0] > 0 else []
        bounds += list(self.phases)
        out = []
        for i, (start, length) in enumerate(bounds):
            end = bounds[i + 1][0] if i + 1 < len(bounds) else None
            per_window = self.max_len // length
            out.append(
                {
                    "start_step": start,
                    "end_step": end,
                    "seq_len": length,
                    "rows_per_window": per_window,
                    "rows_per_step": self.global_batch * per_window,
                    "tokens_per_step": self.global_batch * self.max_len,
                }
            )
        return out


def warmup_phases(start_len: int, max_len: int, steps: int) -> tuple[tuple[int, int], ...]:
    """The phases of OLMo-core's split warm-up: step ``k`` runs at the length
    ``start_len + (max_len − start_len) · min(k, steps) / steps`` rounded down to
    ``start_len · 2**n`` (``max_len / start_len`` a power of two), so the length doubles at
    the first step where the line reaches it, and is ``max_len`` from step ``steps`` on.

    Exact integers: the line reaches ``start_len · 2**n`` at the first ``k`` with
    ``start_len · steps · (2**n − 1) <= (max_len − start_len) · k``.

    Example:
        >>> warmup_phases(512, 2048, 300)
        ((0, 512), (100, 1024), (300, 2048))
    """
    out = [(0, start_len)]
    rise = max_len - start_len
    length, doubling = start_len * 2, 1
    while length <= max_len:
        need = start_len * steps * ((1 << doubling) - 1)
        step = -(-need // rise)
        if out[-1][0] == step:  # a short warm-up: two doublings on one step, the longer wins
            out.pop()
        out.append((step, length))
        length, doubling = length * 2, doubling + 1
    return tuple(out)
