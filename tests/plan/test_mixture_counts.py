"""plan/mixture_counts.py: the guessed-and-checked block walk equals the rule batch by batch."""

from __future__ import annotations

from unittest import mock

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from streamload.plan import mixture_counts
from streamload.plan.mixture import MixtureCursor, Phase, advance_cursor, allocate_batches
from streamload.plan.mixture_counts import count_blocks
from tests.plan.test_mixture import PROPERTY, Case, counts_of, schedules


def blocks(phases: tuple[Phase, ...], batch: int, steps: int, block: int) -> np.ndarray:
    parts = list(count_blocks(phases, batch, steps, block))
    assert all(0 < len(p) <= block for p in parts)
    return np.concatenate(parts) if parts else np.zeros((0, len(phases[0].weights)), np.int64)


@PROPERTY
@given(case=schedules(), block=st.integers(1, 40))
def test_blocks_equal_the_allocation_of_every_batch(case: Case, block: int) -> None:
    phases, batch, steps = case
    sources, _, _ = allocate_batches(
        phases, batch, MixtureCursor.start(len(phases[0].weights)), steps
    )
    want = counts_of(sources, len(phases[0].weights))
    np.testing.assert_array_equal(blocks(phases, batch, steps, block), want)
    # the guesses (and their misses) on short walks too: warm up 2 batches, guess 3
    with mock.patch.multiple(mixture_counts, _WARMUP=2, _FIRST_GUESS=3):
        np.testing.assert_array_equal(blocks(phases, batch, steps, block), want)


@pytest.mark.parametrize(
    "raw",
    [
        (0.7, 0.2, 0.1),
        (1.0, 1.0, 1.0),
        (0.37, 1.1, 2.9, 0.4),  # no short period: the guess misses and walks again
        (0.123456789, 0.98765, 0.5555, 3.14159, 2.71828),
    ],
)
def test_long_walks_with_a_schedule_end_at_the_cursor_of_the_loader(raw: tuple) -> None:
    weights = np.array(raw) / np.sum(raw)
    phases = (Phase(0, tuple(weights.tolist())), Phase(7_000, tuple(weights[::-1].tolist())))
    for batch, steps in ((64, 30_000), (1000, 20_000), (7, 25_000)):
        got = blocks(phases, batch, steps, 4096)
        cursor = advance_cursor(phases, batch, MixtureCursor.start(len(raw)), steps)
        assert tuple(got.sum(axis=0).tolist()) == cursor.drawn
        prefix = np.cumsum(got[:300], axis=0)  # and the counts after some early steps
        for step in (1, 2, 37, 299):
            one = advance_cursor(phases, batch, MixtureCursor.start(len(raw)), step)
            assert tuple(prefix[step - 1].tolist()) == one.drawn


def test_steps_past_the_last_phase_and_zero_steps() -> None:
    phases = (Phase(0, (0.5, 0.5)), Phase(10, (1.0, 0.0)))
    assert blocks(phases, 3, 0, 8).shape == (0, 2)
    got = blocks(phases, 3, 5, 8)  # the second phase never starts
    np.testing.assert_array_equal(got.sum(axis=0), [8, 7])
