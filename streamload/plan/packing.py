"""Whole documents as samples: items, best-fit decreasing packing, padding.

An **item** is a run of at most ``seq_len + 1`` tokens of one document. A sample holds whole
items, contiguous from position 0, and padding after them.

Worked example, seq_len 4 (capacity 5 tokens), documents of 7, 1, 0, 5, 3 and 2 tokens:

* :func:`document_items` with ``"split"``: document 0 (7 tokens) becomes pieces ``[0, 5)`` and
  ``[4, 7)`` (stride 4: every next-token pair once); the empty document 2 gives no item. Items
  (id: length) ``0:5 1:3 2:1 3:5 4:3 5:2``. With ``"truncate"`` item 1 is dropped instead and
  its 2 tokens past the first 5 are counted in ``truncated_tokens``; with ``"drop"`` document
  0 gives no item at all (items ``0:1 1:5 2:3 3:2``), counted in ``dropped_documents`` (1)
  and ``dropped_tokens`` (7).
* :func:`pack_items`, capacity 5 (the whole epoch, or one group): by length descending (ties:
  lower id first) ``0 3 1 4 5 2``. Item 0 opens bin 0 (free 0), item 3 opens bin 1 (free 0),
  item 1 opens bin 2 (free 2), item 4 opens bin 3 (free 2), item 5 (2 tokens) fits bins 2
  and 3 exactly: the tie goes to bin 2, which has had 2 tokens free the longest (free 0);
  item 2 goes to bin 3 (free 1). Samples ``[0] [3] [1 5] [2 4]``: 4 samples, the bound
  ``ceil(19 / 5)``.
* :func:`pad_items`: one item per sample, ``[0] [1] [2] [3] [4] [5]``.

By default best fit decreasing runs over all items at once (:data:`ALGORITHM`), as OLMo-core's
OBFD does, in one step per (item size, free space) pair rather than per item
(:mod:`streamload.plan._pack_levels`): ~0.1 CPU µs per item in all, the sort included; then
the bins it left with free space are packed again, each closed exactly where the sizes left
allow, and replace them when that takes fewer bins (:mod:`streamload.plan._pack_refill`;
never more bins, here none: the 4 samples are the bound). With
a ``group_size`` (:data:`GROUPED_ALGORITHM`, the only rule before issue 34, groups of
:data:`GROUP_SIZE`) it runs independently over consecutive groups of that many items. Each
group keeps its open bins in buckets by free space (first-in first-out lists) and a bitmap of
the non-empty buckets, so "the smallest free space >= L" is a lowest-set-bit lookup. Two
implementations give the same grouped plan: up to ``_LOOP_GROUPS`` groups, a Python loop per
item with a Python int as the bitmap (~0.5 µs per item at capacity 2049); beyond, the groups
advance in lockstep, step ``i`` placing the ``i``-th largest item of every group in one numpy
operation, over levels of uint64 bitmaps (64 buckets per word, 64 words per word above;
:mod:`streamload.plan._pack_lockstep`).
Hand-written because no packing library offers a deterministic best fit over many groups.
"""

from __future__ import annotations

import collections
from dataclasses import dataclass, field

import numpy as np

from streamload.errors import ConfigError
from streamload.plan._pack_levels import pack_by_levels
from streamload.plan._pack_lockstep import pack_in_lockstep
from streamload.plan._pack_refill import refill

__all__ = [
    "ALGORITHM",
    "GROUPED_ALGORITHM",
    "GROUP_SIZE",
    "LONG_DOCUMENTS",
    "ItemPlan",
    "SamplePlan",
    "checked_bounds",
    "document_items",
    "pack_bound",
    "pack_items",
    "pad_items",
]

ALGORITHM = "bfd-epoch-refill-v1"
"""Names the default packing rule (order, ties, one best fit over the whole epoch, then the
refill of the bins with free space); part of any key of a cached plan and of a state's
fingerprint: changing the rule changes which items share a sample. On 10^6 log-normal
documents 0.0012 % (seq_len 2048) and 0 % (8192) more samples than the bound
(``benchmarks/packing.py``; the best fit alone: 0.0079 % and 0.0020 %)."""
GROUPED_ALGORITHM = "bfd-groups-fifo-v1"
"""Names the rule with a ``group_size`` (best fit within consecutive groups of items): the
only rule before issue 34, always with groups of :data:`GROUP_SIZE`."""
GROUP_SIZE = 4096
"""Items per packing group of plans (and states) made before issue 34: 0.06 % (seq_len 2048)
and 0.14 % (8192) more samples than the bound on log-normal documents."""
LONG_DOCUMENTS = ("split", "truncate", "drop")
"""Values of ``long_documents``: what happens to a document longer than ``seq_len + 1``."""

