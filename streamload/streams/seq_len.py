"""Sequence-length warm-up on the stream: which step a cursor stands in, and a chunk's
windows cut into the step's rows (the rule: :mod:`streamload.plan.seq_len`).

The stream's samples stay windows of ``seq_len + 1`` tokens (the maximum length) and the
cursor counts them, so the state, its checks and the rank split are the plain stream's. A
chunk never spans a change of length (:func:`batches_to_switch` caps it), and its plan
carries the length (``ChunkPlan.row_length``); :func:`cut_chunk` then cuts every window —
tokens, document starts, loss mask, data lengths — before the masks are made, so
``position_ids``, ``doc_ids`` and ``cu_seqlens`` restart at each row as they do at each
window, and the labels of a window's rows, end to end, are the window's labels.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from streamload.plan.seq_len import SeqLenSchedule
from streamload.streams.chunks import ChunkPlan, TokenChunk
from streamload.streams.cursor import StreamCursor

__all__ = ["batches_to_switch", "cut_chunk", "cut_plan", "schedule_step"]


def schedule_step(schedule: SeqLenSchedule, cursor: StreamCursor, pass_length: int | None) -> int:
    """The optimizer step (from 0 over the whole run) that the cursor's next sample is in:
    each earlier pass delivered ``pass_length // global_batch_size`` whole steps (an endless
    stream has one pass)."""
    size = schedule.global_batch
    per_pass = 0 if pass_length is None else pass_length // size
    return cursor.pass_index * per_pass + cursor.sample // size


def batches_to_switch(
    schedule: SeqLenSchedule, cursor: StreamCursor, pass_length: int | None, global_batch: int
) -> tuple[int, int | None]:
    """``(step, batches)``: the cursor's step (:func:`schedule_step`) and the global batches
    of ``global_batch`` samples before the next change of length (``None``: none comes)."""
    step = schedule_step(schedule, cursor, pass_length)
    switch = schedule.next_switch(step)
    if switch is None:
        return step, None
    samples = (switch - step) * schedule.global_batch - cursor.sample % schedule.global_batch
    return step, -(-samples // global_batch)


def cut_plan(plan: ChunkPlan, rows: int) -> ChunkPlan:
    """The plan of a cut chunk: each window's ids repeated over its ``rows`` rows
    (``[batches, batch_size · rows]``), so ``sample_index`` names the window a row is from."""
    padding = None if plan.padding is None else np.repeat(plan.padding, rows, axis=1)
    return ChunkPlan(
        plan.pass_index,
        np.repeat(plan.sample_ids, rows, axis=1),
        np.repeat(plan.sources, rows, axis=1),
        np.repeat(plan.local_ids, rows, axis=1),
        padding,
        row_length=plan.row_length,
    )


def cut_chunk(chunk: TokenChunk, length: int) -> TokenChunk:
    """Every window ``[seq_len + 1]`` of a chunk as ``seq_len / length`` rows of
    ``length + 1`` tokens at stride ``length`` (row ``j``: tokens ``[j·length, j·length +
    length + 1)``), rows of a window consecutive.

    Per row: ``starts`` is its window's start plus ``j·length``; ``lengths`` (packed data
    tokens) what of the window's data lies in it, ``clip(n − j·length, 0, length + 1)``;
    a skipped window's rows are all skipped.

    Example:
        >>> import numpy as np
        >>> from streamload.streams.chunks import ChunkPlan
        >>> ids = np.zeros((1, 1), np.int64)
        >>> plan = ChunkPlan(0, ids, ids.astype(np.int16), ids, row_length=2)
        >>> chunk = TokenChunk(plan, np.arange(5).reshape(1, 5), np.zeros(1, np.int64))
        >>> cut_chunk(chunk, 2).tokens.tolist()
        [[0, 1, 2], [2, 3, 4]]
    """
    rows = (chunk.tokens.shape[1] - 1) // length
    offsets = np.arange(rows, dtype=np.int64) * length
    lengths = None
    if chunk.lengths is not None:
        lengths = np.clip(chunk.lengths[:, None] - offsets, 0, length + 1).ravel()
    skipped = (chunk.skipped_rows[:, None] * rows + np.arange(rows)).ravel()
    return replace(
        chunk,
        plan=cut_plan(chunk.plan, rows),
        tokens=_cut(chunk.tokens, length, rows),
        starts=(chunk.starts[:, None] + offsets).ravel(),
        doc_starts=None if chunk.doc_starts is None else _cut(chunk.doc_starts, length, rows),
        skipped_rows=skipped.astype(np.int64),
        lengths=lengths,
        loss_mask=None if chunk.loss_mask is None else _cut(chunk.loss_mask, length, rows),
    )


def _cut(block: np.ndarray, length: int, rows: int) -> np.ndarray:
    """``[n, rows·length + 1]`` → ``[n·rows, length + 1]``, overlapping by one (one copy)."""
    view = np.lib.stride_tricks.sliding_window_view(block, length + 1, axis=1)[:, ::length]
    return np.ascontiguousarray(view[:, :rows]).reshape(block.shape[0] * rows, length + 1)
