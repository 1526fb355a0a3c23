"""Best-fit decreasing over many groups at once, in numpy steps (for :mod:`.packing`).

The groups advance in lockstep: step ``i`` places the ``i``-th largest item of every group in
one numpy operation. Each group keeps its open bins in first-in first-out lists by free space
(linked through one array) and levels of uint64 bitmaps over those lists (64 buckets per
word, 64 words per word above), so "the smallest free space >= L" is a walk up the levels
and down again, each step a lowest-set-bit lookup (a de Bruijn multiply). The plan is the
one :func:`streamload.plan.packing.pack_items` defines, identical to its Python loop.
"""

from __future__ import annotations

import numpy as np

__all__ = ["pack_in_lockstep"]

_STATE_BYTES = 128 << 20
"""Bytes of packing state of the groups packed at once (more groups: fewer numpy calls)."""

_ONE = np.uint64(1)
_BIT = np.left_shift(_ONE, np.arange(64, dtype=np.uint64))
"""``_BIT[k]``: the word with bit k set."""
_FROM = ~(_BIT - _ONE)
"""``_FROM[k]``: the word with bits k..63 set."""
_DE_BRUIJN = 0x03F7_9D71_B4CB_0A89
_CTZ_TABLE = np.zeros(64, dtype=np.int64)
for _bit in range(64):
    _CTZ_TABLE[(((1 << _bit) * _DE_BRUIJN) & 0xFFFF_FFFF_FFFF_FFFF) >> 58] = _bit


