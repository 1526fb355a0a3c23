"""Stage 6 (partition): the cursor. Yields this rank's batches as chunks of sample ids."""

from __future__ import annotations

from typing import Any

from torchdata.nodes import BaseNode

from streamload.errors import ConfigError
from streamload.nodes.lookahead import Lookahead
from streamload.plan.partition import RankSpec
from streamload.state import load_position, make_state
from streamload.streams.chunks import ChunkPlan
from streamload.streams.cursor import (
    StreamCursor,
    check_step_resume,
    check_step_sizes,
    step_size_at,
)
from streamload.streams.interface import SampleStream

__all__ = ["PlanChunks"]


class PlanChunks(BaseNode[ChunkPlan]):
    """Yield chunks of up to ``chunk_batches`` consecutive batches of one rank, in order.

    Chunks start small and double up to ``chunk_batches`` (1, 2, 4, …) so the first batch
    arrives quickly after a start or a restore. A pass ends with its last whole optimizer
    step (``grad_accum_steps`` global batches, or the batch size schedule's; the partial
    remainder is dropped; an evaluation stream instead plans its last global batch padded,
    :mod:`streamload.streams.evaluation`), or when a mixture source's policy runs out. For
    remote sources the windows of the next ``storage.prefetch_batches`` batches are fetched ahead
    (:class:`~streamload.nodes.lookahead.Lookahead`); that never changes what is planned.
    After a pass ends, ``reset(None)`` starts the next pass
    (like torchdata's ``SamplerWrapper`` advancing its epoch), so a
    ``torchdata.nodes.Loader`` walks pass after pass.

    State:
        The loader's envelope (:mod:`streamload.state`) at the start of the next chunk.
        ``version``: the envelope's version; ``fingerprint``: the stream's order-deciding
        settings; ``epoch``: the pass; ``cursor``: samples, tokens and batches before the
        next chunk (its ``step`` and ``in_step`` in a mixture or inside a step);
        ``sources``: each source's next sample and epoch; ``global_batch_size``: samples
        per optimizer step. A mixture adds its ``schedule`` position
        (:mod:`streamload.state.envelope`).

    A state given to ``reset`` is checked like the loader's (:func:`streamload.state.
    load_position`: strict types, the fingerprint, a position the stream can stand at,
    mixture counts derived from the step; the node shape saved before the envelope loads
    too) and raises ``StateError`` otherwise; ``get_state()`` returns it until the next
    chunk.
    """

    def __init__(
        self,
        stream: SampleStream,
        rank: RankSpec,
        chunk_batches: int,
        start: StreamCursor | None = None,
        batches: int = 0,
    ) -> None:
        super().__init__()
        if chunk_batches < 1:
            raise ConfigError(f"chunk_batches = {chunk_batches} must be >= 1")
        check_step_sizes(stream, rank.world_size, rank.batch_size)  # a schedule's steps split
        self.stream = stream
        self.rank = rank
        self.chunk_batches = chunk_batches
        self.start = start or stream.start()
        self._cursor = self.start
        self._start_batches = self._batches = batches  # of the pass, before the cursor
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
            loaded = load_position(initial_state, self.stream, global_batch=micro)
            check_step_resume(loaded.cursor, self.stream, micro, "cursor")
            self._cursor, self._batches = loaded.cursor, loaded.batches
        elif self._started:
            self._cursor, self._batches = self.stream.next_pass(self._cursor), 0
        else:
            self._cursor, self._batches = self.start, self._start_batches
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
        self._batches += plan.sample_ids.shape[0]
        self._size = size * 2
        return plan

    @property
    def cursor(self) -> StreamCursor:
        """Where the next chunk begins."""
        return self._cursor

    def get_state(self) -> dict[str, Any]:
        step = step_size_at(self.stream, self._cursor, self.rank.global_batch)
        return make_state(self.stream, self._cursor, batches=self._batches, global_batch=step)
