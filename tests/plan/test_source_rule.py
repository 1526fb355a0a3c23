"""Per-source batches (``[mixture] batching = "per_source"``): the quota rule against a plain
Fraction reference, its shares over every prefix, its bounds, and the mixture functions that
use it (allocation, replay, bounds, the counts of ``streamload plan``)."""

from __future__ import annotations

import itertools
from fractions import Fraction

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from streamload.plan import _source_rule
from streamload.plan._exact import integer_weights
from streamload.plan._source_rule import SourceWalk, share_bounds
from streamload.plan.mixture import (
    MixtureCursor,
    Phase,
    advance_cursor,
    allocate_batches,
    cursor_bounds,
    replay_cursor,
)
from streamload.plan.mixture_counts import count_blocks

PROPERTY = settings(max_examples=60, deadline=None)
raw_weight = st.one_of(st.just(0.0), st.sampled_from([0.5, 1.0, 2.0, 1 / 3]), st.floats(0.01, 50.0))


@st.composite
def weight_sets(draw: st.DrawFn, most: int = 6) -> tuple[float, ...]:
    raw = draw(st.lists(raw_weight, min_size=1, max_size=most))
    if not any(raw):
        raw[0] = 1.0
    w = np.array(raw) / sum(raw)
    return tuple(w.tolist())


def reference(weights: tuple[float, ...], sizes: list[int], since: list[int]) -> list[int]:
    """The rule written plainly: among sources under their upper quota, the earliest due."""
    nums, total = integer_weights(weights)
    drawn, out = list(since), []
    for size in sizes:
        t = sum(drawn)
        under = [i for i, n in enumerate(nums) if n and drawn[i] * total < n * (t + size)]
        chosen = min(under, key=lambda i: (Fraction(drawn[i] + size, nums[i]), i))
        out.append(chosen)
        drawn[chosen] += size
    return out


def test_the_worked_example() -> None:
    walk = SourceWalk((0.5, 0.3, 0.2), 1, np.zeros(3, np.int64))
    assert walk.choices(10).tolist() == [0, 1, 0, 2, 0, 1, 0, 1, 0, 2]
    assert walk.since.tolist() == [5, 3, 2]


@PROPERTY
@given(weight_sets(), st.integers(1, 9), st.integers(0, 400), st.integers(0, 5))
def test_the_walk_is_the_rule(weights: tuple[float, ...], size: int, steps: int, seed: int) -> None:
    """From any counts (a resume with another batch size leaves any), guess-and-check gives
    exactly the plain rule's choices."""
    rng = np.random.default_rng(seed)
    since = [0] * len(weights) if seed == 0 else rng.integers(0, 50, len(weights)).tolist()
    walk = SourceWalk(weights, size, np.array(since, np.int64))
    assert walk.choices(steps).tolist() == reference(weights, [size] * steps, since)


@PROPERTY
@given(weight_sets(), st.integers(1, 9), st.integers(1, 300))
def test_every_prefix_holds_each_source_within_one_step_of_its_share(
    weights: tuple[float, ...], size: int, steps: int
) -> None:
    nums, total = integer_weights(weights)
    chosen = SourceWalk(weights, size, np.zeros(len(weights), np.int64)).choices(steps)
    counts = np.cumsum(np.eye(len(weights), dtype=np.int64)[chosen], axis=0)
    for n, row in enumerate(counts.tolist(), start=1):
        for i, c in enumerate(row):
            assert abs(Fraction(nums[i] * n, total) - c) < 1, (n, i, c)


def test_the_plain_largest_deficit_rule_would_not() -> None:
    """Why the quota rule: the largest deficit lets the last equal weight fall 1.25 behind."""
    raw = [68, 3, 1000, 68, 3, 1000]
    weights = tuple((np.array(raw) / sum(raw)).tolist())
    nums, total = integer_weights(weights)
    counts, worst = [0] * 6, Fraction(0)
    for n in range(1, 300):
        deficit = [Fraction(nums[i] * n, total) - counts[i] for i in range(6)]
        counts[deficit.index(max(deficit))] += 1
        worst = max(worst, *(Fraction(nums[i] * n, total) - counts[i] for i in range(6)))
    assert worst > 1
    chosen = SourceWalk(weights, 1, np.zeros(6, np.int64)).choices(299)
    quota = np.cumsum(np.eye(6, dtype=np.int64)[chosen], axis=0)
    ideal = np.outer(np.arange(1, 300), np.array(weights))
    assert np.abs(quota - ideal).max() < 1


@PROPERTY
@given(weight_sets(), st.lists(st.integers(1, 9), min_size=1, max_size=120))
def test_share_bounds_hold_with_changing_batch_sizes(
    weights: tuple[float, ...], sizes: list[int]
) -> None:
    chosen = reference(weights, sizes, [0] * len(weights))
    drawn = np.zeros(len(weights), np.int64)
    for k, (size, source) in enumerate(zip(sizes, chosen, strict=True), start=1):
        drawn[source] += size
        low, high = share_bounds(weights, sum(sizes[:k]), set(sizes[:k]))
        assert ((low <= drawn) & (drawn <= high)).all(), (k, drawn, low, high)


