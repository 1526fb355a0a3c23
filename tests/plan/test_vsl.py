"""Dataset decomposition (plan/vsl.py) and the epoch order of its batches
(plan/vsl_curriculum.py): exact examples, then properties over any documents and counts."""

from __future__ import annotations

import itertools
from collections import Counter

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from streamload.plan.vsl import bucket_lengths, decompose
from streamload.plan.vsl_curriculum import apportion, epoch_order, growth_odds


def test_the_module_example() -> None:
    pieces = decompose(np.array([0, 46]), 4, 16)
    assert pieces.lengths == (4, 8, 16)
    assert pieces.starts.tolist() == [40, 32, 0, 16]  # buckets 4, 8, 16
    assert pieces.offsets.tolist() == [0, 1, 2, 4]
    assert (pieces.documents, pieces.dropped_tokens) == (1, 1)


def test_empty_and_tiny_documents_give_no_piece() -> None:
    pieces = decompose(np.array([0, 0, 1, 4, 9]), 4, 8)  # empty, 1 token, 3 tokens, 5 tokens
    assert pieces.starts.tolist() == [4]  # 5 tokens: 4 pairs, one piece of 4 at the start
    assert pieces.documents == 3 and pieces.dropped_tokens == 2  # the 3-token doc's 2 pairs


def test_bad_lengths_are_refused() -> None:
    with pytest.raises(ValueError, match="powers of two"):
        bucket_lengths(3, 8)
    with pytest.raises(ValueError, match="non-decreasing"):
        decompose(np.array([5, 3]), 4, 8)


def reference_pieces(sizes: list[int], low: int, top: int) -> tuple[list[tuple[int, int]], int]:
    """(start, length) of every piece, and the dropped pairs, by a per-document loop."""
    out, dropped, at = [], 0, 0
    for size in sizes:
        pairs, start = max(size - 1, 0), at
        while pairs >= top:
            out.append((start, top))
            start, pairs = start + top, pairs - top
        length = top // 2
        while length >= low:
            if pairs & length:
                out.append((start, length))
                start += length
            length //= 2
        dropped += pairs & (low - 1)
        at += size
    return out, dropped


@settings(max_examples=200, deadline=None)
@given(
    sizes=st.lists(st.integers(0, 300), max_size=40),
    low_exp=st.integers(0, 4),
    span=st.integers(0, 4),
)
def test_every_pair_is_in_one_piece_or_counted_dropped(
    sizes: list[int], low_exp: int, span: int
) -> None:
    low, top = 1 << low_exp, 1 << (low_exp + span)
    bounds = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)
    pieces = decompose(bounds, low, top)
    expected, dropped = reference_pieces(sizes, low, top)
    got = []
    for k, length in enumerate(pieces.lengths):
        starts = pieces.starts[pieces.offsets[k] : pieces.offsets[k + 1]].tolist()
        assert starts == sorted(starts)  # storage order inside a bucket
        got += [(s, length) for s in starts]
    assert sorted(got) == sorted(expected)
    assert pieces.dropped_tokens == dropped
    # every input position of every document: in exactly one piece, or dropped
    covered = Counter(p for s, n in got for p in range(s, s + n))
    assert all(c == 1 for c in covered.values())
    pairs = sum(max(s - 1, 0) for s in sizes)
    assert len(covered) == pieces.kept_tokens == pairs - dropped
    # a piece's L + 1 tokens lie inside its document
    doc = np.searchsorted(bounds, [s for s, _ in got], "right") - 1
    ends = bounds[doc + 1]
    assert all(s + n + 1 <= e for (s, n), e in zip(got, ends.tolist(), strict=True))


def test_apportion_adds_up_by_largest_remainders() -> None:
    assert apportion(7, [1, 2, 4]).tolist() == [1, 2, 4]
    assert apportion(1, [1, 2, 4]).tolist() == [0, 0, 1]
    assert apportion(5, [1, 1, 1]).tolist() == [2, 2, 1]  # ties to the lowest index
    assert apportion(0, [1, 2]).tolist() == [0, 0]


def test_growth_odds_rotate_the_peak_from_short_to_long() -> None:
    assert [growth_odds(b, 3, True) for b in range(3)] == [[4, 2, 1], [2, 4, 1], [1, 2, 4]]
    assert [growth_odds(b, 3, False) for b in range(3)] == [[3, 2, 1], [2, 3, 1], [1, 2, 3]]


