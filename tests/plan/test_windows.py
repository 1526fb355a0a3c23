"""Window carving: counts, bounds and strides of windows of L + 1 tokens at stride L."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from streamload.plan.windows import WindowLayout

SETTINGS = settings(max_examples=50, deadline=None)

shard_sizes = st.lists(st.integers(1, 300), min_size=1, max_size=8)
seq_lens = st.integers(1, 64)


@SETTINGS
@given(sizes=shard_sizes, seq_len=seq_lens, cross_shard=st.booleans())
def test_window_count_formula(sizes: list[int], seq_len: int, cross_shard: bool) -> None:
    layout = WindowLayout(np.array(sizes), seq_len, cross_shard)
    if cross_shard:
        expected = (sum(sizes) - 1) // seq_len
    else:
        expected = sum((n - 1) // seq_len for n in sizes)
    assert layout.num_windows == expected


@SETTINGS
@given(sizes=shard_sizes, seq_len=seq_lens, cross_shard=st.booleans())
def test_windows_lie_inside_the_stream(sizes: list[int], seq_len: int, cross_shard: bool) -> None:
    layout = WindowLayout(np.array(sizes), seq_len, cross_shard)
    starts = layout.starts(np.arange(layout.num_windows))
    assert starts.dtype == np.int64
    if layout.num_windows == 0:
        return
    assert starts.min() >= 0
    assert starts.max() + seq_len + 1 <= sum(sizes)
    assert np.all(np.diff(starts) > 0)  # strictly increasing


@SETTINGS
@given(sizes=shard_sizes, seq_len=seq_lens)
def test_cross_shard_windows_have_stride_seq_len(sizes: list[int], seq_len: int) -> None:
    layout = WindowLayout(np.array(sizes), seq_len, cross_shard=True)
    starts = layout.starts(np.arange(layout.num_windows))
    np.testing.assert_array_equal(starts, np.arange(layout.num_windows) * seq_len)
    # the dropped tail is shorter than one more window
    assert layout.num_windows * seq_len + seq_len + 1 > sum(sizes)


@SETTINGS
@given(sizes=shard_sizes, seq_len=seq_lens)
def test_per_shard_windows_stay_in_one_shard(sizes: list[int], seq_len: int) -> None:
    layout = WindowLayout(np.array(sizes), seq_len, cross_shard=False)
    starts = layout.starts(np.arange(layout.num_windows))
    bounds = np.concatenate([[0], np.cumsum(sizes)])
    shard = np.searchsorted(bounds, starts, side="right") - 1
    assert np.all(starts + seq_len + 1 <= bounds[shard + 1])
    # each shard: (n_i - 1) // L windows at its own offsets 0, L, 2L, ...
    for i, n in enumerate(sizes):
        mine = starts[shard == i]
        expected = bounds[i] + np.arange((n - 1) // seq_len) * seq_len
        np.testing.assert_array_equal(mine, expected)


@SETTINGS
@given(sizes=shard_sizes, seq_len=seq_lens, cross_shard=st.booleans(), data=st.data())
def test_starts_of_any_subset_match_the_full_table(
    sizes: list[int], seq_len: int, cross_shard: bool, data: st.DataObject
) -> None:
    """A batch of window ids in any order maps as the whole table does (vectorized)."""
    layout = WindowLayout(np.array(sizes), seq_len, cross_shard)
    if layout.num_windows == 0:
        return
    table = layout.starts(np.arange(layout.num_windows))
    ids = np.array(
        data.draw(st.lists(st.integers(0, layout.num_windows - 1), min_size=1, max_size=40))
    )
    np.testing.assert_array_equal(layout.starts(ids), table[ids])
    np.testing.assert_array_equal(layout.starts(ids.reshape(-1, 1))[:, 0], table[ids])


def test_docstring_example() -> None:
    """Shards of 10 and 7 tokens, L = 4 (the worked example of ``plan/windows.py``)."""
    across = WindowLayout(np.array([10, 7]), 4, cross_shard=True)
    assert across.num_windows == 4
    assert across.starts(np.arange(4)).tolist() == [0, 4, 8, 12]
    within = WindowLayout(np.array([10, 7]), 4, cross_shard=False)
    assert within.num_windows == 3
    assert within.starts(np.arange(3)).tolist() == [0, 4, 10]


@pytest.mark.parametrize(
    ("sizes", "seq_len", "cross_shard", "expected"),
    [
        ([5], 4, True, 1),  # exactly L + 1 tokens: one window
        ([4], 4, True, 0),  # one token short
        ([3, 2], 4, True, 1),  # only across the boundary
        ([3, 2], 4, False, 0),  # ... which per-shard carving refuses
        ([1], 1, True, 0),
        ([2], 1, True, 1),
        ([9, 9], 4, False, 4),  # (9 - 1) // 4 = 2 per shard
        ([9, 9], 4, True, 4),  # (18 - 1) // 4 = 4
    ],
)
def test_small_cases(sizes: list[int], seq_len: int, cross_shard: bool, expected: int) -> None:
    assert WindowLayout(np.array(sizes), seq_len, cross_shard).num_windows == expected


def test_windows_read_the_right_tokens() -> None:
    """Reading each window from the concatenated stream gives inputs/labels shifted by one."""
    sizes, seq_len = [13, 6, 21], 5
    stream = np.arange(sum(sizes))
    layout = WindowLayout(np.array(sizes), seq_len, cross_shard=True)
    windows = [stream[s : s + seq_len + 1] for s in layout.starts(np.arange(layout.num_windows))]
    for left, right in itertools.pairwise(windows):
        assert left[-1] == right[0]  # one token of overlap
    assert np.concatenate([w[:-1] for w in windows]).tolist() == list(range(35))


SPAN_SETTINGS = settings(max_examples=60, deadline=None, derandomize=True)


def _span_reference(sizes: list[int], seq_len: int, cross: bool, lo: int, hi: int) -> list[int]:
    """Window starts inside ``[lo, hi)``, written out directly: a window of ``seq_len + 1``
    tokens at stride ``seq_len`` from ``lo`` (or from each shard's part of the range)."""
    if cross:
        return list(range(lo, hi - seq_len, seq_len))
    out, base = [], 0
    for n in sizes:
        a, b = min(max(lo, base), base + n), min(max(hi, base), base + n)
        out += list(range(a, b - seq_len, seq_len))
        base += n
    return out


@SPAN_SETTINGS
@given(
    sizes=shard_sizes,
    seq_len=seq_lens,
    cross_shard=st.booleans(),
    cut=st.tuples(st.floats(0, 1), st.floats(0, 1)),
)
def test_a_span_keeps_every_window_inside_it(
    sizes: list[int], seq_len: int, cross_shard: bool, cut: tuple[float, float]
) -> None:
    total = sum(sizes)
    lo, hi = sorted(round(c * total) for c in cut)
    layout = WindowLayout(np.array(sizes), seq_len, cross_shard, span=(lo, hi))
    starts = layout.starts(np.arange(layout.num_windows)).tolist()
    assert starts == _span_reference(sizes, seq_len, cross_shard, lo, hi)
    assert all(lo <= s and s + seq_len + 1 <= hi for s in starts)


@SPAN_SETTINGS
@given(sizes=shard_sizes, seq_len=seq_lens, cross_shard=st.booleans())
def test_the_whole_span_is_the_layout_without_one(
    sizes: list[int], seq_len: int, cross_shard: bool
) -> None:
    plain = WindowLayout(np.array(sizes), seq_len, cross_shard)
    whole = WindowLayout(np.array(sizes), seq_len, cross_shard, span=(0, sum(sizes)))
    ids = np.arange(plain.num_windows)
    assert whole.num_windows == plain.num_windows
    np.testing.assert_array_equal(whole.starts(ids), plain.starts(ids))


def test_the_worked_example_of_a_span() -> None:
    """The module docstring's example: shards of 10 and 7 tokens, L = 4, range [6, 17)."""
    cross = WindowLayout(np.array([10, 7]), 4, True, span=(6, 17))
    per_shard = WindowLayout(np.array([10, 7]), 4, False, span=(6, 17))
    assert cross.starts(np.arange(cross.num_windows)).tolist() == [6, 10]
    assert per_shard.starts(np.arange(per_shard.num_windows)).tolist() == [10]
