"""A chunk's windows cut into rows (sequence-length warm-up), and where a step stands."""

from __future__ import annotations

import numpy as np

from streamload.plan.seq_len import SeqLenSchedule
from streamload.streams.chunks import ChunkPlan, TokenChunk
from streamload.streams.cursor import StreamCursor
from streamload.streams.seq_len import batches_to_switch, cut_chunk, schedule_step


def chunk(lengths: np.ndarray | None = None) -> TokenChunk:
    """Two windows of 8 inputs (tokens = position + 100 · window), one batch of 2."""
    ids = np.array([[5, 9]], dtype=np.int64)
    plan = ChunkPlan(0, ids, np.array([[0, 1]], np.int16), ids + 1, row_length=4)
    tokens = np.arange(9)[None, :] + 100 * np.arange(2)[:, None]
    starts = np.array([40, 72], dtype=np.int64)
    doc_starts = np.zeros((2, 9), dtype=bool)
    doc_starts[0, 4] = doc_starts[1, 6] = True
    loss = (tokens % 3 != 0).astype(np.uint8)
    return TokenChunk(
        plan,
        tokens,
        starts,
        doc_starts,
        skipped_rows=np.array([1]),
        lengths=lengths,
        loss_mask=loss,
    )


def test_each_window_becomes_consecutive_rows_overlapping_by_one() -> None:
    whole = chunk(np.array([9, 6]))
    cut = cut_chunk(whole, 4)
    assert cut.tokens.tolist() == [
        [0, 1, 2, 3, 4],
        [4, 5, 6, 7, 8],
        [100, 101, 102, 103, 104],
        [104, 105, 106, 107, 108],
    ]
    assert cut.starts.tolist() == [40, 44, 72, 76]
    assert cut.lengths is not None and cut.lengths.tolist() == [5, 5, 5, 2]
    assert cut.skipped_rows.tolist() == [2, 3]
    assert cut.doc_starts is not None and np.flatnonzero(cut.doc_starts).tolist() == [4, 5, 17]
    assert cut.loss_mask is not None
    assert np.array_equal(cut.loss_mask, (cut.tokens % 3 != 0).astype(np.uint8))
    assert cut.plan.sample_ids.tolist() == [[5, 5, 9, 9]]
    assert cut.plan.sources.tolist() == [[0, 0, 1, 1]]
    assert cut.plan.local_ids.tolist() == [[6, 6, 10, 10]]


def test_a_row_past_the_data_holds_none() -> None:
    cut = cut_chunk(chunk(np.array([3, 9])), 2)
    assert cut.lengths is not None and cut.lengths.tolist() == [3, 1, 0, 0, 3, 3, 3, 3]


def test_steps_count_whole_passes_and_stop_at_a_switch() -> None:
    schedule = SeqLenSchedule(8, ((0, 2), (7, 4)), 4)
    # passes of 22 windows hold 5 steps of 4; pass 1 sample 8 is step 5 + 2 = 7
    assert schedule_step(schedule, StreamCursor(1, 8, None), 22) == 7
    assert schedule_step(schedule, StreamCursor(0, 8, None), None) == 2
    # step 1 half done (batches of 2, steps of 4): 22 samples = 11 batches to step 7
    assert batches_to_switch(schedule, StreamCursor(0, 6, None), 22, 2) == (1, 11)
    assert batches_to_switch(schedule, StreamCursor(1, 8, None), 22, 2) == (7, None)
