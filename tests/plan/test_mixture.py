"""plan/mixture.py: per-batch allocation, cumulative shares, interleaving, phases, temperature.

Every property is checked on the allocation itself (``allocate_batches``), over 1–6 sources
with zero weights, global batches of 1–128 samples and schedules of several phases.
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from streamload.plan.mixture import (
    MixtureCursor,
    Phase,
    advance_cursor,
    allocate_batches,
    batch_counts,
    effective_weights,
    interleave,
    phase_at,
    replay_cursor,
)

EPS = 1e-9
Case = tuple[tuple[Phase, ...], int, int]
PROPERTY = settings(max_examples=50, deadline=None)

raw_weight = st.one_of(st.just(0.0), st.floats(0.01, 10.0), st.sampled_from([1.0, 2.0, 3.0]))


@st.composite
def schedules(draw: st.DrawFn, max_sources: int = 6) -> Case:
    """(phases, global batch, steps): phases start at 0 and strictly increase."""
    num_sources = draw(st.integers(1, max_sources))
    global_batch = draw(st.integers(1, 128))
    gaps = draw(st.lists(st.integers(1, 8), min_size=0, max_size=3))
    starts = [0, *np.cumsum(gaps).tolist()]
    phases = []
    for start in starts:
        raw = draw(st.lists(raw_weight, min_size=num_sources, max_size=num_sources))
        assume(sum(raw) > 0)
        phases.append(Phase(int(start), tuple(effective_weights(np.array(raw)).tolist())))
    steps = starts[-1] + draw(st.integers(1, 12))
    return tuple(phases), global_batch, steps


def counts_of(sources: np.ndarray, num_sources: int) -> np.ndarray:
    """Samples per source in each global batch ``[steps, S]``."""
    return np.stack([np.bincount(row, minlength=num_sources) for row in sources])


def phase_weights(phases: tuple[Phase, ...], step: int) -> np.ndarray:
    return np.asarray(phases[phase_at(phases, step)].weights)


def allocate(
    phases: tuple[Phase, ...], global_batch: int, steps: int
) -> tuple[np.ndarray, np.ndarray, MixtureCursor]:
    start = MixtureCursor.start(len(phases[0].weights))
    return allocate_batches(phases, global_batch, start, steps)


@PROPERTY
@given(schedules())
def test_each_batch_gives_every_source_floor_or_ceil_of_its_share(case: Case) -> None:
    phases, big, steps = case
    sources, _, _ = allocate(phases, big, steps)
    assert sources.shape == (steps, big)
    counts = counts_of(sources, len(phases[0].weights))
    for step, row in enumerate(counts):
        exact = phase_weights(phases, step) * big
        assert int(row.sum()) == big
        assert (row >= np.floor(exact)).all() and (row <= np.ceil(exact)).all(), (step, row, exact)
        assert np.array_equal(sources[step], interleave(row)), "each batch is interleaved"


@PROPERTY
@given(schedules())
def test_cumulative_count_per_phase_stays_near_the_weight(case: Case) -> None:
    """Each source's count since its phase began stays near its share: the largest-deficit
    rule keeps it within about one sample, but not always within one (a search found 1.145
    with 7 sources and 1.053 with 5, ``weights [1, 1, 0.1, 0.1, 0.972…], B = 19`` at step
    49: issue 31), so the bound asserted is two."""
    phases, big, steps = case
    sources, _, _ = allocate(phases, big, steps)
    counts = counts_of(sources, len(phases[0].weights))
    for index, phase in enumerate(phases):
        stop = phases[index + 1].start_step if index + 1 < len(phases) else steps
        rows = counts[phase.start_step : stop]
        if rows.size == 0:
            continue
        drawn = np.cumsum(rows, axis=0)
        expected = np.asarray(phase.weights)[None] * big * np.arange(1, len(rows) + 1)[:, None]
        error = np.abs(drawn - expected)
        assert error.max() <= 2 + EPS, (index, drawn.tolist(), expected.tolist())


@PROPERTY
@given(schedules())
def test_a_zero_weight_never_draws(case: Case) -> None:
    phases, big, steps = case
    sources, _, _ = allocate(phases, big, steps)
    for step, row in enumerate(sources):
        zero = np.flatnonzero(phase_weights(phases, step) == 0)
        assert not np.isin(row, zero).any(), (step, row, zero)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(0, 40), min_size=1, max_size=6).filter(lambda c: sum(c) > 0))
def test_interleave_is_a_permutation_with_even_spread(counts_list: list[int]) -> None:
    counts = np.array(counts_list, dtype=np.int64)
    big, present = int(counts.sum()), int((counts > 0).sum())
    order = interleave(counts)
    assert order.shape == (big,)
    assert np.bincount(order, minlength=counts.size).tolist() == counts_list
    prefix = np.arange(1, big + 1)
    for s, c in enumerate(counts_list):
        # k-th sample of s sits near fraction (k + 1/2)/c: in every prefix of m positions,
        # s holds m*c/B samples up to 1/2 from its own rounding and S*c/(2B) from the others'.
        drift = np.abs(np.cumsum(order == s) - prefix * c / big)
        assert drift.max() <= 0.5 + present * c / (2 * big) + EPS, (s, order.tolist())


def test_interleave_spreads_a_two_source_batch_alternately() -> None:
    assert interleave(np.array([3, 3])).tolist() == [0, 1, 0, 1, 0, 1]
    assert interleave(np.array([2, 0, 2])).tolist() == [0, 2, 0, 2]
    assert interleave(np.array([1, 3])).tolist() == [1, 0, 1, 1]


def test_worked_example_of_the_module_docstring() -> None:
    phases = (Phase(0, (0.7, 0.3)),)
    sources, local, after = allocate(phases, 4, 3)
    assert counts_of(sources, 2).tolist() == [[3, 1], [3, 1], [2, 2]]
    assert after == MixtureCursor(3, (8, 4), 0, (0, 0), ((0, 4),))
    assert sources[0].tolist() == [0, 0, 1, 0] and local[0].tolist() == [0, 1, 0, 2]
    counts = batch_counts(np.array([0.7, 0.3]), 4, 8, np.array([6, 2]))
    assert counts.tolist() == [2, 2], "deficits 0.4, 0.6: the extra goes to the second source"


@PROPERTY
@given(schedules(), st.data())
def test_local_ids_are_consecutive_per_source_across_chunks_and_phases(
    case: Case, data: st.DataObject
) -> None:
    phases, big, steps = case
    whole, whole_local, whole_after = allocate(phases, big, steps)
    cuts = (
        sorted(set(data.draw(st.lists(st.integers(1, steps - 1), max_size=4)))) if steps > 1 else []
    )
    cursor = MixtureCursor.start(len(phases[0].weights))
    parts, local_parts = [], []
    for lo, hi in zip([0, *cuts], [*cuts, steps], strict=True):
        sources, local, cursor = allocate_batches(phases, big, cursor, hi - lo)
        parts.append(sources)
        local_parts.append(local)
    assert np.array_equal(np.concatenate(parts), whole)
    assert np.array_equal(np.concatenate(local_parts), whole_local)
    assert cursor == whole_after
    for s in range(len(phases[0].weights)):
        ids = whole_local[whole == s]  # row-major: batch after batch, position by position
        assert ids.tolist() == list(range(ids.size)), s
        assert whole_after.drawn[s] == ids.size


@PROPERTY
@given(schedules(), st.data())
def test_advance_cursor_equals_the_cursor_of_allocate_batches(
    case: Case, data: st.DataObject
) -> None:
    phases, big, steps = case
    first = data.draw(st.integers(1, steps))
    start = MixtureCursor.start(len(phases[0].weights))
    _, _, middle = allocate_batches(phases, big, start, first)
    assert advance_cursor(phases, big, start, first) == middle
    _, _, end = allocate_batches(phases, big, start, steps)
    assert advance_cursor(phases, big, middle, steps - first) == end
    assert advance_cursor(phases, big, start, steps) == end
    assert advance_cursor(phases, big, end, 0) == end


@pytest.mark.parametrize("num_sources", [1, 3])
def test_allocating_zero_batches_changes_nothing(num_sources: int) -> None:
    phases = (Phase(0, tuple([1 / num_sources] * num_sources)),)
    _, _, cursor = allocate(phases, 6, 2)
    sources, local, after = allocate_batches(phases, 6, cursor, 0)
    assert sources.shape == local.shape == (0, 6)
    assert after == cursor


@PROPERTY
@given(schedules())
def test_each_phase_starts_exactly_at_its_start_step(case: Case) -> None:
    """Rows of phase p equal a fresh allocation with only p's weights: counting restarts."""
    phases, big, steps = case
    sources, _, _ = allocate(phases, big, steps)
    for index, phase in enumerate(phases):
        stop = phases[index + 1].start_step if index + 1 < len(phases) else steps
        if stop <= phase.start_step:
            continue
        alone, _, _ = allocate((Phase(0, phase.weights),), big, stop - phase.start_step)
        assert np.array_equal(sources[phase.start_step : stop], alone), index


