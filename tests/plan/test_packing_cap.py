"""``pack_items(..., max_items=k)``: best fit decreasing with at most ``k`` items per sample
(grain's ``max_sequences_per_bin``), against a brute-force reference."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from streamload.plan.packing import SamplePlan, pack_items
from tests.plan.test_packing import reference_pack

SETTINGS = settings(max_examples=150, deadline=None, derandomize=True)

capacities = st.sampled_from([1, 2, 3, 5, 63, 64, 65, 100, 4097])


def reference_capped(
    lengths: list[int], capacity: int, group_size: int, cap: int
) -> list[list[int]]:
    """The reference best fit decreasing with a cap (tests/plan/test_packing.py's)."""
    return reference_pack(lengths, capacity, group_size, cap)


def samples_of(plan: SamplePlan) -> list[list[int]]:
    bounds = plan.offsets.tolist()
    return [plan.items[begin:end].tolist() for begin, end in itertools.pairwise(bounds)]


@st.composite
def capped_inputs(draw: st.DrawFn) -> tuple[list[int], int, int, int]:
    capacity = draw(capacities)
    small = st.integers(1, max(1, capacity // draw(st.integers(1, 12))))
    lengths = draw(st.lists(st.one_of(small, st.integers(1, capacity)), max_size=80))
    return lengths, capacity, draw(st.integers(1, 90)), draw(st.integers(1, 6))


@SETTINGS
@given(capped_inputs())
def test_capped_packing_equals_the_reference(case: tuple[list[int], int, int, int]) -> None:
    lengths, capacity, group_size, cap = case
    plan = pack_items(np.array(lengths, dtype=np.int64), capacity, group_size, max_items=cap)
    assert samples_of(plan) == reference_capped(lengths, capacity, group_size, cap)


@SETTINGS
@given(capped_inputs())
def test_no_sample_holds_more_than_the_cap_and_every_item_once(
    case: tuple[list[int], int, int, int],
) -> None:
    lengths, capacity, group_size, cap = case
    sizes = np.array(lengths, dtype=np.int64)
    plan = pack_items(sizes, capacity, group_size, max_items=cap)
    counts = np.diff(plan.offsets)
    assert np.all(counts >= 1) and np.all(counts <= cap)
    np.testing.assert_array_equal(np.sort(plan.items), np.arange(sizes.size))
    for sample in samples_of(plan):
        assert sample == sorted(sample) and sizes[sample].sum() <= capacity
    uncapped = pack_items(sizes, capacity, group_size)
    assert plan.num_samples >= uncapped.num_samples  # a cap never saves a sample


@SETTINGS
@given(capped_inputs())
def test_a_cap_that_never_binds_gives_the_uncapped_plan(
    case: tuple[list[int], int, int, int],
) -> None:
    lengths, capacity, group_size, _ = case
    sizes = np.array(lengths, dtype=np.int64)
    plain = pack_items(sizes, capacity, group_size)
    loose = pack_items(sizes, capacity, group_size, max_items=max(1, sizes.size))
    np.testing.assert_array_equal(loose.offsets, plain.offsets)
    np.testing.assert_array_equal(loose.items, plain.items)


def test_a_cap_of_one_is_one_item_per_sample_and_two_pairs_items() -> None:
    sizes = np.array([1, 1, 1, 1, 1], dtype=np.int64)
    assert samples_of(pack_items(sizes, 5, max_items=1)) == [[0], [1], [2], [3], [4]]
    assert samples_of(pack_items(sizes, 5, max_items=2)) == [[0, 1], [2, 3], [4]]
    assert samples_of(pack_items(sizes, 5)) == [[0, 1, 2, 3, 4]]


@pytest.mark.parametrize("cap", [0, -3])
def test_a_cap_below_one_is_refused(cap: int) -> None:
    with pytest.raises(ValueError, match=f"max_items {cap}"):
        pack_items(np.array([1, 2]), 5, max_items=cap)
