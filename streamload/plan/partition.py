"""Splitting global batches across data-parallel ranks, and a rank's batches into chunks.

Global batch k of a pass (starting at sample ``g0``) is samples ``[g0 + k·B, g0 + (k+1)·B)``
with ``B = world_size · batch_size``; rank r takes the contiguous slice
``[g0 + k·B + r·b, g0 + k·B + (r+1)·b)``.

Example (g0 = 0, world 2, b = 2, B = 4): batch 0 → rank 0 samples [0, 1], rank 1 [2, 3];
batch 1 → rank 0 [4, 5], rank 1 [6, 7].

A *chunk* is a run of consecutive batches of one rank, the unit of work of one loader worker.

Gradient accumulation (``grad_accum_steps = A``): an optimizer *step* holds ``S = A·B``
samples, Megatron's layout: step k is samples ``[k·S, (k+1)·S)`` and its micro-batch m is the
global batch ``k·A + m`` above, so the rank split is unchanged and only what counts as a step
changes (the mixture allocation, schedule steps and the drop rule, which keeps whole steps).
A batch size schedule (:mod:`streamload.plan.step_sizes`) makes step k ``gbs_k`` samples:
``gbs_k / B`` micro-batches, cut the same way.
A position inside a step is ``(done, size)``: samples of the step already delivered, and the
step's size. Example (A = 2, B = 4, S = 8, a pass of 20 samples): steps 0 and 1 (samples
[0, 16)) are delivered as 4 micro-batches; samples [16, 20) are dropped;
:func:`step_batches_left` from sample 4 (``done = 4``) gives 3.
"""

from __future__ import annotations

import numbers
from dataclasses import dataclass

import numpy as np

from streamload.errors import ConfigError
from streamload.plan.step_sizes import StepSizes

__all__ = [
    "RankSpec",
    "batch_sample_ids",
    "chunk_sample_ids",
    "num_batches",
    "rank_share",
    "step_batches_left",
    "walk_steps",
]


@dataclass(frozen=True)
class RankSpec:
    """Who this loader is in the data-parallel group.

    Args:
        rank: Data-parallel rank r.
        world_size: Data-parallel size W.
        batch_size: Per-rank batch size b; a global batch holds ``W * b`` samples.
    """

    rank: int
    world_size: int
    batch_size: int

    def __post_init__(self) -> None:
        for name in ("rank", "world_size", "batch_size"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, numbers.Integral):
                raise ConfigError(f"{name} = {value!r} must be an integer")
        if self.world_size < 1 or not 0 <= self.rank < self.world_size:
            raise ConfigError(f"rank {self.rank} is not in [0, world_size = {self.world_size})")
        if self.batch_size < 1:
            raise ConfigError(f"batch_size = {self.batch_size} must be >= 1")

    @property
    def global_batch(self) -> int:
        """Samples per global batch."""
        return self.world_size * self.batch_size


def num_batches(pass_length: int, start: int, global_batch: int) -> int:
    """Whole global batches left in a pass of ``pass_length`` samples from sample ``start``."""
    return max(0, (pass_length - start) // global_batch)


def step_batches_left(
    pass_length: int, start: int, done: int, size: int, micro: int, steps: StepSizes
) -> int:
    """Global (micro-)batches left in a pass when only whole optimizer steps are delivered.

    Args:
        pass_length: Samples in the pass.
        start: Pass-relative sample of the next batch.
        done: Samples of the step in progress already delivered (0: at a step boundary).
            A step in progress that ends past the pass (a position a ``StreamDataset``
            worker reaches by jumping its siblings' batches) has nothing left.
        size: Samples of the step in progress (unused when ``done`` is 0).
        micro: Samples per global batch B (a micro-batch of every rank).
        steps: Sizes of the later steps (each a multiple of ``micro``).
    """
    left = 0
    if done:
        if start - done + size > pass_length:  # a StreamDataset worker stepped past the end
            return 0
        left, start = (size - done) // micro, start + size - done
    return left + (steps.whole_end(start, pass_length) - start) // micro


def walk_steps(
    done: int, size: int, samples: int, steps: StepSizes, start: int
) -> tuple[bool, tuple[tuple[int, int], ...], int, int]:
    """Where ``samples`` more delivered samples leave a position inside the steps.

    Args:
        done: Samples of the step in progress already delivered (0: at a step boundary).
        size: That step's samples.
        samples: Samples delivered from there.
        steps: Sizes of the later steps.
        start: Pass-relative sample of the position (``done`` samples into its step).

    Returns:
        ``(finished, runs, done, size)``: whether the step in progress was finished, the
        whole steps that followed as ``(size, count)`` runs, and the position after
        (``(0, 0)`` at a step boundary).
    """
    finished = False
    if done:
        if samples < size - done:
            return False, (), done + samples, size
        samples, finished, start = samples - (size - done), True, start + size - done
    runs, rest, size = steps.walk(start, samples)
    return finished, runs, rest, size


def rank_share(global_batch: int, world_size: int, rank: int) -> tuple[int, int]:
    """(first offset inside a global batch, count) of rank ``rank``'s share."""
    per_rank = global_batch // world_size
    return rank * per_rank, per_rank


def batch_sample_ids(
    start: int, batches: np.ndarray, global_batch: int, world_size: int, rank: int
) -> np.ndarray:
    """Pass-relative sample ids ``[len(batches), b]`` that rank ``rank`` gets in those batches.

    Args:
        start: Pass-relative sample where batch 0 begins.
        batches: Batch indices counted from ``start``.
        global_batch: B.
        world_size: W (divides B).
        rank: r.
    """
    offset, per_rank = rank_share(global_batch, world_size, rank)
    b = np.asarray(batches, dtype=np.int64)
    return start + b[:, None] * global_batch + offset + np.arange(per_rank, dtype=np.int64)


def chunk_sample_ids(
    start: int, first_batch: int, count: int, global_batch: int, world_size: int, rank: int
) -> np.ndarray:
    """Sample ids ``[count, b]`` of consecutive batches ``first_batch .. first_batch+count-1``."""
    batches = np.arange(first_batch, first_batch + count, dtype=np.int64)
    return batch_sample_ids(start, batches, global_batch, world_size, rank)
