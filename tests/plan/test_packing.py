"""Items of documents and their best-fit decreasing packing, against brute-force references."""

from __future__ import annotations

import collections
import hashlib
import itertools
from unittest import mock

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from streamload.errors import ConfigError
from streamload.plan import packing
from streamload.plan.packing import (
    ALGORITHM,
    GROUP_SIZE,
    GROUPED_ALGORITHM,
    ItemPlan,
    SamplePlan,
    document_items,
    pack_bound,
    pack_items,
    pad_items,
)

SETTINGS = settings(max_examples=150, deadline=None, derandomize=True)

# Capacities around the bitmap's word edges (64, 4096 buckets), and past uint16 sort keys.
capacities = st.sampled_from([1, 2, 3, 5, 63, 64, 65, 100, 4095, 4096, 4097, 70_000])


def reference_pack(
    lengths: list[int], capacity: int, group_size: int, cap: int | None = None
) -> list[list[int]]:
    """Best fit decreasing by its definition, one group at a time, O(items x bins); with
    ``cap`` a bin holding that many items takes no more, whatever its free space."""
    samples: list[list[int]] = []
    for first in range(0, len(lengths), group_size):
        ids = sorted(range(first, min(len(lengths), first + group_size)), key=lambda i: -lengths[i])
        free: list[int] = []
        changed: list[int] = []  # step at which each bin's free space last changed
        members: list[list[int]] = []
        for step, item in enumerate(ids):
            fits = [
                b
                for b in range(len(free))
                if free[b] >= lengths[item] and (cap is None or len(members[b]) < cap)
            ]
            if fits:
                chosen = min(fits, key=lambda b: (free[b], changed[b]))
            else:
                chosen = len(free)
                free.append(capacity)
                changed.append(step)
                members.append([])
            free[chosen] -= lengths[item]
            changed[chosen] = step
            members[chosen].append(item)
        samples += [sorted(m) for m in members]
    return samples


def reference_pack_buckets(lengths: list[int], capacity: int) -> list[list[int]]:
    """The same rule for one group, with a first-in first-out list per free space."""
    buckets: dict[int, collections.deque[int]] = collections.defaultdict(collections.deque)
    members: list[list[int]] = []
    for item in sorted(range(len(lengths)), key=lambda i: -lengths[i]):
        size = lengths[item]
        free = next((f for f in range(size, capacity) if buckets[f]), None)
        if free is None:
            free, chosen = capacity, len(members)
            members.append([])
        else:
            chosen = buckets[free].popleft()
        members[chosen].append(item)
        buckets[free - size].append(chosen)
    return [sorted(m) for m in members]


PATHS = {"python": 2**62, "lockstep": 0}
"""Implementations of pack_items, by the group count up to which the Python loop runs."""


def pack(lengths: list[int], capacity: int, group_size: int, path: str) -> SamplePlan:
    with mock.patch.object(packing, "_LOOP_GROUPS", PATHS[path]):
        return pack_items(np.array(lengths, dtype=np.int64), capacity, group_size)


def samples_of(plan: SamplePlan) -> list[list[int]]:
    bounds = plan.offsets.tolist()
    return [plan.items[begin:end].tolist() for begin, end in itertools.pairwise(bounds)]