_LOOP_GROUPS = 64
"""Up to this many groups a Python loop packs faster than lockstep numpy steps (whose fixed
cost per step is paid ``group_size`` times): ~0.5-1.4 µs per item vs ~0.3 s per batch."""


@dataclass(frozen=True)
class ItemPlan:
    """A source's items, in storage order."""

    starts: np.ndarray
    """int64 ``[n]``: stream offset of each item's first token (may share memory with the
    ``doc_bounds`` it came from)."""
    lengths: np.ndarray
    """int32 ``[n]``: tokens of each item, ``1 <= length <= seq_len + 1``."""
    documents: int
    """Non-empty documents."""
    cut_items: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    """int64 ``[k]``, ascending: the items whose document ``"truncate"`` cut (empty with
    ``"split"``)."""
    cut_tokens: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    """int64 ``[k]``: tokens dropped after each of :attr:`cut_items`."""
    dropped_documents: int = 0
    """Documents ``"drop"`` left out whole (longer than ``seq_len + 1``)."""
    dropped_tokens: int = 0
    """Their tokens."""

    @property
    def truncated_tokens(self) -> int:
        """Tokens dropped by ``"truncate"`` (0 with ``"split"``)."""
        return int(self.cut_tokens.sum())


@dataclass(frozen=True)
class SamplePlan:
    """Which items each sample holds (CSR)."""

    offsets: np.ndarray
    """int64 ``[s + 1]``, ``offsets[0] = 0``."""
    items: np.ndarray
    """int64 ``[n]``: sample ``j`` holds ``items[offsets[j]:offsets[j + 1]]``, ascending."""

    @property
    def num_samples(self) -> int:
        """s, samples in the plan."""
        return int(self.offsets.size) - 1


def document_items(doc_bounds: np.ndarray, seq_len: int, long_documents: str) -> ItemPlan:
    """Cut a source's documents into items of at most ``seq_len + 1`` tokens.

    Args:
        doc_bounds: int64 ``[d + 1]``, non-decreasing stream offsets; document ``i`` is
            tokens ``[doc_bounds[i], doc_bounds[i + 1])`` (equal bounds: an empty document).
        seq_len: L; items hold at most L + 1 tokens.
        long_documents: ``"split"``: a document of T > L + 1 tokens becomes the pieces
            ``[k·L, min(k·L + L + 1, T))`` for ``k = 0 … ⌊(T − 2) / L⌋`` (every next-token
            pair once, the last piece at least 2 tokens); ``"truncate"``: its first L + 1;
            ``"drop"``: no item (an SFT conversation cut short would train on a reply
            without its end), counted in :attr:`ItemPlan.dropped_documents`.

    Returns:
        The items in storage order (empty documents give none; a 1-token document gives one;
        :attr:`ItemPlan.documents` counts the dropped ones too).

    Raises:
        ConfigError: ``seq_len`` or ``long_documents`` is invalid.
        ValueError: ``doc_bounds`` is not a non-decreasing 1-D array of offsets >= 0.
    """
    if long_documents not in LONG_DOCUMENTS:
        raise ConfigError(f"long_documents {long_documents!r}: expected one of {LONG_DOCUMENTS}")
    if not 1 <= seq_len < np.iinfo(np.int32).max:
        raise ConfigError(f"seq_len {seq_len}: expected 1 <= seq_len < 2**31 - 1")
    bounds, sizes = checked_bounds(doc_bounds)
    window, documents = seq_len + 1, int(np.count_nonzero(sizes))
    starts = bounds[:-1]
    if documents < sizes.size:
        kept = np.flatnonzero(sizes)
        starts, sizes = starts[kept], sizes[kept]
    lengths = np.minimum(sizes, window, out=np.empty(sizes.size, np.int32), casting="unsafe")
    long = np.flatnonzero(sizes > window)
    if long_documents == "truncate":
        return ItemPlan(starts, lengths, documents, long, sizes[long] - window)
    if long_documents == "drop" and long.size:
        fits = sizes <= window
        dropped = int(sizes[long].sum())
        return ItemPlan(
            starts[fits], lengths[fits], documents,
            dropped_documents=int(long.size), dropped_tokens=dropped,
        )  # fmt: skip
    if long.size:
        starts, lengths = _insert_pieces(starts, sizes, lengths, long, seq_len)
    return ItemPlan(starts, lengths, documents)


