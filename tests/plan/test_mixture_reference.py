"""plan/mixture.py's vectorized walk (``plan/_mixture_rule.py``) against the plain-Python
implementation it replaced (issue 31 item 5), kept here as the slow reference: the same
counts, sources and source-local ids for every batch, over random weights (zeros, ties, tiny
weights of huge denominators, up to 300 sources), global batch sizes, phases, resumed cursors
and batch size changes, on both paths of the walk (numpy for many candidates, Python for few)."""

from __future__ import annotations

import bisect
import functools
from dataclasses import dataclass
from unittest import mock

import numpy as np
import pytest
from hypothesis import assume, example, given, settings
from hypothesis import strategies as st

import streamload.plan._mixture_rule as rule_module
from streamload.plan._exact import integer_weights
from streamload.plan._mixture_rule import PhaseWalk, exact_rule
from streamload.plan.mixture import (
    MixtureCursor,
    Phase,
    advance_cursor,
    allocate_batches,
    cursor_bounds,
    effective_weights,
    replay_cursor,
)

PATHS = {"numpy": 1, "python": 10**9}
"""``VECTOR_MIN_CANDIDATES`` that forces each path of the walk."""


# -- the reference: plan/mixture.py before issue 31, verbatim but for names ----------------------
@dataclass(frozen=True)
class RefRule:
    nums: tuple[int, ...]
    total: int
    floors: tuple[int, ...]
    extra: int
    candidates: tuple[int, ...]
    global_batch: int

    def counts(self, phase_samples: int, since: list[int]) -> list[int]:
        counts = list(self.floors)
        if self.extra > 0:
            n, s, t = self.nums, self.total, phase_samples + self.global_batch
            order = sorted(self.candidates, key=lambda i: s * (since[i] + counts[i]) - n[i] * t)
            for i in order[: self.extra]:
                counts[i] += 1
        return counts


