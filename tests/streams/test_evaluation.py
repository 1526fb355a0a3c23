"""The evaluation pass's planning (``streams/evaluation.py``), a pure function of the cursor:
any world size, batch size and chunk size gives every sample once and equal batch counts."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from streamload.streams.evaluation import evaluation_stream

SETTINGS = settings(max_examples=120, deadline=None, derandomize=True)


@pytest.fixture(scope="module")
def streams(make_corpus: Callable) -> list[Any]:
    """One source, and a mixture of two (evaluated one after the other)."""
    a, b = make_corpus([500, 300], seed=5), make_corpus([260], seed=6)
    one = a.config(sampling={"split": "7,3"})
    two = a.config(
        global_batch_size=8,
        sampling={"split": "7,3"},
        sources=[
            {"name": "a", "path": str(a.folder), "dtype": a.dtype, "weight": 1.0},
            {"name": "b", "path": str(b.folder), "dtype": b.dtype, "weight": 3.0},
        ],
    )
    return [evaluation_stream(one, "valid"), evaluation_stream(two, "valid")]


def plan_rank(stream: Any, world: int, rank: int, b: int, chunk: int) -> tuple[list, list, list]:
    """Every batch one rank plans in one pass: ids, padding flags, sources (per batch)."""
    ids, padding, sources = [], [], []
    cursor = stream.start()
    while (planned := stream.plan_chunk(cursor, chunk, world * b, world, rank)) is not None:
        plan, cursor = planned
        ids += list(plan.sample_ids)
        padding += list(plan.padding)
        sources += list(plan.sources)
    assert cursor.sample == stream.pass_length  # the pass ends exactly at P
    return ids, padding, sources


@SETTINGS
@given(
    which=st.integers(0, 1),
    world=st.integers(1, 4),
    b=st.integers(1, 7),
    chunk=st.integers(1, 5),
)
def test_every_sample_once_and_equal_batches(
    streams: list[Any], which: int, world: int, b: int, chunk: int
) -> None:
    stream = streams[which]
    length = stream.pass_length
    ranks = [plan_rank(stream, world, r, b, chunk) for r in range(world)]
    assert {len(ids) for ids, _, _ in ranks} == {-(-length // (world * b))}
    real: list[int] = []
    for step in range(len(ranks[0][0])):  # global batch order: ranks in turn
        for ids, padding, _ in ranks:
            real += ids[step][~padding[step]].tolist()
            assert (ids[step][padding[step]] == length - 1).all()  # padding repeats P - 1
    assert real == list(range(length))
    src, local = stream.locate(0, np.arange(length))
    firsts = np.searchsorted(src, np.arange(len(stream.sources)))
    assert (local == np.arange(length) - firsts[src]).all()  # sources one after another
