"""Stage 6 (partition): the cursor. Yields this rank's batches as chunks of sample ids."""

from __future__ import annotations

from typing import Any

from torchdata.nodes import BaseNode

from streamload.errors import ConfigError
from streamload.nodes.lookahead import Lookahead
from streamload.plan.partition import RankSpec
from streamload.streams.chunks import ChunkPlan
from streamload.streams.cursor import StreamCursor, check_cursor, check_step_resume
from streamload.streams.interface import SampleStream

__all__ = ["PlanChunks"]


class PlanChunks(BaseNode[ChunkPlan]):
    """Yield chunks of up to ``chunk_batches`` consecutive batches of one rank, in order.

    Chunks start small and double up to ``chunk_batches`` (1, 2, 4, …) so the first batch
    arrives quickly after a start or a restore. A pass ends with its last whole optimizer
    step (``grad_accum_steps`` global batches; the partial remainder is dropped; an
    evaluation stream instead plans its last global batch padded,
    :mod:`streamload.streams.evaluation`), or when a mixture source's policy runs out. For
    remote sources the windows of the next ``storage.prefetch_batches`` batches are fetched ahead
    (:class:`~streamload.nodes.lookahead.Lookahead`); that never changes what is planned.
    After a pass ends, ``reset(None)`` starts the next pass
    (like torchdata's ``SamplerWrapper`` advancing its epoch), so a
    ``torchdata.nodes.Loader`` walks pass after pass.

    State:
        ``pass``: the current pass; ``sample``: pass-relative sample where the next chunk
        begins; ``mixture``: ``None``, or per-source counts and the schedule position (at
        the start of the optimizer step in progress); ``in_step`` (only inside an optimizer
        step): ``[samples of the step delivered, samples of the step]``.

    A state given to ``reset`` is checked like the loader's (``streams/cursor.py``: strict
    types, a position the stream can stand at, mixture counts derived from the step) and
    raises ``StateError`` otherwise; ``get_state()`` returns it until the next chunk.
    """

    PASS_KEY = "pass"
    SAMPLE_KEY = "sample"
    MIXTURE_KEY = "mixture"
    IN_STEP_KEY = "in_step"

    def __init__(
        self,
        stream: SampleStream,
        rank: RankSpec,
        chunk_batches: int,
        start: StreamCursor | None = None,
    ) -> None:
        super().__init__()
        if chunk_batches < 1:
            raise ConfigError(f"chunk_batches = {chunk_batches} must be >= 1")
        self.stream = stream
        self.rank = rank
        self.chunk_batches = chunk_batches
        self.start = start or stream.start()
        self._cursor = self.start
        self._started = False
        self._size = 1
        self._lookahead = Lookahead(
            stream,
            stream.config.storage.prefetch_batches,
            rank.global_batch,
            rank.world_size,
            rank.rank,
            chunk_batches,
        )

    def reset(self, initial_state: dict[str, Any] | None = None) -> None:
        super().reset(initial_state)
        if initial_state is not None:
            micro = self.rank.global_batch
            step = self.stream.config.grad_accum_steps * micro
            cursor = StreamCursor.from_state(initial_state, step)
            check_cursor(self.stream, cursor)
            check_step_resume(cursor, step, micro, "cursor")
            self._cursor = cursor
        elif self._started:
            self._cursor = self.stream.next_pass(self._cursor)
        else:
            self._cursor = self.start
        self._started = True
        self._size = 1
        self._lookahead.reset()

    def next(self) -> ChunkPlan:
        spec = self.rank
        size = min(self._size, self.chunk_batches)
        planned = self.stream.plan_chunk(
            self._cursor, size, spec.global_batch, spec.world_size, spec.rank
        )
        if planned is None:
            raise StopIteration
        self._lookahead.advance(self._cursor)  # this chunk and the next batches
        plan, self._cursor = planned
        self._size = size * 2
        return plan

    def get_state(self) -> dict[str, Any]:
        return self._cursor.to_state()