@functools.lru_cache(maxsize=256)
def ref_rule(weights: tuple[float, ...], global_batch: int) -> RefRule:
    nums, total = integer_weights(weights)
    exact = [n * global_batch for n in nums]
    floors = tuple(x // total for x in exact)
    candidates = tuple(i for i, x in enumerate(exact) if x % total)
    return RefRule(tuple(nums), total, floors, global_batch - sum(floors), candidates, global_batch)


def ref_walk(
    phases: tuple[Phase, ...],
    global_batch: int,
    cursor: MixtureCursor,
    count: int,
    rows: list[tuple[list[int], list[int]]] | None = None,
) -> MixtureCursor:
    starts = [p.start_step for p in phases]
    drawn, phase_drawn = list(cursor.drawn), list(cursor.phase_drawn)
    phase_step, step, end = cursor.phase_step, cursor.step, cursor.step + count
    while step < end:
        p = bisect.bisect_right(starts, step) - 1
        if starts[p] > phase_step:
            phase_step, phase_drawn = starts[p], list(drawn)
        stop = min(end, starts[p + 1]) if p + 1 < len(starts) else end
        rule = ref_rule(phases[p].weights, global_batch)
        since = [d - q for d, q in zip(drawn, phase_drawn, strict=True)]
        samples = sum(since)
        sources = range(len(since))
        for _ in range(stop - step):
            counts = rule.counts(samples, since)
            if rows is not None:
                rows.append(([q + a for q, a in zip(phase_drawn, since, strict=True)], counts))
            for i in sources:
                since[i] += counts[i]
            samples += global_batch
        drawn = [q + a for q, a in zip(phase_drawn, since, strict=True)]
        step = stop
    sizes = cursor.batch_sizes
    if count > 0 and (not sizes or sizes[-1][1] != global_batch):
        sizes = (*sizes, (cursor.step, global_batch))
    return MixtureCursor(end, tuple(drawn), phase_step, tuple(phase_drawn), sizes)


def ref_allocate(
    phases: tuple[Phase, ...], global_batch: int, cursor: MixtureCursor, count: int
) -> tuple[np.ndarray, np.ndarray, MixtureCursor]:
    rows: list[tuple[list[int], list[int]]] = []
    after = ref_walk(phases, global_batch, cursor, count, rows)
    num_sources = len(cursor.drawn)
    counts = np.array([c for _, c in rows], dtype=np.int64).reshape(count, num_sources)
    before = np.array([d for d, _ in rows], dtype=np.int64).reshape(count, num_sources)
    sources, local = ref_place(counts, before, global_batch)
    return sources, local, after


def ref_place(
    counts: np.ndarray, before: np.ndarray, global_batch: int
) -> tuple[np.ndarray, np.ndarray]:
    rows, num_sources = counts.shape
    flat = counts.ravel()
    row = np.repeat(np.repeat(np.arange(rows), num_sources), flat)
    source = np.repeat(np.tile(np.arange(num_sources), rows), flat)
    starts = np.cumsum(flat) - flat
    j = np.arange(flat.sum()) - np.repeat(starts, flat)
    key = (j + 0.5) / np.repeat(np.maximum(flat, 1), flat)
    order = np.lexsort((source, key, row))
    local = before[row, source] + j
    return (
        source[order].astype(np.int16).reshape(rows, global_batch),
        local[order].reshape(rows, global_batch),
    )


# -- random mixtures ------------------------------------------------------------------------------
raw_weight = st.one_of(
    st.just(0.0),
    st.floats(0.01, 10.0),
    st.sampled_from([1.0, 2.0, 3.0, 0.5]),  # exact ties
    st.floats(1e-9, 1e-6),  # tiny weights: denominators far beyond int64
)


@st.composite
def mixtures(draw: st.DrawFn) -> tuple[tuple[Phase, ...], list[tuple[int, int]]]:
    """(phases, [(global batch, batches)] runs: a resume may change the global batch)."""
    many = draw(st.booleans())
    num_sources = draw(st.integers(60, 300) if many else st.integers(1, 8))
    starts = [0, *np.cumsum(draw(st.lists(st.integers(1, 6), max_size=2))).tolist()]
    phases = []
    for start in starts:
        if draw(st.booleans()):
            raw = draw(st.lists(raw_weight, min_size=num_sources, max_size=num_sources))
        else:  # a few distinct values repeated: many exact ties
            values = draw(st.lists(raw_weight, min_size=1, max_size=3))
            raw = [values[i % len(values)] for i in range(num_sources)]
        assume(sum(raw) > 0)
        weights = effective_weights(np.array(raw), draw(st.sampled_from([1.0, 1.0, 2.0])))
        phases.append(Phase(int(start), tuple(weights.tolist())))
    runs = draw(st.lists(st.tuples(st.integers(1, 300), st.integers(0, 9)), min_size=1, max_size=3))
    return tuple(phases), runs


@pytest.mark.parametrize("path", sorted(PATHS))
@settings(max_examples=60, deadline=None)
@given(mixtures())
def test_allocation_equals_the_reference(
    path: str, case: tuple[tuple[Phase, ...], list[tuple[int, int]]]
) -> None:
    phases, runs = case
    cursor = ref_cursor = MixtureCursor.start(len(phases[0].weights))
    with mock.patch.object(rule_module, "VECTOR_MIN_CANDIDATES", PATHS[path]):
        for big, count in runs:
            sources, local, after = allocate_batches(phases, big, cursor, count)
            want_sources, want_local, want_after = ref_allocate(phases, big, ref_cursor, count)
            assert np.array_equal(sources, want_sources)
            assert sources.dtype == want_sources.dtype and local.dtype == want_local.dtype
            assert np.array_equal(local, want_local)
            assert after == want_after
            assert advance_cursor(phases, big, cursor, count) == want_after
            cursor = ref_cursor = want_after
        replayed = replay_cursor(phases, len(cursor.drawn), cursor.batch_sizes, cursor.step)
        assert replayed == cursor


@pytest.mark.parametrize("path", sorted(PATHS))
@settings(max_examples=40, deadline=None)
@given(
    st.lists(raw_weight, min_size=1, max_size=200).filter(lambda w: sum(w) > 0),
    st.integers(1, 512),
    st.one_of(st.integers(0, 10**6), st.integers(2**51, 2**53 + 2**20)),
    st.integers(1, 6),
)
@example([1.0] * 50 + [2.0] * 50, 64, 2**52 - 10, 3)  # crosses 2**52 samples on the numpy path
def test_a_walk_from_far_into_a_phase_equals_the_rule(
    path: str, raw: list[float], big: int, far: int, count: int
) -> None:
    """From any counts (also beyond 2**52 samples, where floats no longer hold integers):
    each batch is the reference rule's decision."""
    weights = tuple(effective_weights(np.array(raw)).tolist())
    since = [int(far * w) for w in weights]
    walk_since = np.array(since, dtype=np.int64)
    with mock.patch.object(rule_module, "VECTOR_MIN_CANDIDATES", PATHS[path]):
        rows = PhaseWalk(exact_rule(weights, big), walk_since).block(count)
    rule, samples = ref_rule(weights, big), sum(since)
    for row in rows.tolist():
        want = rule.counts(samples, since)
        assert row == want
        since = [s + c for s, c in zip(since, want, strict=True)]
        samples += big


def test_the_numpy_path_at_a_thousand_sources_equals_the_reference() -> None:
    """The benchmark's shape (1,000 sources of random weights, B = 64): long enough that
    near-ties go to the exact keys."""
    weights = effective_weights(np.random.default_rng(7).random(1000) * 10 + 0.1)
    phases = (Phase(0, tuple(weights.tolist())), Phase(150, tuple(weights[::-1].tolist())))
    start = MixtureCursor.start(1000)
    sources, local, after = allocate_batches(phases, 64, start, 300)
    want_sources, want_local, want_after = ref_allocate(phases, 64, start, 300)
    assert np.array_equal(sources, want_sources) and np.array_equal(local, want_local)
    assert after == want_after


@settings(max_examples=60, deadline=None)
@given(mixtures())
def test_every_cursor_lies_within_its_bounds(
    case: tuple[tuple[Phase, ...], list[tuple[int, int]]],
) -> None:
    """What a long position is checked against at load holds for every real cursor."""
    phases, runs = case
    cursor = MixtureCursor.start(len(phases[0].weights))
    for big, count in runs:
        cursor = advance_cursor(phases, big, cursor, count)
        bounds = cursor_bounds(phases, len(cursor.drawn), cursor.batch_sizes, cursor.step)
        drawn, phase = np.array(cursor.drawn), np.array(cursor.phase_drawn)
        assert bounds.phase_step == cursor.phase_step
        assert int(phase.sum()) == bounds.before and int((drawn - phase).sum()) == bounds.since
        assert (bounds.phase_low <= phase).all() and (phase <= bounds.phase_high).all()
        assert (bounds.since_low <= drawn - phase).all()
        assert (drawn - phase <= bounds.since_high).all()
