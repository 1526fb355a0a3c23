"""Prefetch planned from the known future order.

The order is a pure function of the config and the cursor, so the planner can compute the
chunks of the next ``storage.prefetch_batches`` batches of this rank before any worker reads
them, turn their windows into byte ranges, and start fetching those (coalesced, bounded
concurrency; :class:`~streamload.remote.store.RemoteStore`). Readers then find their windows
in memory or in the disk cache. Planning ahead is side-effect free: a lookahead that reaches
the end of a mixture does not mark the stream as ended.

Memory stays bounded: at most ``prefetch_batches`` batches of windows are requested ahead of
the planner, and fetched pieces live in the bounded memory LRU and the bounded disk cache.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

import numpy as np

from streamload.streams.chunks import ChunkPlan

if TYPE_CHECKING:
    from streamload.streams.cursor import StreamCursor
    from streamload.streams.interface import SampleStream

__all__ = ["Lookahead", "prefetch_plan"]


def prefetch_plan(stream: SampleStream, plan: ChunkPlan) -> None:
    """Start fetching the windows of a chunk plan (a no-op for local sources)."""
    src = plan.sources.ravel()
    local = plan.local_ids.ravel()
    for index in np.unique(src).tolist():
        source = stream.sources[index]
        if source.shards.remote:
            source.prefetch(local[src == index])


class Lookahead:
    """Keeps the windows of the next ``batches`` batches of one rank in flight.

    It plans the planner's own future chunks (same start, same 1, 2, 4... ramp), whole, until
    at least ``batches`` batches (and one chunk) are in flight: windows requested together are
    coalesced together, so prefetching other groupings than the chunks would split a chunk's
    windows into more, smaller requests (measured: 1.6x the requests and 0.65x the throughput
    against a loopback S3 server).

    Args:
        stream: The sample stream.
        batches: Batches to fetch ahead (0: off).
        global_batch: Samples per global batch.
        world_size: Data-parallel size.
        rank: This rank.
        chunk_batches: Batches per chunk of the planner.
    """

    def __init__(
        self,
        stream: SampleStream,
        batches: int,
        global_batch: int,
        world_size: int,
        rank: int,
        chunk_batches: int = 1,
    ) -> None:
        self.stream = stream
        remote = batches > 0 and any(s.shards.remote for s in stream.sources)
        self.batches = max(batches, chunk_batches) if remote else 0
        if self.batches:  # the lookahead covers every chunk: readers need not start fetches
            for source in stream.sources:
                source.shards.planned_ahead = os.getpid()
        self.global_batch = global_batch
        self.world_size = world_size
        self.rank = rank
        self.chunk_batches = chunk_batches
        self._next: StreamCursor | None = None
        self._step = 1

    def reset(self) -> None:
        """Forget what was planned ahead (the cursor moved: a restore or a new pass)."""
        self._next = None
        self._step = 1

    def advance(self, cursor: StreamCursor) -> None:
        """Prefetch the ``batches`` batches from ``cursor`` (the start of the chunk being
        planned) that are not in flight yet."""
        if self.batches == 0:
            return
        ahead = self._next
        if ahead is None or ahead.pass_index != cursor.pass_index or ahead.sample < cursor.sample:
            ahead = cursor
        ended_by = self.stream.ended_by
        try:
            while (ahead.sample - cursor.sample) // self.global_batch < self.batches:
                # Whole chunks, ramping 1, 2, 4... exactly as the planner's: the first batches
                # are requested first, and each chunk's windows coalesce as its read would.
                planned = self.stream.plan_chunk(
                    ahead, self._step, self.global_batch, self.world_size, self.rank
                )
                if planned is None:
                    break
                plan, ahead = planned
                self._step = min(2 * self._step, self.chunk_batches)
                prefetch_plan(self.stream, plan)
        finally:
            self.stream.ended_by = ended_by  # looking ahead must not end the stream early
            self._next = ahead
