"""Refill: repack the bins best fit left with free space, closing each bin exactly.

Best fit decreasing over log-normal documents leaves most bins full and a few percent with a
small gap: when it reaches items of some size ``s``, every open gap is smaller than ``s``, so
it opens bins that take ``capacity // s`` items of size ``s`` each and keep the remainder
free, and the items small enough to close those remainders run out (seq_len 2048, 2·10^5
documents: ~1,600 bins with up to ~33 tokens free; 5-7 bins over the bound in all). Their
gaps add up to several bins' worth of tokens that no single move can gather.

The refill takes every bin with free space (the set ``R``; at most :data:`MAX_ITEMS` items:
beyond, the bins with the most free space) and packs their items again, one bin at a time,
from a histogram of the sizes left (a Python int whose bit ``s`` says "an item of size ``s``
is left", as :mod:`streamload.plan._pack_levels` keeps free space):

* an item that fills the gap exactly, when one is left;
* else the largest item that fits, unless it would leave a gap smaller than the smallest item
  left (a gap nothing can close): then the largest item that leaves room for that one;
* the bin is closed when full, when nothing left fits, or when it holds ``cap`` items.

Mixing sizes this way closes most bins exactly (2·10^5 documents at seq_len 2048: 0-1 bins
over the bound instead of 5-7). Ties between items of one size go to the lowest id. If the
refill does not use fewer bins than ``R`` had, the plan is kept as it was, so the pass never
adds a bin. Cost: one Python step per item of ``R`` (0.5-1 µs; ``R`` holds 7-9 % of the items
of log-normal documents: 0.5-1.2 CPU s at 10^7 documents and seq_len 2048, ~1 s at 8192), none
when ``R``'s free space is under one bin.
"""

from __future__ import annotations

import numpy as np

from streamload.plan._pack_levels import _stable_order

__all__ = ["MAX_ITEMS", "refill"]

MAX_ITEMS = 1 << 21
"""The most items one refill repacks (~1-2 CPU s): 10^7 log-normal documents put ~0.8·10^6
(seq_len 2048) to ~0.9·10^6 (8192) items in bins with free space; data whose every bin has
some (items of one size that do not divide the capacity) would put all of them."""


def refill(
    sizes: np.ndarray, capacity: int, cap: int | None, offsets: np.ndarray, items: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """The plan ``(offsets, items)`` with its bins that have free space repacked, when that
    saves a bin; else the plan unchanged.

    Samples of the result: the bins left as they were, in their order, then the refilled
    bins in the order the refill closed them; each sample's items ascending.

    Args:
        sizes: int64 ``[n]``, each in ``[1, capacity]``.
        capacity: Tokens per bin.
        cap: The most items per bin, or ``None``.
        offsets: int64 ``[b + 1]``, a plan of ``sizes`` (every bin non-empty, within
            ``capacity`` and ``cap``).
        items: int64 ``[n]``, its items.

    Returns:
        ``(offsets, items)`` of the plan, with no more bins than the given one.
    """
    bins = offsets.size - 1
    if bins < 2:
        return offsets, items
    fill = np.add.reduceat(sizes[items], offsets[:-1])
    counts = np.diff(offsets)
    gapped = _chosen_bins(capacity - fill, counts)
    spare = int((capacity - fill[gapped]).sum())
    if spare < capacity:  # R's tokens need as many bins as R has
        return offsets, items
    in_r = np.repeat(gapped, counts)  # per position of ``items``
    ids = np.sort(items[in_r])
    by_size = _stable_order(capacity - sizes[ids], capacity)  # size desc, id asc
    closed = np.empty(ids.size, dtype=np.int64)
    closed[by_size] = _close_bins(sizes[ids[by_size]], capacity, cap)
    new_bins = int(closed.max()) + 1
    if new_bins >= int(np.count_nonzero(gapped)):
        return offsets, items
    # The kept bins are runs of ``items`` in order; the refilled ones follow, by bin then id
    # (no sort of all n items).
    refilled = ids[_stable_order(closed, new_bins)]
    sizes_per_bin = np.concatenate([counts[~gapped], np.bincount(closed, minlength=new_bins)])
    new_offsets = np.concatenate([[0], np.cumsum(sizes_per_bin)]).astype(np.int64)
    return new_offsets, np.concatenate([items[~in_r], refilled]).astype(np.int64)


def _chosen_bins(free: np.ndarray, counts: np.ndarray) -> np.ndarray:
    """bool ``[b]``: the bins to refill, those with free space; when they hold more than
    :data:`MAX_ITEMS` items, those with the most free space (ties: lower bin) that hold at
    most that many, which bounds the Python loop's work whatever the data."""
    gapped = free > 0
    if int(counts[gapped].sum()) <= MAX_ITEMS:
        return gapped
    candidates = np.flatnonzero(gapped)
    candidates = candidates[np.argsort(-free[candidates], kind="stable")]
    within = np.cumsum(counts[candidates]) <= MAX_ITEMS
    chosen = np.zeros(free.size, dtype=bool)
    chosen[candidates[within]] = True
    return chosen


def _close_bins(ordered: np.ndarray, capacity: int, cap: int | None) -> np.ndarray:
    """The bin (from 0, in the order they close) of each of ``ordered`` (sizes, descending):
    the rule of the module docstring. Items of one size are taken in their order here."""
    n = ordered.size
    counts = np.bincount(ordered, minlength=capacity + 1).tolist()
    starts = (np.cumsum(counts[::-1])[::-1] - counts).tolist()  # first position of each size
    bitmap = 0
    for size in np.flatnonzero(counts).tolist():
        bitmap |= 1 << size
    limit = n + 1 if cap is None else cap
    out = [0] * n
    left, current = n, 0
    while left:
        gap, held = capacity, 0
        while bitmap and gap and held < limit:
            size = gap if bitmap >> gap & 1 else (bitmap & ((2 << gap) - 1)).bit_length() - 1
            if size < 0:
                break  # nothing left fits
            smallest = (bitmap & -bitmap).bit_length() - 1
            if size != gap and gap - size < smallest and held + 1 < limit:
                room = bitmap & ((2 << (gap - smallest)) - 1) if gap >= smallest else 0
                if room:  # leave room for the smallest item left
                    size = room.bit_length() - 1
            out[starts[size]] = current
            starts[size] += 1
            counts[size] -= 1
            if not counts[size]:
                bitmap ^= 1 << size
            gap, held, left = gap - size, held + 1, left - 1
        current += 1
    return np.array(out, dtype=np.int64)
