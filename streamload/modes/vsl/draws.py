"""How many rows of each length each source of a ``vsl`` stream has given after any batch,
under the weight phases of its ``[[schedule]]``.

Inside one phase the rows of bucket ``k`` follow the phase's row pattern
(:func:`streamload.plan.vsl_mixture.row_pattern`), walked from the phase's first batch of
that bucket; a phase starts from the counts the previous one reached. A phase
starting at optimizer step ``P`` starts at global batch ``G = P·grad_accum_steps``; its first
batch of bucket ``k`` is the number of bucket-``k`` batches before ``G``: whole passes of
``m_k`` each, plus a count over the steps of ``G``'s pass before it (a pass's buckets, one
byte per step, computed once per phase and kept). So the count after any batch is a closed
form per phase: resuming replays nothing.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from streamload.plan.mixture import Phase
from streamload.plan.vsl_mixture import RowPattern, bucket_weights, row_pattern

__all__ = ["VslDraws"]


class VslDraws:
    """Rows drawn per source and bucket, phase by phase.

    Args:
        phases: The weight phases (a phase's ``start_step`` counts optimizer steps).
        counts: int64 ``[sources, buckets]``: pieces of each length of each source.
        rows: Rows per batch of each bucket.
        batches: Batches of each bucket per pass.
        steps: Global batches per pass.
        accum: Global batches per optimizer step (``grad_accum_steps``).
        before: ``before(pass, step)`` → int64 ``[buckets]``: batches of each bucket in the
            pass's steps before ``step``.
    """

    def __init__(
        self,
        phases: Sequence[Phase],
        counts: np.ndarray,
        rows: Sequence[int],
        batches: Sequence[int],
        steps: int,
        accum: int,
        before: Callable[[int, int], np.ndarray],
    ) -> None:
        self.phases = tuple(phases)
        self.rows = tuple(rows)
        self.batches = np.asarray(batches, dtype=np.int64)
        self.steps, self.accum, self._before = steps, accum, before
        has = counts > 0
        self.patterns: list[list[RowPattern]] = [
            [row_pattern(bucket_weights(np.array(p.weights), has[:, k]), r)
             for k, r in enumerate(self.rows)]
            for p in self.phases
        ]  # fmt: skip
        self.sources = int(counts.shape[0])
        self._starts: list[tuple[np.ndarray, np.ndarray]] = []  # per phase: first J, counts

    def _phase_start(self, phase: int) -> tuple[np.ndarray, np.ndarray]:
        """``(first batch J of each bucket, rows drawn before it [buckets, sources])``."""
        while len(self._starts) <= phase:
            index = len(self._starts)
            batch = self.phases[index].start_step * self.accum
            passes, step = divmod(batch, self.steps)
            first = passes * self.batches + self._before(passes, step)
            if index == 0:
                drawn = np.zeros((len(self.rows), self.sources), dtype=np.int64)
            else:
                drawn = np.stack(
                    [self._drawn_in(index - 1, k, j) for k, j in enumerate(first.tolist())]
                )
            self._starts.append((first, drawn))
        return self._starts[phase]

    def phase_of(self, bucket: int, batch: int) -> int:
        """The phase of the ``batch``-th batch of ``bucket`` (counted from the start)."""
        phase = 0
        for index in range(1, len(self.phases)):
            if self._phase_start(index)[0][bucket] <= batch:
                phase = index
            else:
                break
        return phase

    def drawn(self, bucket: int, batch: int) -> np.ndarray:
        """int64 ``[sources]``: rows of ``bucket`` each source gave in its first ``batch``
        batches."""
        phase = self.phase_of(bucket, batch) if len(self.phases) > 1 else 0
        return self._drawn_in(phase, bucket, batch)

    def place(self, bucket: int, batch: int) -> tuple[np.ndarray, np.ndarray]:
        """``(source of each row, draw index of each row in its source's sequence)`` of the
        ``batch``-th batch of ``bucket``."""
        phase = self.phase_of(bucket, batch) if len(self.phases) > 1 else 0
        first = self._phase_start(phase)[0][bucket]
        sources, ranks = self.patterns[phase][bucket].place(batch - int(first))
        return sources, self._drawn_in(phase, bucket, batch)[sources] + ranks

    def _drawn_in(self, phase: int, bucket: int, batch: int) -> np.ndarray:
        """:meth:`drawn` counting ``phase`` on from its start (``batch`` at or after it)."""
        first, base = self._phase_start(phase)
        return base[bucket] + self.patterns[phase][bucket].drawn(batch - int(first[bucket]))
