"""Optimizer step sizes over a run: a constant global batch, or one that ramps up.

An optimizer step that begins after ``c`` consumed samples holds ``gbs(c)`` samples, where
``gbs`` is a step function of ``c`` (:class:`StepSizes`: segment ``j`` gives ``sizes[j]`` to
every ``c`` in ``[starts[j], starts[j + 1])``). The steps of a pass are then fixed from its
start: step 0 begins at sample 0, step ``k + 1`` at ``s_k + gbs(s_k)``. This is Megatron-LM's
rule (``update_num_microbatches(consumed_samples)`` before each step), and a constant global
batch is the one-segment case.

Megatron's ``--rampup-batch-size START INCREMENT SAMPLES`` with ``--global-batch-size F``
(megatron-core's ``RampupBatchsizeNumMicroBatchesCalculator``): with
``n = (F - START) / INCREMENT`` increments and ``per = SAMPLES / n`` (a float),
``gbs(c) = START + int(c / per) * INCREMENT`` while ``c <= SAMPLES``, else ``F``.
:func:`megatron_rampup` finds each segment's first sample with those same float operations,
so ``gbs`` agrees with megatron-core's at every ``c``.

Example (``START = 4, INCREMENT = 4, SAMPLES = 16, F = 12``: ``n = 2``, ``per = 8.0``):
segments ``[0, 8) → 4``, ``[8, 16) → 8``, then ``12`` (at ``c = 16``, ``int(16 / 8.0) = 2``
increments already give the final size); steps begin at samples 0 (4), 4 (4),
8 (8), 16 (12), 28 (12), …: runs of equal steps ``(step 0, sample 0, 4 x 2)``,
``(step 2, sample 8, 8 x 1)``, ``(step 3, sample 16, 12 x ...)``. A segment that a step
spans is skipped (no step begins in it).
"""

from __future__ import annotations

import bisect
import itertools
from dataclasses import dataclass

from streamload.errors import ConfigError

__all__ = ["MAX_SEGMENTS", "StepRun", "StepSizes", "megatron_rampup"]

MAX_SEGMENTS = 1 << 20
"""Most sizes a schedule may hold (a ramp of more increments is refused: its tables and
walks are O(segments))."""


@dataclass(frozen=True)
class StepRun:
    """Consecutive optimizer steps of one size.

    Args:
        first_step: Index of the run's first step.
        first_sample: Sample where it begins.
        size: Samples per step.
        steps: Steps in the run (``None``: the last run, endless).
    """

    first_step: int
    first_sample: int
    size: int
    steps: int | None


