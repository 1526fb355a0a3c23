"""How many labels of a packed/padded epoch are trained: what a fine-tuner checks first.

A sample's label at input position ``t`` is token ``t + 1``; it is ``-100`` (not trained)
over the padding, where the data's loss mask says token ``t + 1`` is not trained (a prompt),
and with ``packing.masks = true`` where token ``t + 1`` opens the next item (a conversation
boundary). So an item of ``n`` tokens from stream offset ``s`` trains the labels of its
tokens ``s + 1 … s + n − 1`` whose mask flag is set; its first token is never the target of
one of its own labels (with ``packing.masks = false``, the label before it, the previous
item's last position, is trained when the flag of ``s`` is set and the item is not its
sample's first).

The count reads the masks once, in spans of :data:`SPAN_TOKENS` over the items sorted by
offset (a prefix sum per span, then two lookups per item); a source without masks costs no
read (every token is trained). Example: items ``(s=0, n=3)`` and ``(s=3, n=2)`` packed in one
sample, mask ``[0, 1, 1, 0, 1]``: item 0 trains tokens 1, 2 (2 labels), item 1 trains token 4
(1 label); with ``packing.masks = false`` the label predicting token 3 would count too, but
its flag is 0: 3 labels either way.
"""

from __future__ import annotations

import numpy as np

from streamload.streams.shard_set import ShardSet

__all__ = ["SPAN_TOKENS", "trained_labels"]

SPAN_TOKENS = 1 << 22
"""Mask bytes read at once (4 MiB; their prefix sum is 8 bytes a token)."""


def trained_labels(
    starts: np.ndarray,
    lengths: np.ndarray,
    first_in_sample: np.ndarray,
    masks: ShardSet | None,
    boundaries_masked: bool,
) -> int:
    """Trained labels of the items (module docstring).

    Args:
        starts: int64 ``[n]``, each item's stream offset.
        lengths: ``[n]``, each item's tokens.
        first_in_sample: bool ``[n]``, whether the item opens its sample.
        masks: The source's loss masks, ``None`` when it has none.
        boundaries_masked: ``packing.masks``: the label that crosses into an item is -100.
    """
    starts = np.asarray(starts, dtype=np.int64)
    lengths = np.asarray(lengths, dtype=np.int64)
    crossing = ~np.asarray(first_in_sample, dtype=bool)
    if masks is None:
        inner = int((lengths - 1).sum())
        return inner if boundaries_masked else inner + int(crossing.sum())
    order = np.argsort(starts, kind="stable")
    starts, lengths, crossing = starts[order], lengths[order], crossing[order]
    ends = np.maximum.accumulate(starts + lengths)
    total, i = 0, 0
    while i < starts.size:
        lo = int(starts[i])
        j = max(i + 1, int(np.searchsorted(ends, lo + SPAN_TOKENS, side="right")))
        hi = int(ends[j - 1])
        flags = masks.windows(np.array([lo], dtype=np.int64), hi - lo, np.dtype(np.uint8))[0]
        before = np.zeros(flags.size + 1, dtype=np.int64)
        np.cumsum(flags != 0, out=before[1:])
        first, last = starts[i:j] - lo, starts[i:j] + lengths[i:j] - lo
        total += int((before[last] - before[np.minimum(first + 1, last)]).sum())
        if not boundaries_masked:
            total += int(((flags[first] != 0) & crossing[i:j]).sum())
        i = j
    return total
