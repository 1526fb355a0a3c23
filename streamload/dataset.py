"""The stream as a ``torch.utils.data.IterableDataset`` for ``StatefulDataLoader``.

Use it with ``batch_size=None`` (the dataset yields whole per-rank batches)::

    ds = StreamDataset(stream, RankSpec(rank, world, batch_size=8))
    dl = StatefulDataLoader(ds, batch_size=None, num_workers=2)

With ``num_workers = N`` the loader's worker ``w`` yields this rank's batches
``w, w + N, w + 2N, …``; the loader takes workers in turn, so the order is the same as
with no workers.

Passes: each ``iter()`` of the same dataset object starts the next pass. Worker processes
iterate *copies*, so with ``num_workers > 0`` and non-persistent workers (the default) call
``ds.set_epoch(epoch)`` before each epoch, exactly like ``DistributedSampler.set_epoch`` —
otherwise every epoch would repeat pass 0 — or use ``persistent_workers=True``.

Each worker's state is its cursor (its next batch), so
``StatefulDataLoader.state_dict()`` resumes exactly with the same ``num_workers``. For a
change of worker count or world size, use :class:`streamload.StreamLoader`, whose state is
global.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import torch
from torch.utils.data import IterableDataset, get_worker_info

from streamload.errors import StateError
from streamload.nodes.materialize import Materialize
from streamload.plan.partition import RankSpec
from streamload.state import check_fingerprint
from streamload.streams.cursor import StreamCursor
from streamload.streams.interface import SampleStream

__all__ = ["StreamDataset"]

Batch = dict[str, torch.Tensor]


class StreamDataset(IterableDataset[Batch]):
    """This rank's batches of the global stream, one pass per ``iter()``.

    Args:
        stream: The global sample stream.
        rank: Data-parallel rank, size and per-rank batch size.

    State:
        ``cursor``: this copy's next batch (the stream cursor); ``batch``: its pass-relative
        batch number; ``fingerprint``: the stream's fingerprint.
    """

    CURSOR_KEY = "cursor"
    BATCH_KEY = "batch"

    def __init__(self, stream: SampleStream, rank: RankSpec) -> None:
        self.stream = stream
        self.rank = rank
        self._materialize = Materialize(stream)
        self._cursor = stream.start()
        self._batch: int | None = None  # None: not started; the first iter starts at the worker id
        self._resume = False
        self._pass_set = False

    def __iter__(self) -> Iterator[Batch]:
        info = get_worker_info()
        worker, workers = (info.id, info.num_workers) if info is not None else (0, 1)
        spec = self.rank
        if not self._resume:
            if self._batch is not None and not self._pass_set:
                self._cursor = self.stream.next_pass(self._cursor)
            self._cursor = self.stream.advance(self._cursor, worker, spec.global_batch)
            self._batch = worker
        self._resume = self._pass_set = False
        while True:
            planned = self.stream.plan_chunk(
                self._cursor, 1, spec.global_batch, spec.world_size, spec.rank
            )
            if planned is None:
                return
            batch = self._materialize(planned[0])
            self._cursor = self.stream.advance(self._cursor, workers, spec.global_batch)
            self._batch = (self._batch or 0) + workers
            yield {key: value[0] for key, value in batch.items()}

    def set_epoch(self, epoch: int) -> None:
        """Make the next ``iter()`` start pass ``epoch`` from its first batch."""
        self._cursor = self.stream.start(epoch)
        self._batch, self._resume, self._pass_set = None, False, True

    def state_dict(self) -> dict[str, Any]:
        """Small JSON-safe position of this copy."""
        return {
            self.CURSOR_KEY: self._cursor.to_state(),
            self.BATCH_KEY: self._batch,
            "fingerprint": self.stream.fingerprint(self._cursor),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Continue at a saved position on the next ``iter()``."""
        if self.CURSOR_KEY not in state or self.BATCH_KEY not in state:
            raise StateError(f"not a StreamDataset state: keys {sorted(state)}")
        cursor = StreamCursor.from_state(state[self.CURSOR_KEY])
        check_fingerprint(state.get("fingerprint", {}), self.stream.fingerprint(cursor), False)
        self._cursor, self._batch = cursor, state[self.BATCH_KEY]
        self._resume = self._batch is not None
