"""Block-local shuffling: a permutation whose nearby positions read nearby windows.

With ``sampling.shuffle_block = S`` the windows of an epoch are cut into blocks of ``S``
consecutive windows; the order of the full blocks is permuted, and the windows inside each
block are permuted again, each block with its own key. Positions ``[k·S, (k+1)·S)`` of the
epoch therefore read exactly the windows of one block (in shuffled order), so a reader only
needs one contiguous region of the corpus at a time: neighbouring requests coalesce, aligned
blocks of a remote file are reused (``storage.window_reads = "blocks"``) and page caches stay
warm (Mosaic Streaming's ``shuffle_block_size`` serves the same purpose). The last
``n mod S`` windows form a shorter block that stays last, shuffled inside.

The shuffle is weaker than a uniform one (a batch holds windows of one region of ``S``
windows); it is a pure function of ``(seed, epoch, source, S)`` like every order here.

Example:
    >>> keys = lambda part: derive_key(seed=0, epoch=0, stream=f"web/{part}")
    >>> order = block_shuffle(np.arange(10), 10, 4, keys)
    >>> sorted(order[:4].tolist()) in ([0, 1, 2, 3], [4, 5, 6, 7]), sorted(order[8:].tolist())
    (True, [8, 9])
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from streamload.plan.permutation import KeyedPermutation, derive_key

__all__ = ["block_shuffle", "derive_key"]


def block_shuffle(slots: np.ndarray, n: int, block: int, key: Callable[[str], bytes]) -> np.ndarray:
    """The window of each epoch slot under a block-local shuffle (vectorized).

    Args:
        slots: Slots in ``[0, n)`` (int64, any shape).
        n: Windows in the epoch.
        block: Windows per block (``1 <= block < n``).
        key: Key of a named part of the shuffle (``"blocks"``, ``"block=<k>"``, ``"tail"``).

    Returns:
        Window ids, same shape as ``slots``.
    """
    s = np.asarray(slots, dtype=np.int64)
    flat = s.ravel()
    full = n // block
    cut = full * block
    out = np.empty_like(flat)
    head = flat < cut
    position = flat[head]
    chosen = position // block
    if full > 1:
        chosen = KeyedPermutation(full, key("blocks"))(chosen)
    inner = position % block
    windows = np.empty_like(position)
    for value in np.unique(chosen).tolist():  # a chunk spans few blocks: a short loop
        at = chosen == value
        permute = KeyedPermutation(block, key(f"block={value}"))
        windows[at] = value * block + permute(inner[at])
    out[head] = windows
    if cut < n and not head.all():
        tail = ~head
        out[tail] = cut + KeyedPermutation(n - cut, key("tail"))(flat[tail] - cut)
    return out.reshape(s.shape)