def test_phase_at_switches_exactly_at_start() -> None:
    phases = (Phase(0, (1.0, 0.0)), Phase(5, (0.0, 1.0)), Phase(9, (0.5, 0.5)))
    assert [phase_at(phases, s) for s in (0, 4, 5, 8, 9, 100)] == [0, 0, 1, 1, 2, 2]
    sources, local, _ = allocate(phases, 2, 11)
    assert sources[:5].tolist() == [[0, 0]] * 5
    assert sources[5:9].tolist() == [[1, 1]] * 4
    assert sources[9:].tolist() == [[0, 1]] * 2
    assert local[5].tolist() == [0, 1], "source 1 starts its own sequence at 0"
    assert local[9].tolist() == [10, 8], "both sources continue where they stopped"


@settings(max_examples=100, deadline=None)
@given(
    st.lists(raw_weight, min_size=1, max_size=6).filter(lambda w: sum(w) > 0),
    st.floats(0.1, 10.0),
)
def test_temperature_scales_weights_to_the_power_one_over_t(
    raw: list[float], temperature: float
) -> None:
    w = np.array(raw)
    got = effective_weights(w, temperature)
    powered = np.where(w > 0, w ** (1 / temperature), 0.0)
    np.testing.assert_allclose(got, powered / powered.sum(), rtol=1e-9, atol=1e-12)
    assert got.sum() == pytest.approx(1.0)
    assert (got[w == 0] == 0).all(), "a zero weight stays exactly zero"
    assert (got[w > 0] > 0).all()
    positive, base = got[w > 0], w[w > 0] / w.sum()
    ratio, base_ratio = positive.max() / positive.min(), base.max() / base.min()
    if temperature > 1:
        assert ratio <= base_ratio * (1 + 1e-9), "T > 1 flattens"
    elif temperature < 1:
        assert ratio >= base_ratio * (1 - 1e-9), "T < 1 sharpens"


