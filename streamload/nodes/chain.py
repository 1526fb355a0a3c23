"""The node chain :class:`streamload.StreamLoader` runs, for anyone composing torchdata nodes::

    PlanChunks → MapStage(Materialize) | MapWorkers(Materialize) → SplitBatches [→ PinMemory]

:func:`build_chain` is the one place it is assembled (the loader calls it too). Chunks hold
as many batches as fit :data:`CHUNK_BYTES` (at most :data:`MAX_CHUNK_BATCHES`, or the mode's
own cap from its :class:`~streamload.streams.layout.BatchLayout`), so a worker hands off big.

Example:
    >>> chain = build_chain(stream, RankSpec(0, 1, 8), num_workers=2)  # doctest: +SKIP
    >>> loader = torchdata.nodes.Loader(chain.root)                     # doctest: +SKIP
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
from torchdata.nodes import BaseNode, PinMemory

from streamload.config.loader_args import LoaderOptions
from streamload.nodes.map_stage import MapStage
from streamload.nodes.map_workers import MapWorkers
from streamload.nodes.materialize import Materialize
from streamload.nodes.plan_chunks import PlanChunks
from streamload.nodes.split_batches import SplitBatches
from streamload.plan.partition import RankSpec
from streamload.streams.cursor import StreamCursor
from streamload.streams.interface import SampleStream

__all__ = [
    "CHUNK_BYTES",
    "MAX_CHUNK_BATCHES",
    "Chain",
    "build_chain",
    "chunk_batches",
    "shutdown_chain",
]

CHUNK_BYTES = 16 << 20
"""Target size of one chunk of batches handed over by a worker (hand off big)."""
MAX_CHUNK_BATCHES = 64


@dataclass(frozen=True)
class Chain:
    """A built chain: its root (iterate it, or wrap it in ``torchdata.nodes.Loader``), the
    planner (the stage with the state) and the workers (``None`` with 0 workers)."""

    root: BaseNode[dict[str, torch.Tensor]]
    planner: PlanChunks
    workers: MapWorkers[Any, dict[str, torch.Tensor]] | None


def build_chain(
    stream: SampleStream,
    rank: RankSpec,
    num_workers: int = 0,
    options: LoaderOptions | None = None,
    cursor: StreamCursor | None = None,
    batches: int = 0,
) -> Chain:
    """Assemble the loader's chain (not yet reset: call ``root.reset()`` or let a
    ``torchdata.nodes.Loader`` do it).

    Args:
        stream: The global sample stream.
        rank: Data-parallel rank, size and per-rank batch size.
        num_workers: Worker threads/processes (0: in the calling thread).
        options: Worker type, prefetch, pinning, chunk size.
        cursor: Where the first pass starts (default: the stream's start).
        batches: Batches of that pass before ``cursor``.
    """
    opts = options or LoaderOptions()
    size = chunk_batches(stream, rank, opts)
    planner = PlanChunks(stream, rank, size, cursor, batches)
    work = Materialize(stream, count_skipped=True)
    node: BaseNode[Any]
    workers = None
    if num_workers == 0:
        node = MapStage(planner, work)
    else:
        node = workers = MapWorkers(
            planner,
            work,
            num_workers=num_workers,
            method=opts.worker_type.value,
            max_inflight=num_workers + opts.prefetch,
            mp_context=opts.multiprocessing_context,
            slot_bytes=size * _batch_bytes(stream, rank) + 64 * 8,
        )
    node = SplitBatches(node)
    if opts.pin_memory and torch.cuda.is_available():
        node = PinMemory(node)
    return Chain(node, planner, workers)


def chunk_batches(stream: SampleStream, rank: RankSpec, options: LoaderOptions) -> int:
    """Batches per chunk: the option, else as many as fit :data:`CHUNK_BYTES`; never over
    the mode's cap."""
    most = stream.layout.max_chunk_batches or MAX_CHUNK_BATCHES
    if options.chunk_batches is not None:
        return min(most, options.chunk_batches)
    return max(1, min(most, CHUNK_BYTES // _batch_bytes(stream, rank)))


def _batch_bytes(stream: SampleStream, rank: RankSpec) -> int:
    """Upper bound of one batch's tensors in bytes (inputs, labels, index, masks)."""
    b, length = rank.batch_size, stream.seq_len
    size = 16 * b * length + 17 * b  # input_ids, labels; sample_index, source_ids, mask
    packing = stream.config.packing
    if packing.compact:  # tokens of at most 4 bytes and label_mask
        size = 5 * b * (length + 1) + 17 * b
    if packing.masks:
        size += 16 * b * length + 4 * b * (length + 1) + 4 * b
    layout = stream.layout
    if layout.positions:  # position_ids; rows of their own (vsl: pieces of a slot)
        rows = b * layout.rows_per_sample
        size += 17 * rows + 8 * b * length + 4 * rows
    elif layout.rows_per_sample > 1:  # windows cut into rows (seq_len warm-up): per-row
        size += 32 * b * (layout.rows_per_sample - 1)  # ids, cu_seqlens' end, max_seqlen, overlap
    return size + 64 * 8  # alignment of up to 8 tensors


def shutdown_chain(node: Any, depth: int = 0) -> None:
    """Stop the worker threads/processes of a chain now, rather than at garbage collection.

    torchdata keeps its workers in ``_it`` iterators (nested for ``ParallelMapper``); each has
    ``_shutdown``. Stages link to their input through ``source``.
    """
    if node is None or depth > 32:
        return
    stop = getattr(node, "_shutdown", None)
    if callable(stop):
        stop()
    shutdown_chain(getattr(node, "_it", None), depth + 1)
    shutdown_chain(getattr(node, "source", None), depth + 1)