@dataclass(frozen=True)
class StepSizes:
    """Samples of the optimizer step that begins after ``c`` consumed samples.

    Args:
        starts: First consumed sample of each segment: 0, then rising.
        sizes: Samples per step in each segment (>= 1).
    """

    starts: tuple[int, ...]
    sizes: tuple[int, ...]

    @classmethod
    def constant(cls, size: int) -> StepSizes:
        """Every step holds ``size`` samples."""
        return cls((0,), (size,))

    @property
    def is_constant(self) -> bool:
        """One size for every step."""
        return len(self.sizes) == 1

    @property
    def final(self) -> int:
        """The size once the last segment is reached."""
        return self.sizes[-1]

    def size_at(self, sample: int) -> int:
        """Samples of the step that begins at ``sample``."""
        return self.sizes[bisect.bisect_right(self.starts, sample) - 1]

    def _run_from(self, boundary: int) -> tuple[int, int]:
        """``(size, count)`` of the steps from a step boundary up to the first one that
        begins in a later segment (``count`` 0: endless)."""
        j = bisect.bisect_right(self.starts, boundary) - 1
        size = self.sizes[j]
        if j + 1 == len(self.starts):
            return size, 0
        return size, -(-(self.starts[j + 1] - boundary) // size)

    def walk(self, boundary: int, samples: int) -> tuple[tuple[tuple[int, int], ...], int, int]:
        """Where ``samples`` samples from a step boundary lead.

        Returns:
            ``(runs, done, size)``: the whole steps passed, as ``(size, count)`` runs in
            order, and the position after them (``done`` samples into a step of ``size``;
            ``(0, 0)`` on a boundary).
        """
        runs: list[tuple[int, int]] = []
        while samples > 0:
            size, count = self._run_from(boundary)
            whole = samples // size if count == 0 else min(count, samples // size)
            if whole:
                runs.append((size, whole))
                boundary, samples = boundary + whole * size, samples - whole * size
            if count == 0 or whole < count:
                break
        return tuple(runs), samples, (self.size_at(boundary) if samples else 0)

    def whole_end(self, boundary: int, length: int) -> int:
        """End of the last whole step from a step boundary that ends by ``length``
        (``boundary`` itself when none does)."""
        while True:
            size, count = self._run_from(boundary)
            whole = max(0, length - boundary) // size
            if count:
                whole = min(whole, count)
            boundary += whole * size
            if count == 0 or whole < count:
                return boundary

    def runs(self) -> tuple[StepRun, ...]:
        """The runs of equal steps from sample 0 (the last one endless)."""
        out: list[StepRun] = []
        boundary = step = 0
        while True:
            size, count = self._run_from(boundary)
            if out and out[-1].size == size:  # a table may repeat a size
                last = out.pop()
                boundary, step = last.first_sample, last.first_step
                count = 0 if count == 0 else count + (last.steps or 0)
            out.append(StepRun(step, boundary, size, count or None))
            if count == 0:
                return tuple(out)
            boundary, step = boundary + count * size, step + count

    def step_at(self, sample: int) -> tuple[int, int, int]:
        """``(step, first sample, size)`` of the step (from sample 0) holding ``sample``."""
        runs = self.runs()
        run = runs[bisect.bisect_right([r.first_sample for r in runs], sample) - 1]
        k = (sample - run.first_sample) // run.size
        return run.first_step + k, run.first_sample + k * run.size, run.size

    def is_boundary(self, sample: int) -> bool:
        """Whether a step may begin at ``sample``: always for a constant size (a resumed
        loader may change it at any boundary), else a boundary of the steps from 0."""
        return self.is_constant or self.step_at(sample)[1] == sample

    def check_divides(self, micro: int, what: str) -> None:
        """Raise unless every step from sample 0 splits into global micro-batches of
        ``micro`` samples (``what`` names that product in the message).

        Raises:
            ConfigError: naming the first step whose size it does not divide.
        """
        for run in self.runs():
            if run.size % micro:
                raise ConfigError(
                    f"optimizer step {run.first_step} (from sample {run.first_sample}) holds "
                    f"{run.size} samples, which is not a multiple of {what} = {micro}: a step "
                    "is a whole number of micro-batches; choose a world size and batch size "
                    "that divide every global batch size of the schedule"
                )

    @classmethod
    def from_samples(cls, pairs: list[tuple[int, int]]) -> StepSizes:
        """From ``(first consumed sample, size)`` pairs, the first at 0, rising."""
        return cls(tuple(p[0] for p in pairs), tuple(p[1] for p in pairs))

    @classmethod
    def from_steps(cls, pairs: list[tuple[int, int]]) -> StepSizes:
        """From ``(first step, size)`` pairs, the first at 0, rising: each pair's first
        sample is where its step begins."""
        starts, sample = [0], 0
        for (step, size), (next_step, _) in itertools.pairwise(pairs):
            sample += (next_step - step) * size
            starts.append(sample)
        return cls(tuple(starts), tuple(p[1] for p in pairs))


def megatron_rampup(start: int, increment: int, samples: int, final: int) -> StepSizes:
    """megatron-core's ramp (module docstring) as segments.

    Args:
        start: First global batch size (>= 1).
        increment: Growth per segment (>= 1; divides ``final - start > 0``).
        samples: Consumed samples over which the ramp runs (>= 1).
        final: Global batch size after the ramp.

    Raises:
        ConfigError: more than :data:`MAX_SEGMENTS` increments.
    """
    n = (final - start) // increment
    if n > MAX_SEGMENTS:
        raise ConfigError(
            f"rampup_batch_size: {n} increments of {increment} from {start} to {final}; at "
            f"most {MAX_SEGMENTS} are supported (raise the increment)"
        )
    per = samples / n  # a float, as megatron-core's rampup_samples_per_increment

    def level(consumed: int) -> int:  # megatron-core's ``steps`` at ``consumed``
        return n if consumed > samples else int(consumed / per)

    starts = [0]
    for j in range(1, n + 1):
        c = -(-j * samples // n)  # the exact threshold; the float rule may differ by one
        while c > 0 and level(c - 1) >= j:
            c -= 1
        while level(c) < j:
            c += 1
        starts.append(c)
    sizes = [start + j * increment for j in range(n + 1)]
    # A segment of no samples (several increments at one sample) is never in effect.
    keep = [j for j in range(n + 1) if j == n or starts[j] < starts[j + 1]]
    return StepSizes(tuple(starts[j] for j in keep), tuple(sizes[j] for j in keep))
