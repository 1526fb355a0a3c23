"""Document-packing masks, vectorized over a whole block of windows.

Input: ``starts`` — bool ``[n, L+1]``, ``starts[i, t]`` is True when token t of window i
begins a new document (t > 0; column 0 is always False: a window's first token starts its
first segment). From these, for the L input positions:

* ``doc_ids[i, t]`` = number of document starts in ``(0, t]`` (0 for the first segment);
* ``position_ids[i, t]`` = t minus the start of t's document (restarts at 0 per document,
  Megatron ``reset_position_ids``);
* ``labels[i, t] = -100`` where ``starts[i, t + 1]``: the label token opens the next document,
  so it is not predicted from this one (Megatron ``eod_mask_loss``; KempnerForge
  ``input_doc != label_doc``);
* ``cu_seqlens[i]`` = ``[0, s_1, ..., s_k, L, L, ..., L]`` (int32, length L+1): segment
  boundaries of the inputs, padded with L, i.e. zero-length tail segments — a fixed shape
  that default collation can stack and flash-attention varlen kernels accept;
* ``max_seqlen[i]`` = the longest segment of window i.

Trace, L = 6, EOS = 0, window tokens ``[5, 0, 7, 8, 0, 9, 4]``:
starts ``[F, F, T, F, F, T, F]``; doc_ids ``[0, 0, 1, 1, 1, 2]``; position_ids
``[0, 1, 0, 1, 2, 0]``; labels ``[0, -100, 8, 0, -100, 4]``;
cu_seqlens ``[0, 2, 5, 6, 6, 6, 6]``; max_seqlen 3.
"""

from __future__ import annotations

import numpy as np

__all__ = ["IGNORE_INDEX", "packing_fields", "starts_from_eos", "starts_from_offsets"]

IGNORE_INDEX = -100
"""Label value that ``torch.nn.CrossEntropyLoss`` skips."""


def starts_from_eos(tokens: np.ndarray, eos_token_id: int) -> np.ndarray:
    """Document starts from an EOS token: a token starts a document when it follows EOS."""
    starts = np.zeros(tokens.shape, dtype=bool)
    np.equal(tokens[:, :-1], eos_token_id, out=starts[:, 1:])
    return starts


def starts_from_offsets(
    window_starts: np.ndarray, width: int, doc_starts: np.ndarray
) -> np.ndarray:
    """Document starts from a sorted array of document start offsets in the same stream.

    Args:
        window_starts: Stream offset of each window, int64 ``[n]``.
        width: Tokens per window (L + 1).
        doc_starts: Sorted stream offsets where documents begin.
    """
    n = window_starts.shape[0]
    starts = np.zeros((n, width), dtype=bool)
    lo = np.searchsorted(doc_starts, window_starts + 1, side="left")
    hi = np.searchsorted(doc_starts, window_starts + width, side="left")
    counts = hi - lo
    rows = np.repeat(np.arange(n), counts)
    first = np.repeat(lo - np.concatenate([[0], np.cumsum(counts)[:-1]]), counts)
    picks = doc_starts[first + np.arange(rows.shape[0])]
    starts[rows, picks - window_starts[rows]] = True
    return starts


def packing_fields(starts: np.ndarray, labels: np.ndarray) -> dict[str, np.ndarray]:
    """Masks of a block of windows; masks ``labels`` (int64 ``[n, L]``) in place.

    Returns:
        ``doc_ids`` and ``position_ids`` (int64 ``[n, L]``), ``cu_seqlens`` (int32
        ``[n, L+1]``), ``max_seqlen`` (int32 ``[n]``).
    """
    n, width = starts.shape
    length = width - 1
    inner = starts[:, :length]
    doc_ids = np.cumsum(inner, axis=1, dtype=np.int64)
    positions = np.arange(length, dtype=np.int64)
    last_start = np.maximum.accumulate(np.where(inner, positions, 0), axis=1)
    position_ids = positions - last_start
    labels[starts[:, 1:]] = IGNORE_INDEX
    cu_seqlens = np.full((n, width), length, dtype=np.int32)
    cu_seqlens[:, 0] = 0
    rows, cols = np.nonzero(inner)
    if rows.size:
        counts = np.bincount(rows, minlength=n)
        first = np.concatenate([[0], np.cumsum(counts)[:-1]])
        cu_seqlens[rows, np.arange(rows.size) - first[rows] + 1] = cols
    max_seqlen = np.diff(cu_seqlens, axis=1).max(axis=1).astype(np.int32)
    return {
        "doc_ids": doc_ids,
        "position_ids": position_ids,
        "cu_seqlens": cu_seqlens,
        "max_seqlen": max_seqlen,
    }