@settings(max_examples=150, deadline=None)
@given(
    batches=st.lists(st.integers(0, 40), min_size=1, max_size=6),
    curriculum=st.sampled_from(["natural", "grow_p2", "grow_linear", "cyclic_p2"]),
    cycles=st.integers(1, 9),
    seed=st.integers(0, 2**31),
    shuffle=st.booleans(),
)
def test_an_epoch_uses_every_batch_once(
    batches: list[int], curriculum: str, cycles: int, seed: int, shuffle: bool
) -> None:
    order = epoch_order(batches, curriculum, cycles)
    assert order.steps == sum(batches)
    assert order.bucket_totals().tolist() == batches
    keys = (seed, 3, "web") if shuffle else None
    bucket, index = order.locate(np.arange(order.steps), keys)
    # the realized share of each length is exactly its count, each batch once
    pairs = sorted(zip(bucket.tolist(), index.tolist(), strict=True))
    assert pairs == [(b, i) for b, n in enumerate(batches) for i in range(n)]
    if batches[-1]:
        assert bucket[0] == len(batches) - 1  # the longest length first
    # random access equals the sequential walk
    some = np.arange(order.steps)[::3]
    again = order.locate(some, keys)
    assert again[0].tolist() == bucket[::3].tolist() and again[1].tolist() == index[::3].tolist()


def test_grow_p2_segments_follow_their_odds() -> None:
    order = epoch_order([141, 141, 141], "grow_p2", 1)  # 1 head from the longest
    # sub-cycle j favours length j: odds 4, 2, 1 / 2, 4, 1 / 1, 2, 4 (of 7)
    assert order.counts.tolist() == [[81, 40, 20], [40, 81, 40], [20, 20, 80]]
    bucket, _ = order.locate(np.arange(order.steps), (0, 0, "x"))
    thirds = np.array_split(bucket[1:], [141, 282])
    assert [int(np.argmax(np.bincount(t, minlength=3))) for t in thirds] == [0, 1, 2]


def test_cyclic_p2_repeats_the_growth() -> None:
    order = epoch_order([64, 64], "cyclic_p2", 8)
    assert order.counts.shape == (16, 2)
    assert order.counts[:, 0].reshape(8, 2).sum(axis=1).tolist() == [8] * 8
    with pytest.raises(ValueError, match="curriculum"):
        epoch_order([1], "grow", 1)


@settings(max_examples=150, deadline=None)
@given(
    weights=st.lists(st.floats(0.0, 10.0), min_size=1, max_size=5),
    has=st.lists(st.booleans(), min_size=5, max_size=5),
    rows=st.sampled_from([1, 2, 3, 8, 64, 5000]),
    batch=st.integers(0, 10**6),
)
def test_row_patterns_are_exact_monotone_and_near_the_weights(
    weights: list[float], has: list[bool], rows: int, batch: int
) -> None:
    from streamload.plan.vsl_mixture import PATTERN_ROWS, bucket_weights, row_pattern

    shares = bucket_weights(np.array(weights), np.array(has[: len(weights)]))
    if shares.sum() == 0:
        return
    pattern = row_pattern(shares, rows)
    before, after = pattern.drawn(batch), pattern.drawn(batch + 1)
    counts = after - before
    assert counts.sum() == rows and (counts >= 0).all()  # exact rows, monotone counts
    assert (counts[shares == 0] == 0).all()
    period = pattern.sources.size
    assert period % rows == 0 and period >= min(PATTERN_ROWS, rows)
    # within two rows of the pattern's share, which is the weight to within one pattern row
    target = shares * rows * (batch + 1)
    assert (np.abs(after - target) <= 2 + (batch + 1) * rows / period).all()
    sources, ranks = pattern.place(batch)
    for s in range(shares.size):  # each source's rows of the batch, ranked in order
        assert sorted(ranks[sources == s].tolist()) == list(range(counts[s]))


@settings(max_examples=150, deadline=None)
@given(
    batches=st.lists(st.integers(0, 30), min_size=1, max_size=5),
    starts=st.lists(st.integers(1, 120), max_size=4, unique=True),
    data=st.data(),
)
def test_a_table_orders_every_batch_by_its_phases(
    batches: list[int], starts: list[int], data: st.DataObject
) -> None:
    from streamload.plan.vsl_curriculum import table_order

    starts = [0, *sorted(starts)]
    weights = np.array(
        [
            data.draw(st.lists(st.floats(0, 5), min_size=len(batches), max_size=len(batches)))
            for _ in starts
        ]
    )
    order = table_order(batches, starts, weights)
    assert order.bucket_totals().tolist() == batches
    total, head = sum(batches), int(batches[-1] > 0)
    bounds = [min(max(s, head), total) for s in starts] + [total]
    sizes = order.counts.sum(axis=1).tolist()
    assert sizes == [b - a for a, b in itertools.pairwise(bounds)]
    pairs = sorted(zip(*(a.tolist() for a in order.locate(np.arange(total), None)), strict=True))
    assert pairs == [(b, i) for b, n in enumerate(batches) for i in range(n)]


def test_a_table_phase_gets_its_weights_while_the_lengths_last() -> None:
    from streamload.plan.vsl_curriculum import table_order

    order = table_order([40, 40, 41], [0, 31, 61], np.array([[2, 1, 0], [0, 1, 2], [1, 1, 1]]))
    assert order.counts.tolist() == [[20, 10, 0], [0, 10, 20], [20, 20, 20]]
