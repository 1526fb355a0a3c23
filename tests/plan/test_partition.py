"""Rank split: every global batch is a contiguous run of samples, cut in rank order."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from streamload.plan.partition import batch_sample_ids, chunk_sample_ids, num_batches, rank_share

SETTINGS = settings(max_examples=50, deadline=None)

world_sizes = st.integers(1, 16)
batch_sizes = st.integers(1, 16)
starts = st.integers(0, 10_000)


@SETTINGS
@given(world=world_sizes, b=batch_sizes, start=starts, k=st.integers(0, 1000))
def test_ranks_tile_each_global_batch(world: int, b: int, start: int, k: int) -> None:
    big_b = world * b
    parts = [batch_sample_ids(start, np.array([k]), big_b, world, r) for r in range(world)]
    assert all(p.shape == (1, b) and p.dtype == np.int64 for p in parts)
    joined = np.concatenate([p[0] for p in parts])
    np.testing.assert_array_equal(joined, np.arange(start + k * big_b, start + (k + 1) * big_b))


@SETTINGS
@given(
    world=world_sizes,
    b=batch_sizes,
    start=starts,
    batches=st.lists(st.integers(0, 500), min_size=1, max_size=20),
)
def test_many_batches_at_once(world: int, b: int, start: int, batches: list[int]) -> None:
    big_b = world * b
    for r in range(world):
        block = batch_sample_ids(start, np.array(batches), big_b, world, r)
        assert block.shape == (len(batches), b)
        for row, k in zip(block, batches, strict=True):
            first = start + k * big_b + r * b
            assert row.tolist() == list(range(first, first + b))


@SETTINGS
@given(world=world_sizes, b=batch_sizes, start=st.integers(0, 300), length=st.integers(0, 800))
def test_a_pass_is_covered_once(world: int, b: int, start: int, length: int) -> None:
    """All ranks over all whole batches: each sample of [start, start + k*B) exactly once."""
    big_b = world * b
    count = num_batches(start + length, start, big_b)
    assert count == length // big_b
    seen = np.concatenate(
        [chunk_sample_ids(start, 0, count, big_b, world, r).ravel() for r in range(world)]
    )
    np.testing.assert_array_equal(np.sort(seen), np.arange(start, start + count * big_b))
    assert np.unique(seen).size == seen.size
    # the dropped remainder is smaller than a global batch
    assert 0 <= length - count * big_b < big_b


@SETTINGS
@given(
    world=world_sizes,
    b=batch_sizes,
    start=starts,
    first=st.integers(0, 200),
    count=st.integers(0, 30),
)
def test_chunk_is_consecutive_batches(
    world: int, b: int, start: int, first: int, count: int
) -> None:
    big_b = world * b
    for r in range(world):
        chunk = chunk_sample_ids(start, first, count, big_b, world, r)
        batches = np.arange(first, first + count)
        np.testing.assert_array_equal(chunk, batch_sample_ids(start, batches, big_b, world, r))
        assert chunk.shape == (count, b)


@SETTINGS
@given(world=world_sizes, b=batch_sizes)
def test_rank_share(world: int, b: int) -> None:
    shares = [rank_share(world * b, world, r) for r in range(world)]
    assert shares == [(r * b, b) for r in range(world)]


@pytest.mark.parametrize(
    ("pass_length", "start", "global_batch", "expected"),
    [(10, 0, 4, 2), (10, 8, 4, 0), (10, 10, 4, 0), (10, 12, 4, 0), (8, 0, 4, 2), (3, 0, 4, 0)],
)
def test_num_batches(pass_length: int, start: int, global_batch: int, expected: int) -> None:
    assert num_batches(pass_length, start, global_batch) == expected


def test_docstring_example() -> None:
    """g0 = 0, world 2, b = 2 (the worked example of ``plan/partition.py``)."""
    batches = np.array([0, 1])
    assert batch_sample_ids(0, batches, 4, 2, 0).tolist() == [[0, 1], [4, 5]]
    assert batch_sample_ids(0, batches, 4, 2, 1).tolist() == [[2, 3], [6, 7]]


@SETTINGS
@given(b=batch_sizes, start=st.integers(0, 100), k=st.integers(0, 50))
def test_world_size_does_not_change_global_batches(b: int, start: int, k: int) -> None:
    """Global batch k of B samples is the same set of ids whether 1, 2 or 4 ranks share it."""
    big_b = 4 * b
    single = batch_sample_ids(start, np.array([k]), big_b, 1, 0)[0]
    for world in (2, 4):
        parts = [batch_sample_ids(start, np.array([k]), big_b, world, r)[0] for r in range(world)]
        np.testing.assert_array_equal(np.concatenate(parts), single)