def checked_bounds(doc_bounds: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(bounds, sizes)``: ``doc_bounds`` as int64 and each document's tokens.

    Raises:
        ValueError: not a non-decreasing 1-D array of stream offsets >= 0.
    """
    bounds = np.asarray(doc_bounds, dtype=np.int64)
    if bounds.ndim != 1 or bounds.size < 1:
        raise ValueError(f"doc_bounds of shape {bounds.shape}: expected [documents + 1]")
    sizes = np.diff(bounds)
    if bounds[0] < 0 or np.any(sizes < 0):
        raise ValueError("doc_bounds: expected non-decreasing stream offsets >= 0")
    return bounds, sizes


def _insert_pieces(
    starts: np.ndarray, sizes: np.ndarray, lengths: np.ndarray, long: np.ndarray, seq_len: int
) -> tuple[np.ndarray, np.ndarray]:
    """Insert the second and later pieces of the documents ``long`` after their first piece
    (sparse work: no per-item gather over all documents)."""
    extra = (sizes[long] - 2) // seq_len
    piece = np.arange(int(extra.sum())) - np.repeat(np.cumsum(extra) - extra, extra) + 1
    begin = np.repeat(starts[long], extra) + piece * seq_len
    end = np.repeat(starts[long] + sizes[long], extra)
    at = np.repeat(long + 1, extra)
    piece_lengths = np.minimum(end - begin, seq_len + 1).astype(np.int32)
    return np.insert(starts, at, begin), np.insert(lengths, at, piece_lengths)


def pad_items(num_items: int) -> SamplePlan:
    """The padded plan: sample ``j`` holds item ``j`` alone.

    Raises:
        ValueError: ``num_items`` is negative.
    """
    if num_items < 0:
        raise ValueError(f"num_items {num_items}: expected >= 0")
    return SamplePlan(
        np.arange(num_items + 1, dtype=np.int64), np.arange(num_items, dtype=np.int64)
    )


def pack_bound(lengths: np.ndarray, capacity: int) -> int:
    """``⌈sum(lengths) / capacity⌉``: no packing can use fewer samples."""
    return -(-int(np.asarray(lengths, dtype=np.int64).sum()) // capacity)


def pack_items(
    lengths: np.ndarray,
    capacity: int,
    group_size: int | None = None,
    max_items: int | None = None,
) -> SamplePlan:
    """Best-fit decreasing of items into samples of ``capacity`` tokens, over the whole
    epoch or group by group.

    Without ``group_size`` all items form one group; with it, groups are items ``[0, g)``,
    ``[g, 2g)``, … (``g = group_size``; the last may be shorter). Within a group, items go
    in order of length descending (ties: lower id first) into the open bin with the least
    free space that holds them (ties: the bin that has had that free space the longest);
    when none does, into a new bin. With ``max_items`` a bin
    that holds that many items is closed, whatever its free space (grain's
    ``max_sequences_per_bin``); the rule is otherwise unchanged.

    Args:
        lengths: int ``[n]``, every length in ``[1, capacity]``.
        capacity: Tokens per sample (``seq_len + 1``).
        group_size: Items per group (>= 1); ``None``: one group of all items, built in
            steps per (size, free space) (:mod:`streamload.plan._pack_levels`: the plan of
            any ``group_size >= len(lengths)``), then refilled: the bins with free space are
            packed again, closing each exactly where it can, when that takes fewer bins
            (:mod:`streamload.plan._pack_refill`; the cap is kept, no bin is ever added).
        max_items: The most items per sample (>= 1); ``None``: no cap.

    Returns:
        Samples in order: groups in order, a group's bins in the order they were opened
        (without ``group_size``, when the refill saved a bin: the bins it left as they were,
        in that order, then the refilled bins in the order it closed them); each sample's
        items ascending.

    Raises:
        ValueError: a length is outside ``[1, capacity]``, or ``capacity``,
            ``group_size`` or ``max_items`` is below 1.
    """
    sizes = np.asarray(lengths, dtype=np.int64)
    if capacity < 1 or (group_size is not None and group_size < 1):
        raise ValueError(f"capacity {capacity}, group_size {group_size}: expected both >= 1")
    if sizes.ndim != 1:
        raise ValueError(f"lengths of shape {sizes.shape}: expected one dimension")
    if sizes.size and (sizes.min() < 1 or sizes.max() > capacity):
        raise ValueError(f"item lengths span {sizes.min()}..{sizes.max()}: expected 1..{capacity}")
    if max_items is not None and max_items < 1:
        raise ValueError(f"max_items {max_items}: expected >= 1 or None")
    if group_size is None:
        plan = pack_by_levels(sizes, capacity, max_items)
        return SamplePlan(*refill(sizes, capacity, max_items, *plan))
    group = group_size
    if max_items is not None:
        return _pack_capped(sizes, capacity, group, max_items)
    if sizes.size <= _LOOP_GROUPS * group:
        return _pack_in_python(sizes, capacity, group)
    return _pack_in_lockstep(sizes, capacity, group)


def _pack_in_python(sizes: np.ndarray, capacity: int, group: int) -> SamplePlan:
    """:func:`pack_items` one item at a time: cheaper than numpy calls for a few groups.

    Per group: a first-in first-out list of bins per free space, and a Python int whose bit
    ``f`` says "a bin has ``f`` tokens free" (bit ``capacity``: a new bin); the best fit for
    ``size`` is the lowest set bit at or above ``size``.
    """
    bins = np.empty(sizes.size, dtype=np.int64)
    opened = 0
    for first in range(0, sizes.size, group):
        order = np.argsort(capacity - sizes[first : first + group], kind="stable")
        lists: dict[int, collections.deque[int]] = collections.defaultdict(collections.deque)
        bitmap, fresh, chosen = 1 << capacity, 0, []
        for size in sizes[first + order].tolist():
            above = bitmap >> size
            free = size + (above & -above).bit_length() - 1
            if free == capacity:
                found, fresh = fresh, fresh + 1
            else:
                found = lists[free].popleft()
                if not lists[free]:
                    bitmap ^= 1 << free
            chosen.append(found)
            if free > size:  # a full bin is never chosen again
                lists[free - size].append(found)
                bitmap |= 1 << (free - size)
        bins[first + order] = np.array(chosen, dtype=np.int64) + opened
        opened += fresh
    offsets = np.concatenate([[0], np.cumsum(np.bincount(bins))]).astype(np.int64)
    return SamplePlan(offsets, np.argsort(bins, kind="stable").astype(np.int64))


def _pack_capped(sizes: np.ndarray, capacity: int, group: int, cap: int) -> SamplePlan:
    """:func:`_pack_in_python` with at most ``cap`` items per bin: a bin that reaches ``cap``
    leaves the free-space lists like a full one. A separate loop keeps the uncapped one's
    cost; the Python loop serves every group count (~0.5-1.3 µs per item)."""
    bins = np.empty(sizes.size, dtype=np.int64)
    opened = 0
    for first in range(0, sizes.size, group):
        order = np.argsort(capacity - sizes[first : first + group], kind="stable")
        lists: dict[int, collections.deque[int]] = collections.defaultdict(collections.deque)
        bitmap, chosen = 1 << capacity, []
        counts: list[int] = []  # items in each of the group's bins
        for size in sizes[first + order].tolist():
            above = bitmap >> size
            free = size + (above & -above).bit_length() - 1
            if free == capacity:
                found = len(counts)
                counts.append(1)
            else:
                found = lists[free].popleft()
                if not lists[free]:
                    bitmap ^= 1 << free
                counts[found] += 1
            chosen.append(found)
            if free > size and counts[found] < cap:  # a full or capped bin is closed
                lists[free - size].append(found)
                bitmap |= 1 << (free - size)
        bins[first + order] = np.array(chosen, dtype=np.int64) + opened
        opened += len(counts)
    offsets = np.concatenate([[0], np.cumsum(np.bincount(bins))]).astype(np.int64)
    return SamplePlan(offsets, np.argsort(bins, kind="stable").astype(np.int64))


def _pack_in_lockstep(sizes: np.ndarray, capacity: int, group: int) -> SamplePlan:
    """:func:`pack_items` with all groups advancing one item per numpy step (many groups;
    :mod:`streamload.plan._pack_lockstep`)."""
    return SamplePlan(*pack_in_lockstep(sizes, capacity, group))
