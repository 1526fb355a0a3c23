"""The sequence-length schedule's pure rules: lengths by step, OLMo-core's warm-up."""

from __future__ import annotations

import math

from hypothesis import given, settings
from hypothesis import strategies as st

from streamload.plan.seq_len import SeqLenSchedule, warmup_phases


def olmo_split_length(start: int, top: int, step: int, steps: int) -> int:
    """OLMo-core's split warm-up in floating point, restated: a straight line from
    ``start`` to ``top`` over ``steps``, floored to ``start`` times a power of two."""
    line = start + (top - start) * min(step, steps) / steps
    return start * 2 ** math.floor(math.log2(line // start))


@settings(max_examples=200, deadline=None)
@given(
    start=st.sampled_from([1, 2, 3, 8, 64, 128, 512]),
    doublings=st.integers(1, 6),
    steps=st.integers(1, 3000),
)
def test_warmup_phases_are_olmo_cores_split_rule(start: int, doublings: int, steps: int) -> None:
    top = start << doublings
    schedule = SeqLenSchedule(top, warmup_phases(start, top, steps), 8)
    for step in sorted({0, 1, steps - 1, steps, steps + 1, *range(0, steps + 2, 97)}):
        assert schedule.length_at(step) == olmo_split_length(start, top, step, steps), step
    assert schedule.length_at(10 * steps) == top
    starts = [p[0] for p in schedule.phases]
    assert starts == sorted(set(starts)), "one phase per step"


def test_worked_example() -> None:
    assert warmup_phases(512, 2048, 300) == ((0, 512), (100, 1024), (300, 2048))
    assert warmup_phases(512, 2048, 1) == ((0, 512), (1, 2048))


def test_lengths_before_the_first_phase_are_the_max() -> None:
    schedule = SeqLenSchedule(8, ((3, 2), (5, 4)), 4)
    assert [schedule.length_at(k) for k in range(7)] == [8, 8, 8, 2, 2, 4, 4]
    assert schedule.lengths(range(7)).tolist() == [8, 8, 8, 2, 2, 4, 4]  # type: ignore[arg-type]
    assert [schedule.next_switch(k) for k in (0, 3, 4, 5)] == [3, 5, 5, None]
    assert schedule.started(4) == [[3, 2]]


def test_describe_lists_each_stretch() -> None:
    stretches = SeqLenSchedule(8, ((3, 2), (5, 8)), 4).describe()
    assert [(p["start_step"], p["end_step"], p["seq_len"]) for p in stretches] == [
        (0, 3, 8),
        (3, 5, 2),
        (5, None, 8),
    ]
    assert [p["rows_per_step"] for p in stretches] == [4, 16, 4]
    assert {p["tokens_per_step"] for p in stretches} == {32}