def pack_in_lockstep(sizes: np.ndarray, capacity: int, group: int) -> tuple[np.ndarray, np.ndarray]:
    """:func:`~streamload.plan.packing.pack_items` with all groups advancing one item per
    numpy step; the plan's ``(offsets, items)`` (see ``SamplePlan``)."""
    per_batch = group * max(1, _STATE_BYTES // _group_bytes(capacity, group))
    counts, items = [np.zeros(0, np.int64)], [np.zeros(0, np.int64)]
    for first in range(0, sizes.size, per_batch):
        batch_counts, batch_items = _pack_batch(sizes[first : first + per_batch], capacity, group)
        counts.append(batch_counts)
        items.append(batch_items + first)
    offsets = np.concatenate([[0], np.cumsum(np.concatenate(counts))])
    return offsets.astype(np.int64), np.concatenate(items)


def _group_bytes(capacity: int, group: int) -> int:
    """Approximate bytes of packing state per group (buckets, lists, bitmaps, sort keys)."""
    pointer = 2 if group < 2**15 else 4
    return 2 * (capacity + 1) * pointer + (capacity + 1) // 8 + group * (3 * pointer + 44)


def _pack_batch(sizes: np.ndarray, capacity: int, group: int) -> tuple[np.ndarray, np.ndarray]:
    """Pack consecutive groups of ``group`` items; sample sizes and items of the samples."""
    num_groups = -(-sizes.size // group)
    padded = np.zeros(num_groups * group, dtype=np.int32 if capacity < 2**31 else np.int64)
    padded[: sizes.size] = sizes
    table = padded.reshape(num_groups, group)
    key_type = np.uint16 if capacity < 2**16 else np.uint32  # radix sort for 16-bit keys
    order = np.argsort((capacity - table).astype(key_type), axis=1, kind="stable")
    sorted_sizes = np.ascontiguousarray(np.take_along_axis(table, order, axis=1).T)
    bins = _Bins(num_groups, capacity, group)
    placed = np.full((group, num_groups), -1, dtype=bins.next.dtype)
    last = sizes.size - (num_groups - 1) * group  # items of the last group
    # Items over half the capacity never share a bin: while every group places one, open
    # the bins in bulk instead of one step at a time.
    opening = int(np.count_nonzero(2 * table > capacity, axis=1).min())
    bins.open_bins(sorted_sizes[:opening])
    placed[:opening] = np.arange(opening)[:, None]
    for step in range(opening, group):
        active = num_groups if step < last else num_groups - 1
        placed[step, :active] = bins.place(sorted_sizes[step, :active])
    local = np.empty_like(table)
    np.put_along_axis(local, order, placed.T, axis=1)  # bin of each item, -1 for padding
    sample_of = local + (np.cumsum(bins.opened) - bins.opened)[:, None]
    counts = np.bincount(sample_of[local >= 0])
    keys = np.where(local < 0, group, local).astype(np.uint16 if group < 2**16 else np.uint32)
    within = np.argsort(keys, axis=1, kind="stable")
    items = (within + np.arange(num_groups)[:, None] * group).ravel()[: sizes.size]
    return counts.astype(np.int64), items.astype(np.int64)


def _lowest_bit(words: np.ndarray) -> np.ndarray:
    """Index of the lowest set bit of each uint64 word (0 for a zero word)."""
    low = words & (~words + _ONE)
    return _CTZ_TABLE[(low * np.uint64(_DE_BRUIJN)) >> np.uint64(58)]


class _Bins:
    """The open bins of a batch of groups, bucketed by free space; placing one item per group.

    Per group: ``head``/``tail`` of a first-in first-out list of bins per free space
    ``0..capacity`` (linked through ``next``), and levels of bitmaps over the buckets (level
    0: bit r = bucket r non-empty; level k + 1: bit w = word w of level k non-zero). Bucket
    ``capacity`` stands for the next unopened bin: its bit is always set, so every search
    succeeds. Full bins go to bucket 0, which no search reaches (items have >= 1 token).
    """

    def __init__(self, groups: int, capacity: int, max_bins: int) -> None:
        pointer = np.int16 if max_bins < 2**15 else np.int32
        self.capacity = capacity
        self.head = np.full(groups * (capacity + 1), -1, dtype=pointer)
        self.tail = np.zeros(groups * (capacity + 1), dtype=pointer)
        self.next = np.full(groups * max_bins, -1, dtype=pointer)
        self.head_base = np.arange(groups, dtype=np.int64) * (capacity + 1)
        self.next_base = np.arange(groups, dtype=np.int64) * max_bins
        self.opened = np.zeros(groups, dtype=np.int64)
        self.levels: list[np.ndarray] = []
        self.level_base: list[np.ndarray] = []
        bits = capacity + 1
        while True:
            words = -(-bits // 64)
            self.levels.append(np.zeros(groups * (words + 1), dtype=np.uint64))  # + 1: spare
            self.level_base.append(np.arange(groups, dtype=np.int64) * (words + 1))
            if words == 1:
                break
            bits = words
        self._mark(np.full(groups, capacity, dtype=np.int64), groups)

    def open_bins(self, sizes: np.ndarray) -> None:
        """Open bins ``0..m-1`` of every group with items ``sizes`` (``[m, groups]``) that
        fit no open bin: what ``m`` calls of :meth:`place` would do, in one pass."""
        if sizes.size == 0:
            return
        free = self.capacity - sizes.T.astype(np.int64)
        order = np.argsort(free, axis=1, kind="stable")  # each bucket's bins in opening order
        free = np.take_along_axis(free, order, axis=1)
        first = np.ones(free.shape, dtype=bool)
        first[:, 1:] = free[:, 1:] != free[:, :-1]
        last = np.ones(free.shape, dtype=bool)
        last[:, :-1] = first[:, 1:]
        slot = self.head_base[:, None] + free
        self.head[slot[first]] = order[first]
        self.tail[slot[last]] = order[last]
        linked = ~first[:, 1:]
        self.next[(self.next_base[:, None] + order[:, :-1])[linked]] = order[:, 1:][linked]
        position = free[first]
        groups = np.nonzero(first)[0]
        for level, base in zip(self.levels, self.level_base, strict=True):
            np.bitwise_or.at(level, base[groups] + (position >> 6), _BIT[position & 63])
            position = position >> 6
        self.opened[:] = sizes.shape[0]

    def place(self, sizes: np.ndarray) -> np.ndarray:
        """Place one item in each of the first ``sizes.size`` groups; the bins (int64)."""
        active = sizes.size
        sizes = sizes.astype(np.int64, copy=False)
        free = self._find(sizes, active)
        fresh = free == self.capacity
        slot = self.head_base[:active] + free
        first = self.head[slot].astype(np.int64)
        chosen = np.where(fresh, self.opened[:active], first)
        self.opened[:active] += fresh
        after = self.next[self.next_base[:active] + first]  # garbage where fresh: unused
        self.head[slot] = np.where(fresh, -1, after)
        self._unmark(free, (after < 0) & ~fresh, active)
        self._append(free - sizes, chosen, active)
        return chosen

    def _append(self, free: np.ndarray, chosen: np.ndarray, active: int) -> None:
        slot = self.head_base[:active] + free
        head = self.head[slot]
        empty = head < 0
        self.head[slot] = np.where(empty, chosen, head)
        before = np.where(empty, chosen, self.tail[slot])  # an empty list: link to itself
        self.next[self.next_base[:active] + before] = chosen
        self.next[self.next_base[:active] + chosen] = -1
        self.tail[slot] = chosen
        self._mark(free, active)

    def _mark(self, bucket: np.ndarray, active: int) -> None:
        position = bucket
        for level, base in zip(self.levels, self.level_base, strict=True):
            word = base[:active] + (position >> 6)
            level[word] |= _BIT[position & 63]
            position = position >> 6

    def _unmark(self, bucket: np.ndarray, emptied: np.ndarray, active: int) -> None:
        position, clear = bucket, emptied
        for level, base in zip(self.levels, self.level_base, strict=True):
            if not clear.any():
                return
            word = base[:active] + (position >> 6)
            value = level[word]
            value &= ~(_BIT[position & 63] * clear)
            level[word] = value
            clear = clear & (value == 0)
            position = position >> 6

    def _find(self, sizes: np.ndarray, active: int) -> np.ndarray:
        """The smallest non-empty bucket >= each size: up the levels, then down."""
        position, words, hits = sizes, [], []
        for level, base in zip(self.levels, self.level_base, strict=True):
            word = position >> 6
            words.append(word)
            hits.append(level[base[:active] + word] & _FROM[position & 63])
            position = word + 1
        top = len(self.levels) - 1
        found = np.full(active, top)
        for depth in range(top - 1, -1, -1):
            found = np.where(hits[depth] != 0, depth, found)
        index = words[top] * 64 + _lowest_bit(hits[top])
        for depth in range(top - 1, -1, -1):
            below = found > depth
            inner = self.levels[depth][self.level_base[depth][:active] + np.where(below, index, 0)]
            word = np.where(below, inner, hits[depth])
            index = np.where(below, index, words[depth]) * 64 + _lowest_bit(word)
        return index
