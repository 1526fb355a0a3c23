"""The default packing rule's first stage: one best fit decreasing over the whole epoch, built
in steps per (item size, free space) pair (``streamload.plan._pack_levels``), against the
per-item reference of tests/plan/test_packing.py and the per-item loop, with and without a
cap (the refill after it: tests/plan/test_packing_refill.py)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from streamload.plan._pack_levels import _stable_order, pack_by_levels
from streamload.plan.packing import (
    SamplePlan,
    _pack_capped,
    _pack_in_python,
    pack_bound,
    pack_items,
)
from tests.plan.test_packing import capacities, reference_pack, samples_of

SETTINGS = settings(max_examples=200, deadline=None, derandomize=True)


def best_fit(sizes: np.ndarray, capacity: int, max_items: int | None = None) -> SamplePlan:
    """The whole-epoch best fit alone (``pack_items`` without ``group_size`` refills after
    it)."""
    return SamplePlan(*pack_by_levels(np.asarray(sizes, dtype=np.int64), capacity, max_items))


@st.composite
def epoch_inputs(draw: st.DrawFn) -> tuple[list[int], int]:
    """Lengths with many repeats (runs of one size cross several free-space levels) and
    edge sizes (1, capacity, around capacity / k)."""
    capacity = draw(capacities)
    divisor = draw(st.integers(1, 12))
    small = st.integers(1, max(1, capacity // divisor))
    near = st.sampled_from(sorted({1, capacity, max(1, capacity // 2), max(1, capacity // 3)}))
    pool = draw(st.lists(st.one_of(small, near, st.integers(1, capacity)), min_size=1, max_size=6))
    lengths = draw(st.lists(st.one_of(st.sampled_from(pool), small), max_size=120))
    return lengths, capacity


@SETTINGS
@given(epoch_inputs())
def test_whole_epoch_packing_equals_the_reference(case: tuple[list[int], int]) -> None:
    lengths, capacity = case
    plan = best_fit(np.array(lengths, dtype=np.int64), capacity)
    assert samples_of(plan) == reference_pack(lengths, capacity, max(1, len(lengths)))


@SETTINGS
@given(epoch_inputs(), st.integers(1, 6))
def test_whole_epoch_capped_packing_equals_the_reference(
    case: tuple[list[int], int], cap: int
) -> None:
    lengths, capacity = case
    plan = best_fit(np.array(lengths, dtype=np.int64), capacity, max_items=cap)
    assert samples_of(plan) == reference_pack(lengths, capacity, max(1, len(lengths)), cap)
    assert all(len(sample) <= cap for sample in samples_of(plan))


@pytest.mark.parametrize("capacity", [2, 7, 65, 2049, 8193])
@pytest.mark.parametrize("cap", [None, 1, 3, 40])
def test_many_items_equal_the_per_item_loop(capacity: int, cap: int | None) -> None:
    """Thousands of bins per level: blocks split and rejoined across many (size, level)
    steps give the per-item loop's plan exactly."""
    rng = np.random.default_rng(capacity)
    sizes = np.minimum(capacity, rng.lognormal(np.log(capacity / 5), 1.0, 30_000) + 1)
    sizes = sizes.astype(np.int64)
    plan = best_fit(sizes, capacity, max_items=cap)
    if cap is None:
        loop = _pack_in_python(sizes, capacity, sizes.size)
    else:
        loop = _pack_capped(sizes, capacity, sizes.size, cap)
    np.testing.assert_array_equal(plan.offsets, loop.offsets)
    np.testing.assert_array_equal(plan.items, loop.items)
    assert plan.num_samples >= pack_bound(sizes, capacity)


def test_worked_example_of_the_level_steps() -> None:
    """streamload/plan/_pack_levels.py's trace."""
    plan = best_fit(np.array([6, 6, 4, 4, 4, 3, 1]), 10)
    assert samples_of(plan) == [[0, 2], [1, 3], [4, 5, 6]]


def test_a_group_as_large_as_the_epoch_gives_the_whole_epoch_plan() -> None:
    rng = np.random.default_rng(3)
    sizes = rng.integers(1, 100, 5_000)
    whole = best_fit(sizes, 100)
    grouped = pack_items(sizes, 100, group_size=5_000)
    assert samples_of(whole) == samples_of(grouped)
    assert samples_of(pack_items(sizes, 100, group_size=4096)) != samples_of(whole)


def test_empty_and_invalid_whole_epoch_inputs() -> None:
    empty = pack_items(np.zeros(0, dtype=np.int64), 10)
    assert (empty.num_samples, empty.offsets.tolist()) == (0, [0])
    for lengths, capacity in [([0, 3], 5), ([6], 5), ([1], 0)]:
        with pytest.raises(ValueError):
            pack_items(np.array(lengths), capacity)
    with pytest.raises(ValueError, match="max_items"):
        pack_items(np.array([1]), 5, max_items=0)


def test_more_than_65535_bins_equal_the_per_item_loop() -> None:
    """Bin ids past uint16: the final order takes the sort-of-keys path."""
    rng = np.random.default_rng(11)
    sizes = np.concatenate([rng.integers(3, 5, 70_000), rng.integers(1, 3, 900)])
    rng.shuffle(sizes)
    plan = best_fit(sizes, 4)
    loop = _pack_in_python(sizes, 4, sizes.size)
    assert plan.num_samples > 2**16
    np.testing.assert_array_equal(plan.offsets, loop.offsets)
    np.testing.assert_array_equal(plan.items, loop.items)


@pytest.mark.parametrize("bound", [0, 5, 2**16 - 1, 2**16, 10**6, 2**61])
def test_stable_order_is_a_stable_argsort(bound: int) -> None:
    rng = np.random.default_rng(bound % 1000)
    keys = rng.integers(0, bound + 1, 3_000, dtype=np.int64)
    keys[::7] = keys[0]  # ties
    got = _stable_order(keys, bound)
    np.testing.assert_array_equal(got, np.argsort(keys, kind="stable"))
    assert got.dtype == np.int64