@pytest.mark.parametrize(
    "weights", [(0.7, 0.2, 0.1), (0.45, 0.35, 0.2), (1 / 3, 1 / 3, 1 / 3), (0.25,) * 4]
)
def test_whole_periods_are_skipped_exactly(
    weights: tuple[float, ...], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A period of T steps (every source exactly its share) is repeated, not walked; the
    result equals the step-by-step walk."""
    fast = SourceWalk(weights, 3, np.zeros(len(weights), np.int64))
    fast.skip(100_003)
    monkeypatch.setattr(_source_rule, "_MAX_PERIOD", 0)
    slow = SourceWalk(weights, 3, np.zeros(len(weights), np.int64))
    assert (
        slow.choices(5000).tolist()
        == SourceWalk(weights, 3, np.zeros(len(weights), np.int64)).choices(5000).tolist()
    )
    slow.skip(100_003 - 5000)
    assert fast.since.tolist() == slow.since.tolist()


def phases_of(draw: st.DrawFn) -> tuple[Phase, ...]:
    count = draw(st.integers(2, 4))
    starts = sorted(set(draw(st.lists(st.integers(1, 40), max_size=2))))
    out = []
    for start in [0, *starts]:
        raw = draw(st.lists(raw_weight, min_size=count, max_size=count))
        if not any(raw):
            raw[-1] = 1.0
        out.append(Phase(start, tuple((np.array(raw) / sum(raw)).tolist()), True))
    return tuple(out)


@st.composite
def runs(draw: st.DrawFn) -> tuple[tuple[Phase, ...], tuple[tuple[int, int], ...], int]:
    phases = phases_of(draw)
    step = draw(st.integers(1, 80))
    firsts = sorted({0, *draw(st.lists(st.integers(1, step - 1), max_size=2))} if step > 1 else {0})
    sizes, last = [], None
    for first in firsts:
        size = draw(st.integers(1, 12).filter(lambda s, last=last: s != last))
        sizes.append((first, size))
        last = size
    return phases, tuple(sizes), step


@PROPERTY
@given(runs())
def test_allocation_replay_and_bounds_agree(
    run: tuple[tuple[Phase, ...], tuple[tuple[int, int], ...], int],
) -> None:
    """Every step from one source; the phases' counts restart at their starts; replay equals
    the walk; the walk lies in the O(sources) bounds."""
    phases, sizes, step = run
    cursor = MixtureCursor.start(len(phases[0].weights))
    ends = [first for first, _ in sizes[1:]] + [step]
    for (first, size), end in zip(sizes, ends, strict=True):
        sources, local, after = allocate_batches(phases, size, cursor, end - first)
        assert (sources == sources[:, :1]).all(), "a step holds several sources"
        assert after == advance_cursor(phases, size, cursor, end - first)
        drawn = np.array(cursor.drawn)[sources[:, 0]]
        assert (local[:, 0] >= drawn).all()
        cursor = after
    assert cursor == replay_cursor(phases, len(phases[0].weights), sizes, step)
    bounds = cursor_bounds(phases, len(phases[0].weights), sizes, step)
    phase_drawn, since = np.array(cursor.phase_drawn), np.array(cursor.drawn) - cursor.phase_drawn
    assert bounds.phase_step == cursor.phase_step
    assert (bounds.phase_low <= phase_drawn).all() and (phase_drawn <= bounds.phase_high).all()
    assert (bounds.since_low <= since).all() and (since <= bounds.since_high).all()
    assert (bounds.before, bounds.since) == (int(phase_drawn.sum()), int(since.sum()))


@PROPERTY
@given(runs())
def test_plan_counts_equal_the_allocation(
    run: tuple[tuple[Phase, ...], tuple[tuple[int, int], ...], int],
) -> None:
    phases, _, step = run
    size = 5
    sources, _, _ = allocate_batches(
        phases, size, MixtureCursor.start(len(phases[0].weights)), step
    )
    counts = np.concatenate(list(count_blocks(phases, size, step, block=7)))
    expected = np.stack([np.bincount(row, minlength=len(phases[0].weights)) for row in sources])
    assert np.array_equal(counts, expected)


def test_random_access_far_into_a_phase_is_fast_and_consistent() -> None:
    """``advance_cursor`` to step 10⁶ (whole periods skipped) equals walking in pieces."""
    phases = (Phase(0, (0.7, 0.2, 0.1), True), Phase(400_000, (0.45, 0.35, 0.2), True))
    start = MixtureCursor.start(3)
    far = advance_cursor(phases, 8, start, 1_000_000)
    pieces = start
    for count in itertools.repeat(100_000, 10):
        pieces = advance_cursor(phases, 8, pieces, count)
    assert far == pieces
    assert far.drawn == (2_240_000 + 2_160_000, 640_000 + 1_680_000, 320_000 + 960_000)


@PROPERTY
@given(weight_sets(), st.integers(1, 9), st.integers(0, 300))
def test_the_float_path_decides_as_the_integers(
    weights: tuple[float, ...], size: int, steps: int
) -> None:
    """Where integer keys would outgrow int64, floats decide the clear steps and exact
    integers the rest (ties of equal weights included): the same choices."""
    exact = SourceWalk(weights, size, np.zeros(len(weights), np.int64)).choices(steps)
    original = _source_rule._INT64_SAFE
    try:
        _source_rule._INT64_SAFE = 0
        floats = SourceWalk(weights, size, np.zeros(len(weights), np.int64)).choices(steps)
    finally:
        _source_rule._INT64_SAFE = original
    assert (
        floats.tolist() == exact.tolist() == reference(weights, [size] * steps, [0] * len(weights))
    )
