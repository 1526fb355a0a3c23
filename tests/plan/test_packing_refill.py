"""The default packing rule's second stage: the refill of the bins best fit left with free
space (``streamload.plan._pack_refill``): never more samples than the best fit, every item
once, capacity and cap kept, deterministic, and tighter on log-normal documents."""

from __future__ import annotations

import hashlib

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from streamload.plan import _pack_refill
from streamload.plan._pack_levels import pack_by_levels
from streamload.plan._pack_refill import refill
from streamload.plan.packing import ALGORITHM, SamplePlan, pack_bound, pack_items, pad_items
from tests.plan.test_packing import lognormal_items, samples_of
from tests.plan.test_packing_epoch import epoch_inputs

SETTINGS = settings(max_examples=300, deadline=None, derandomize=True)


def check_plan(plan: SamplePlan, sizes: np.ndarray, capacity: int, cap: int | None) -> None:
    """Every item once, each sample non-empty, ascending, within capacity and cap."""
    samples = samples_of(plan)
    assert sorted(i for sample in samples for i in sample) == list(range(sizes.size))
    for sample in samples:
        assert sample and sample == sorted(sample)
        assert int(sizes[sample].sum()) <= capacity
        assert cap is None or len(sample) <= cap


@SETTINGS
@given(epoch_inputs(), st.one_of(st.none(), st.integers(1, 6)))
def test_refill_never_adds_a_sample_and_keeps_every_rule(
    case: tuple[list[int], int], cap: int | None
) -> None:
    lengths, capacity = case
    sizes = np.array(lengths, dtype=np.int64)
    best = pack_by_levels(sizes, capacity, cap)
    plan = pack_items(sizes, capacity, max_items=cap)
    check_plan(plan, sizes, capacity, cap)
    assert pack_bound(sizes, capacity) <= plan.num_samples <= best[0].size - 1
    again = pack_items(sizes.copy(), capacity, max_items=cap)
    assert samples_of(again) == samples_of(plan)
    if plan.num_samples < best[0].size - 1:  # the full bins best fit made come first, as were
        best_samples = samples_of(SamplePlan(*best))
        full = [s for s in best_samples if int(sizes[s].sum()) == capacity]
        assert samples_of(plan)[: len(full)] == full


@SETTINGS
@given(epoch_inputs(), st.one_of(st.none(), st.integers(1, 6)))
def test_refill_of_any_plan_never_adds_a_sample(
    case: tuple[list[int], int], cap: int | None
) -> None:
    """Whatever plan it starts from (here one item per sample: every bin has free space
    unless an item fills it), the refill keeps or lowers the count."""
    lengths, capacity = case
    sizes = np.array(lengths, dtype=np.int64)
    padded = pad_items(sizes.size)
    plan = SamplePlan(*refill(sizes, capacity, cap, padded.offsets, padded.items))
    check_plan(plan, sizes, capacity, cap)
    assert plan.num_samples <= padded.num_samples


def test_worked_example_of_the_refill() -> None:
    """Capacity 10, sizes 4 4 4 3 3 3 3 3 3: best fit gives [0 1] (2 free) [2 3 4] [5 6 7]
    (1 free) [8] (7 free), 4 samples for the bound 3. The refill takes the 10 free tokens'
    bins: item 0 (4), then item 1 (4) would leave 2 < 3, so item 5 (3), then item 6 closes
    the bin exactly; items 1 7 8 fill the next."""
    sizes = np.array([4, 4, 4, 3, 3, 3, 3, 3, 3])
    assert samples_of(SamplePlan(*pack_by_levels(sizes, 10))) == [[0, 1], [2, 3, 4], [5, 6, 7], [8]]
    assert samples_of(pack_items(sizes, 10)) == [[2, 3, 4], [0, 5, 6], [1, 7, 8]]


def test_no_spare_bin_keeps_the_best_fit_plan() -> None:
    sizes = np.array([6, 6, 4, 4, 4, 3, 1])  # 28 tokens in 3 bins of 10: 2 free in all
    best = pack_by_levels(sizes, 10)
    plan = pack_items(sizes, 10)
    assert plan.offsets is best[0] or np.array_equal(plan.offsets, best[0])
    np.testing.assert_array_equal(plan.items, best[1])


def test_refill_is_tighter_on_lognormal_documents() -> None:
    """30,000 log-normal documents at seq_len 2048: best fit 1 sample over the bound, the
    default at it; a fixed plan (a change of the rule must change ALGORITHM too)."""
    items = lognormal_items(2048)
    sizes, bound = items.lengths.astype(np.int64), pack_bound(items.lengths, 2049)
    best = SamplePlan(*pack_by_levels(sizes, 2049))
    plan = pack_items(items.lengths, 2049)
    check_plan(plan, sizes, 2049, None)
    digest = hashlib.sha256(plan.offsets.tobytes() + plan.items.tobytes()).hexdigest()
    assert ALGORITHM == "bfd-epoch-refill-v1"
    assert (best.num_samples - bound, plan.num_samples - bound, digest[:16]) == (
        1,
        0,
        "439d5486154b5aa1",
    )


def test_capped_refill_keeps_the_cap_on_lognormal_documents() -> None:
    items = lognormal_items(8192, documents=20_000)
    sizes = items.lengths.astype(np.int64)
    for cap in (4, 16):
        best = SamplePlan(*pack_by_levels(sizes, 8193, cap))
        plan = pack_items(sizes, 8193, max_items=cap)
        check_plan(plan, sizes, 8193, cap)
        assert plan.num_samples <= best.num_samples


def test_a_refill_over_budget_takes_the_emptiest_bins(monkeypatch: pytest.MonkeyPatch) -> None:
    """Past ``MAX_ITEMS`` items in bins with free space, only the emptiest bins are refilled:
    the plan still keeps every rule and never has more samples than best fit."""
    items = lognormal_items(2048)
    sizes = items.lengths.astype(np.int64)
    best = SamplePlan(*pack_by_levels(sizes, 2049))
    full = pack_items(sizes, 2049)
    monkeypatch.setattr(_pack_refill, "MAX_ITEMS", 500)
    bounded = pack_items(sizes, 2049)
    check_plan(bounded, sizes, 2049, None)
    assert full.num_samples <= bounded.num_samples <= best.num_samples
    monkeypatch.setattr(_pack_refill, "MAX_ITEMS", 0)
    assert samples_of(pack_items(sizes, 2049)) == samples_of(best)


def test_items_of_one_size_keep_the_best_fit_plan() -> None:
    """Every bin has free space (3 items of 3 in 10) but no refill can do better."""
    sizes = np.full(3_000, 3, dtype=np.int64)
    best = SamplePlan(*pack_by_levels(sizes, 10))
    assert samples_of(pack_items(sizes, 10)) == samples_of(best)