@st.composite
def packing_inputs(draw: st.DrawFn) -> tuple[list[int], int, int]:
    capacity = draw(capacities)
    small = st.integers(1, max(1, capacity // draw(st.integers(1, 12))))
    lengths = draw(st.lists(st.one_of(small, st.integers(1, capacity)), max_size=80))
    return lengths, capacity, draw(st.integers(1, 90))


def test_worked_example_of_the_module_docstring() -> None:
    items = document_items(np.array([0, 7, 8, 8, 13, 16, 18]), 4, "split")
    assert items.starts.tolist() == [0, 4, 7, 8, 13, 16]
    assert items.lengths.tolist() == [5, 3, 1, 5, 3, 2]
    assert (items.truncated_tokens, items.documents) == (0, 5)
    assert samples_of(pack_items(items.lengths, 5)) == [[0], [3], [1, 5], [2, 4]]
    assert pack_bound(items.lengths, 5) == 4
    truncated = document_items(np.array([0, 7, 8, 8, 13, 16, 18]), 4, "truncate")
    assert truncated.lengths.tolist() == [5, 1, 5, 3, 2]
    assert truncated.truncated_tokens == 2
    assert samples_of(pad_items(3)) == [[0], [1], [2]]


@SETTINGS
@given(packing_inputs())
def test_packing_equals_the_reference(case: tuple[list[int], int, int]) -> None:
    lengths, capacity, group_size = case
    expected = reference_pack(lengths, capacity, group_size)
    for path in PATHS:
        assert samples_of(pack(lengths, capacity, group_size, path)) == expected, path


@SETTINGS
@given(packing_inputs())
def test_every_item_once_in_a_sample_that_fits(case: tuple[list[int], int, int]) -> None:
    lengths, capacity, group_size = case
    sizes = np.array(lengths, dtype=np.int64)
    for path in PATHS:
        plan = pack(lengths, capacity, group_size, path)
        assert plan.offsets.dtype == plan.items.dtype == np.int64
        assert plan.offsets[0] == 0 and np.all(np.diff(plan.offsets) >= 1)  # no empty sample
        np.testing.assert_array_equal(np.sort(plan.items), np.arange(sizes.size))
        for sample in samples_of(plan):
            assert sample == sorted(sample)
            assert sizes[sample].sum() <= capacity
            assert len({i // group_size for i in sample}) == 1  # never across groups
        assert plan.num_samples >= pack_bound(sizes, capacity)
        again = pack(lengths, capacity, group_size, path)
        np.testing.assert_array_equal(again.offsets, plan.offsets)
        np.testing.assert_array_equal(again.items, plan.items)


@SETTINGS
@given(packing_inputs(), st.integers(1, 4))
def test_groups_pack_independently(case: tuple[list[int], int, int], groups: int) -> None:
    lengths, capacity, group_size = case
    head = (lengths * groups)[: groups * group_size]
    head += [capacity] * (groups * group_size - len(head))  # whole groups only
    for path in PATHS:
        whole = pack(head + lengths, capacity, group_size, path)
        left = pack(head, capacity, group_size, path)
        right = pack(lengths, capacity, group_size, path)
        shifted = [[i + len(head) for i in sample] for sample in samples_of(right)]
        assert samples_of(whole) == samples_of(left) + shifted, path


@pytest.mark.parametrize("path", PATHS)
def test_more_than_32767_bins_in_one_group(path: str) -> None:
    rng = np.random.default_rng(7)
    lengths = np.concatenate([rng.integers(3, 5, 33_000), rng.integers(1, 3, 800)]).tolist()
    rng.shuffle(lengths)
    plan = pack(lengths, 4, 40_000, path)
    assert plan.num_samples > 2**15
    assert samples_of(plan) == reference_pack_buckets(lengths, 4)


@pytest.mark.parametrize("path", PATHS)
def test_empty_and_invalid_packing_inputs(path: str) -> None:
    empty = pack([], 10, GROUP_SIZE, path)
    assert (empty.num_samples, empty.items.size, empty.offsets.tolist()) == (0, 0, [0])
    assert pad_items(0).num_samples == 0
    with pytest.raises(ValueError, match="num_items"):
        pad_items(-1)
    for lengths, capacity, group in [([0, 3], 5, 8), ([6], 5, 8), ([1], 5, 0), ([1], 0, 8)]:
        with pytest.raises(ValueError):
            pack(lengths, capacity, group, path)


def reference_items(bounds: list[int], seq_len: int, mode: str) -> tuple[list[int], list[int]]:
    starts, lengths = [], []
    for begin, end in itertools.pairwise(bounds):
        size = end - begin
        pieces = 1 if mode == "truncate" or size <= seq_len + 1 else (size - 2) // seq_len + 1
        for k in range(pieces if size else 0):
            starts.append(begin + k * seq_len)
            lengths.append(min(seq_len + 1, end - begin - k * seq_len))
    return starts, lengths


@st.composite
def documents(draw: st.DrawFn) -> tuple[np.ndarray, int]:
    seq_len = draw(st.integers(1, 12))
    edge = st.sampled_from([0, 0, 1, 2, seq_len, seq_len + 1, seq_len + 2, seq_len + 3])
    sizes = draw(st.lists(st.one_of(edge, st.integers(0, 6 * seq_len + 6)), max_size=12))
    offset = draw(st.sampled_from([0, 5, 2**40]))
    return offset + np.concatenate([[0], np.cumsum(sizes, dtype=np.int64)]), seq_len


@SETTINGS
@given(documents())
def test_split_items_train_every_next_token_pair_once(case: tuple[np.ndarray, int]) -> None:
    bounds, seq_len = case
    items = document_items(bounds, seq_len, "split")
    expected = reference_items(bounds.tolist(), seq_len, "split")
    assert (items.starts.tolist(), items.lengths.tolist()) == expected
    assert items.starts.dtype == np.int64 and items.lengths.dtype == np.int32
    assert items.truncated_tokens == 0
    sizes = np.diff(bounds)
    assert items.documents == np.count_nonzero(sizes)
    base = int(bounds[0])
    pairs = np.zeros(int(bounds[-1] - base), dtype=np.int64)  # pair (t, t + 1) counted at t
    single = np.zeros_like(pairs)
    for start, length in zip(items.starts - base, items.lengths.tolist(), strict=True):
        pairs[start : start + length - 1] += 1
        single[start] += length == 1
        assert 1 <= length <= seq_len + 1
    doc_last = bounds[1:][sizes > 0] - 1 - base  # a document's last token starts no pair
    want = np.ones_like(pairs)
    want[doc_last] = 0
    np.testing.assert_array_equal(pairs, want)
    assert single.sum() == np.count_nonzero(sizes == 1)  # 1-token documents are one item


@SETTINGS
@given(documents())
def test_truncate_keeps_each_documents_first_window(case: tuple[np.ndarray, int]) -> None:
    bounds, seq_len = case
    items = document_items(bounds, seq_len, "truncate")
    expected = reference_items(bounds.tolist(), seq_len, "truncate")
    assert (items.starts.tolist(), items.lengths.tolist()) == expected
    sizes = np.diff(bounds)
    assert items.truncated_tokens == int(np.maximum(sizes - seq_len - 1, 0).sum())
    assert items.documents == items.starts.size == np.count_nonzero(sizes)


def test_huge_document_becomes_pieces_at_stride_seq_len() -> None:
    size, seq_len = 10**6 + 3, 7
    items = document_items(np.array([2**40, 2**40 + size]), seq_len, "split")
    assert items.starts.size == (size - 2) // seq_len + 1
    np.testing.assert_array_equal(np.diff(items.starts), seq_len)
    assert items.lengths[:-1].min() == seq_len + 1 and 2 <= items.lengths[-1] <= seq_len + 1
    assert items.starts[-1] + items.lengths[-1] == 2**40 + size
    truncated = document_items(np.array([0, size]), seq_len, "truncate")
    assert truncated.truncated_tokens == size - seq_len - 1


def test_invalid_document_inputs() -> None:
    with pytest.raises(ConfigError, match="long_documents"):
        document_items(np.array([0, 3]), 4, "skip")
    with pytest.raises(ConfigError, match="seq_len"):
        document_items(np.array([0, 3]), 0, "split")
    for bounds in ([0, 5, 4], [-1, 3], []):
        with pytest.raises(ValueError, match="doc_bounds"):
            document_items(np.array(bounds, dtype=np.int64), 4, "split")
    none = document_items(np.array([3]), 4, "split")
    assert (none.starts.size, none.documents) == (0, 0)


def lognormal_items(seq_len: int, documents: int = 30_000) -> ItemPlan:
    rng = np.random.default_rng(2024)
    sizes = np.maximum(1, rng.lognormal(np.log(500), 1.0, documents).astype(np.int64))
    return document_items(np.concatenate([[0], np.cumsum(sizes)]), seq_len, "split")


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("seq_len", [2048, 8192])
def test_padding_stays_within_half_a_percent_of_the_bound(seq_len: int, path: str) -> None:
    items = lognormal_items(seq_len)
    plan = pack(items.lengths.tolist(), seq_len + 1, GROUP_SIZE, path)
    assert plan.num_samples <= 1.005 * pack_bound(items.lengths, seq_len + 1)


@pytest.mark.parametrize("path", PATHS)
def test_golden_plan(path: str) -> None:
    """A fixed corpus gives a fixed plan: a change of the rule must change ALGORITHM too."""
    items = lognormal_items(2048, documents=5_000)
    plan = pack(items.lengths.tolist(), 2049, 1000, path)
    digest = hashlib.sha256(plan.offsets.tobytes() + plan.items.tobytes()).hexdigest()
    assert GROUPED_ALGORITHM == "bfd-groups-fifo-v1"
    assert (plan.num_samples, digest[:16]) == (2000, "d2ed1f04f24abfca")


def test_golden_whole_epoch_plan() -> None:
    """The default rule (best fit over the whole epoch, then the refill, which saves no
    sample here: tests/plan/test_packing_refill.py has one where it does) on the same corpus."""
    items = lognormal_items(2048, documents=5_000)
    plan = pack_items(items.lengths, 2049)
    digest = hashlib.sha256(plan.offsets.tobytes() + plan.items.tobytes()).hexdigest()
    assert ALGORITHM == "bfd-epoch-refill-v1"
    assert (plan.num_samples, digest[:16]) == (1997, "c2f3d22356d9e09f")