def test_temperature_examples() -> None:
    np.testing.assert_allclose(effective_weights(np.array([1.0, 3.0])), [0.25, 0.75])
    np.testing.assert_allclose(effective_weights(np.array([1.0, 4.0, 0.0]), 2.0), [1 / 3, 2 / 3, 0])
    flat = effective_weights(np.array([1.0, 9.0]), 1e6)
    np.testing.assert_allclose(flat, [0.5, 0.5], atol=1e-5)


@PROPERTY
@given(schedules(), st.data())
def test_replay_recomputes_the_cursor_from_the_step_and_batch_sizes(
    case: Case, data: st.DataObject
) -> None:
    """The cursor is derivable: advancing with changing global batch sizes (a resume with
    another B) and replaying from ``step`` and the recorded ``batch_sizes`` agree."""
    phases, _, steps = case
    sizes = data.draw(st.lists(st.integers(1, 64), min_size=1, max_size=3))
    cursor = MixtureCursor.start(len(phases[0].weights))
    for size in sizes:
        cursor = advance_cursor(phases, size, cursor, steps)
        _, _, allocated = allocate_batches(phases, size, cursor, 2)
        assert allocated == advance_cursor(phases, size, cursor, 2)
    firsts = [first for first, _ in cursor.batch_sizes]
    assert firsts == sorted(set(firsts)) and firsts[0] == 0
    assert all(a[1] != b[1] for a, b in itertools.pairwise(cursor.batch_sizes))
    replayed = replay_cursor(phases, len(phases[0].weights), cursor.batch_sizes, cursor.step)
    assert replayed == cursor


def test_a_cursor_records_each_change_of_global_batch_size_once() -> None:
    phases = (Phase(0, (0.7, 0.3)),)
    cursor = advance_cursor(phases, 4, MixtureCursor.start(2), 3)
    assert cursor.batch_sizes == ((0, 4),)
    assert advance_cursor(phases, 4, cursor, 2).batch_sizes == ((0, 4),)
    assert advance_cursor(phases, 8, cursor, 0).batch_sizes == ((0, 4),), "no batch, no change"
    changed = advance_cursor(phases, 8, cursor, 1)
    assert changed.batch_sizes == ((0, 4), (3, 8))
    assert advance_cursor(phases, 4, changed, 1).batch_sizes == ((0, 4), (3, 8), (4, 4))
    assert replay_cursor(phases, 2, (), 0) == MixtureCursor.start(2)
