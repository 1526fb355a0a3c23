"""The stream as a ``torch.utils.data.IterableDataset`` for ``StatefulDataLoader``.

Use it with ``batch_size=None`` (the dataset yields whole per-rank batches)::

    ds = StreamDataset(stream, RankSpec(rank, world, batch_size=8))
    dl = StatefulDataLoader(ds, batch_size=None, num_workers=2)

With ``num_workers = N`` the loader's worker ``w`` yields this rank's batches
``w, w + N, w + 2N, …``; the loader takes workers in turn, so the order is the same as
with no workers.

Passes (epochs): each ``iter()`` starts the next pass, whatever the workers: epoch ``e`` of
``for epoch in range(E): for batch in dl`` is pass ``e`` with 0 workers, persistent workers
or fresh workers per epoch. Worker processes iterate *copies* of the dataset, so the number
of passes each worker slot has started is kept in a small shared-memory counter made with
the dataset (slots for :data:`MAX_WORKER_SLOTS` workers; a copy made by ``pickle`` or
``deepcopy`` counts on its own). ``ds.set_epoch(e)`` makes the next ``iter()`` of every
worker start pass ``e`` (the following ones ``e + 1``, …), like
``DistributedSampler.set_epoch``.

Each worker's state is its cursor (its next batch), so
``StatefulDataLoader.state_dict()`` resumes exactly with the same ``num_workers``: a state
saved inside a pass continues it; one saved after a pass's loop ended continues with the
next pass. For a change of worker count or world size, use :class:`streamload.StreamLoader`,
whose state is global.

An ``iter()`` decides its pass when it is called, not when its first batch is asked for:
``StatefulDataLoader`` makes an iterator while restoring a state and may drop it unused (a
state saved after the loop ended), and the next iterator must then start the next pass.

An evaluation pass is the same dataset over an evaluation stream, with the last global batch
padded and ``sample_mask`` in every batch (:mod:`streamload.streams.evaluation`)::

    ds = StreamDataset(evaluation_stream("data.toml", "valid"), RankSpec(rank, world, 8))
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import torch
from torch.utils.data import IterableDataset, get_worker_info

from streamload.errors import ConfigError, StateError
from streamload.modes import adopted_stream
from streamload.nodes.materialize import Materialize
from streamload.plan.partition import RankSpec
from streamload.state import load_position, make_state
from streamload.streams.cursor import (
    StreamCursor,
    check_step_resume,
    check_step_sizes,
    loader_steps,
    step_size_at,
)
from streamload.streams.interface import SampleStream

__all__ = ["MAX_WORKER_SLOTS", "StreamDataset"]

Batch = dict[str, torch.Tensor]

MAX_WORKER_SLOTS = 1024
"""Worker ids with a shared pass counter (8 KiB); a worker beyond them counts on its own."""


class StreamDataset(IterableDataset[Batch]):
    """This rank's batches of the global stream, one pass per ``iter()``.

    Args:
        stream: The global sample stream.
        rank: Data-parallel rank, size and per-rank batch size.

    Its state is the loader's envelope (:mod:`streamload.state`) at this copy's next batch:
    ``cursor.batches`` is that batch's number in the pass (0 also before the pass started:
    worker ``w`` then starts at its batch ``w``). A loaded state is checked like the
    loader's (and a ``StreamDataset`` state saved before the envelope loads too) and echoed:
    ``state_dict()`` returns it until the next batch.

    State:
        ``version``: the envelope's version; ``fingerprint``: the stream's order-deciding
        settings; ``epoch``: the pass; ``cursor``: samples, tokens and batches before this
        copy's next batch (its ``step`` and ``in_step`` in a mixture or inside a step);
        ``sources``: each source's next sample and epoch; ``global_batch_size``: samples
        per optimizer step. A mixture adds its ``schedule`` position
        (:mod:`streamload.state.envelope`).
    """

    def __init__(self, stream: SampleStream, rank: RankSpec) -> None:
        check_step_sizes(stream, rank.world_size, rank.batch_size)
        self.stream = stream
        self.rank = rank
        self._materialize = Materialize(stream)
        self._cursor = stream.start()
        self._batch: int | None = None
        self._pending: tuple[StreamCursor, int | None] | None = None  # a loaded position
        # Passes started per worker slot, shared with worker processes (fork or spawn).
        self._passes = torch.zeros(MAX_WORKER_SLOTS, dtype=torch.int64).share_memory_()
        self._own_passes = 0  # for a worker id beyond the slots

    @property
    def source_names(self) -> tuple[str, ...]:
        """The sources' names in the config's order: ``batch["source_ids"]`` indexes this."""
        return tuple(source.name for source in self.stream.sources)

    def __iter__(self) -> Iterator[Batch]:
        info = get_worker_info()
        worker, workers = (info.id, info.num_workers) if info is not None else (0, 1)
        global_batch = self.rank.global_batch
        pending, self._pending = self._pending, None
        if pending is not None and pending[1] is not None:
            cursor, batch = pending[0], pending[1]
        else:
            first = pending[0].pass_index if pending is not None else self._started(worker)
            cursor = self.stream.advance(self.stream.start(first), worker, global_batch)
            batch = worker
        self._set_started(worker, cursor.pass_index + 1)
        self._cursor, self._batch = cursor, batch
        return self._batches(workers)

    def _batches(self, workers: int) -> Iterator[Batch]:
        spec = self.rank
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

    def _started(self, worker: int) -> int:
        return int(self._passes[worker]) if worker < MAX_WORKER_SLOTS else self._own_passes

    def _set_started(self, worker: int, passes: int) -> None:
        if worker < MAX_WORKER_SLOTS:
            self._passes[worker] = passes
        else:
            self._own_passes = passes

    def set_epoch(self, epoch: int) -> None:
        """Make the next ``iter()`` (of every worker) start pass ``epoch`` from its first batch.

        Raises:
            ConfigError: ``epoch`` is not an integer >= 0.
        """
        if isinstance(epoch, bool) or not isinstance(epoch, int) or epoch < 0:
            raise ConfigError(f"set_epoch({epoch!r}): the epoch must be an integer >= 0")
        self._passes.fill_(epoch)
        self._own_passes = epoch
        self._cursor, self._batch, self._pending = self.stream.start(epoch), None, None

    def state_dict(self) -> dict[str, Any]:
        """Small JSON-safe position of this copy (the envelope)."""
        step = step_size_at(self.stream, self._cursor, self.rank.global_batch)
        return make_state(self.stream, self._cursor, batches=self._batch or 0, global_batch=step)

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Continue at a saved position on the next ``iter()``.

        Raises:
            StateError: malformed, saved for another stream, or a position this copy cannot
                stand at (named field, value and expectation).
        """
        global_batch = self.rank.global_batch
        info = get_worker_info()
        workers = info.num_workers if info is not None else 1
        slack = (workers - 1) * global_batch
        stream = adopted_stream(self.stream, state)  # an older default rule, left unset
        loaded = load_position(state, stream, global_batch=global_batch, slack=slack)
        cursor, batch = loaded.cursor, loaded.batches or None  # 0: the pass not yet started
        check_step_resume(cursor, stream, global_batch, "cursor")
        expected, in_step = 0, 0
        if batch is not None and not stream.is_mixture:  # an evaluation pass ends at P
            start = stream.start(cursor.pass_index)
            after = stream.advance(start, batch, global_batch)
            expected, in_step = after.sample, after.in_step
        elif batch is not None:
            expected = batch * global_batch
            steps = loader_steps(stream, global_batch, cursor.pass_index)
            in_step = expected - steps.step_at(expected)[1]
        if (cursor.sample, cursor.in_step) != (expected, in_step):
            steps_note = f" (in_step {cursor.in_step}, expected {in_step})"
            raise StateError(
                f"state cursor.samples = {cursor.sample} disagrees with cursor.batches = "
                f"{batch or 0} of {global_batch} samples, which gives {expected}"
                f"{steps_note if cursor.in_step or in_step else ''}; the "
                "state was edited, or saved with another global batch size (use StreamLoader "
                "to change it)"
            )
        if stream is not self.stream:
            self.stream, self._materialize = stream, Materialize(stream)
        self._cursor, self._batch, self._pending = cursor, batch, (cursor, batch)
