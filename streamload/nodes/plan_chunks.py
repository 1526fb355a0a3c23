"""Stage 6 (partition): the cursor. Yields this rank's batches as chunks of sample ids."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from torchdata.nodes import BaseNode

from streamload.errors import ConfigError
from streamload.nodes.types import ChunkPlan
from streamload.plan.partition import chunk_sample_ids, num_batches

__all__ = ["PlanChunks", "RankSpec"]


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
        if self.world_size < 1 or not 0 <= self.rank < self.world_size:
            raise ConfigError(f"rank {self.rank} is not in [0, world_size = {self.world_size})")
        if self.batch_size < 1:
            raise ConfigError(f"batch_size = {self.batch_size} must be >= 1")

    @property
    def global_batch(self) -> int:
        """Samples per global batch."""
        return self.world_size * self.batch_size


class PlanChunks(BaseNode[ChunkPlan]):
    """Yield chunks of up to ``chunk_batches`` consecutive batches of one rank, in order.

    A pass ends with its last whole global batch (the partial remainder is dropped). After a
    pass ends, ``reset(None)`` starts the next pass (like torchdata's ``SamplerWrapper``
    advancing its epoch), so a ``torchdata.nodes.Loader`` walks pass after pass.

    State:
        ``pass``: the current pass; ``sample``: pass-relative sample where the next chunk
        begins. Both are plain ints.
    """

    PASS_KEY = "pass"
    SAMPLE_KEY = "sample"

    def __init__(
        self, pass_length: int, rank: RankSpec, chunk_batches: int, start: tuple[int, int] = (0, 0)
    ) -> None:
        super().__init__()
        if chunk_batches < 1:
            raise ConfigError(f"chunk_batches = {chunk_batches} must be >= 1")
        self.pass_length = pass_length
        self.rank = rank
        self.chunk_batches = chunk_batches
        self.start = start
        self._pass, self._sample = start
        self._started = False

    def reset(self, initial_state: dict[str, Any] | None = None) -> None:
        super().reset(initial_state)
        if initial_state is not None:
            self._pass = int(initial_state[self.PASS_KEY])
            self._sample = int(initial_state[self.SAMPLE_KEY])
        elif self._started:
            self._pass, self._sample = self._pass + 1, 0
        else:
            self._pass, self._sample = self.start
        self._started = True

    def next(self) -> ChunkPlan:
        spec = self.rank
        left = num_batches(self.pass_length, self._sample, spec.global_batch)
        if left == 0:
            raise StopIteration
        count = min(self.chunk_batches, left)
        ids = chunk_sample_ids(
            self._sample, 0, count, spec.global_batch, spec.world_size, spec.rank
        )
        self._sample += count * spec.global_batch
        return ChunkPlan(self._pass, ids)

    def get_state(self) -> dict[str, Any]:
        return {self.PASS_KEY: self._pass, self.SAMPLE_KEY: self._sample}
