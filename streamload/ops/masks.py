"""Document-packing masks, vectorized over a whole block of windows.

Input: ``starts`` — bool ``[n, L+1]``, ``starts[i, t]`` is True when token t of window i
begins a new document (column 0 is ignored: a window's first token starts its first
segment whether or not a document begins there). From these, for the L input positions:

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

from typing import Any

import numpy as np

__all__ = [
    "IGNORE_INDEX",
    "field_shapes",
    "mask_padding",
    "mask_untrained",
    "packing_fields",
    "starts_from_eos",
    "starts_from_offsets",
]

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


def mask_padding(labels: np.ndarray, lengths: np.ndarray, fill: int = IGNORE_INDEX) -> None:
    """Set ``labels[i, t] = fill`` (-100) where the label token ``t + 1`` is padding, i.e. where
    ``t + 1 >= lengths[i]`` (labels int64 ``[n, L]``, or a bool "trained" mask with ``fill``
    false; in place; lengths ``[n]``).

    Trace, L = 4, lengths ``[5, 3]``, labels ``[[1, 2, 3, 4], [7, 8, 9, 9]]`` →
    ``[[1, 2, 3, 4], [7, 8, -100, -100]]``.
    """
    # Padding is each row's tail: one slice per padded row, not a [n, L] comparison of every
    # label (packed rows are full but for ~1 token on average).
    width = labels.shape[1]
    first = np.asarray(lengths, dtype=np.int64) - 1  # first masked label column
    rows = np.flatnonzero(first < width)
    for row, column in zip(rows.tolist(), np.maximum(first[rows], 0).tolist(), strict=True):
        labels[row, column:] = fill


def mask_untrained(labels: np.ndarray, loss_mask: np.ndarray) -> None:
    """Set ``labels[i, t] = -100`` where the data's loss mask says token ``t + 1`` is not
    trained, ``loss_mask[i, t + 1] == 0`` (labels int64 ``[n, L]``, in place; ``loss_mask``
    ``[n, L + 1]``, nonzero = trained: OLMo-core's ``labels_mask``, datatrove's ``.ds.loss``).

    Trace, L = 4, labels ``[[5, 6, 7, 8]]``, loss_mask ``[[0, 0, 1, 1, 0]]`` (a prompt of two
    tokens, then a trained answer, then an untrained token) → ``[[-100, 6, 7, -100]]``.

    A bool ``labels`` is a "trained" mask: it is and-ed with the loss mask instead.
    """
    if labels.dtype == np.bool_:
        np.logical_and(labels, loss_mask[:, 1:], out=labels)
        return
    # One comparison and one masked copy over the whole block: measured faster than the same
    # in cache-sized blocks of rows (benchmarks/mask_kernels.py, RESULTS.md "Loss-mask kernels").
    untrained = np.equal(loss_mask[:, 1:], 0)
    if untrained.any():  # rows of sources without masks are all ones
        np.copyto(labels, IGNORE_INDEX, where=untrained)


def packing_fields(
    starts: np.ndarray,
    labels: np.ndarray,
    fill: int = IGNORE_INDEX,
    *,
    dtype: Any = np.int64,
    ids: bool = True,
    out: dict[str, np.ndarray] | None = None,
) -> dict[str, np.ndarray]:
    """Masks of a block of windows; masks ``labels`` (int64 ``[n, L]``, or a bool "trained"
    mask with ``fill`` false) in place with ``fill``.

    Documents are sparse (one start per hundreds of tokens), so the work is done on the list
    of segments; each dense output is written by one ``np.repeat`` of a per-segment value
    (``position_ids``: the row's positions minus its segment's start column, in one pass).

    Args:
        starts: Document starts, bool ``[n, L + 1]``.
        labels: Labels to mask in place.
        fill: What a masked label becomes.
        dtype: Of ``doc_ids`` and ``position_ids`` (int64; int32 holds any ``L``).
        ids: Build ``doc_ids`` and ``position_ids`` (``False``: ``cu_seqlens`` and
            ``max_seqlen`` only, from which :mod:`streamload.ops.varlen` derives them).
        out: Arrays to write the fields into (same keys, shapes and dtypes as returned);
            ``None``: new arrays.

    Returns:
        ``doc_ids`` and ``position_ids`` (``dtype`` ``[n, L]``, with ``ids``), ``cu_seqlens``
        (int32 ``[n, L+1]``), ``max_seqlen`` (int32 ``[n]``).
    """
    n, width = starts.shape
    length = width - 1
    if not labels.flags.c_contiguous:
        raise ValueError("labels must be C-contiguous: they are masked in place")
    row, col = np.divmod(np.flatnonzero(starts), width)
    # A start at column 0 opens the window's first segment anyway; kept, it would mask the
    # previous row's last label (flat index - 1) and add an empty segment.
    keep = col > 0
    row, col = row[keep], col[keep]
    labels.reshape(-1)[row * length + col - 1] = fill
    inner = col < length
    seg_start, seg_row, seg_doc, first = _segments(n, length, row[inner], col[inner])
    seg_len = np.diff(np.append(seg_start, n * length))
    seg_col = seg_start - seg_row * length  # the segment's start column in its row
    fields = out if out is not None else _new_fields(n, length, dtype, ids)
    cu_seqlens = fields["cu_seqlens"]
    cu_seqlens.fill(length)
    cu_seqlens[seg_row, seg_doc] = seg_col
    fields["max_seqlen"][:] = np.maximum.reduceat(seg_len, first)
    if ids:
        doc_ids, position_ids = fields["doc_ids"], fields["position_ids"]
        id_type = doc_ids.dtype
        doc_ids.reshape(-1)[:] = np.repeat(seg_doc.astype(id_type), seg_len)
        column = np.arange(length, dtype=id_type)
        starts_at = np.repeat(seg_col.astype(id_type), seg_len).reshape(n, length)
        np.subtract(column, starts_at, out=position_ids)
    return fields


def _new_fields(n: int, length: int, dtype: Any, ids: bool) -> dict[str, np.ndarray]:
    """Uninitialised arrays of every field :func:`packing_fields` writes."""
    return {
        key: np.empty(shape, dtype=kind)
        for key, (kind, shape) in field_shapes(n, length, dtype, ids).items()
    }


def field_shapes(
    n: int, length: int, dtype: Any, ids: bool
) -> dict[str, tuple[np.dtype[Any], tuple[int, ...]]]:
    """``(dtype, shape)`` of each field :func:`packing_fields` returns, in its key order."""
    shapes: dict[str, tuple[np.dtype[Any], tuple[int, ...]]] = {}
    if ids:
        shapes["doc_ids"] = (np.dtype(dtype), (n, length))
        shapes["position_ids"] = (np.dtype(dtype), (n, length))
    shapes["cu_seqlens"] = (np.dtype(np.int32), (n, length + 1))
    shapes["max_seqlen"] = (np.dtype(np.int32), (n,))
    return shapes


def _segments(
    n: int, length: int, rows: np.ndarray, cols: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Segments of the flattened ``[n * length]`` inputs, in order.

    Returns:
        Flat start of each segment, its row, its document number inside the row, and the
        index of each row's first segment.
    """
    seg_start = np.concatenate([np.arange(n, dtype=np.int64) * length, rows * length + cols])
    seg_start.sort(kind="stable")
    seg_row = seg_start // length
    first = np.searchsorted(seg_row, np.arange(n))
    seg_doc = np.arange(seg_start.size) - first[seg_row]
    return seg_start, seg_row, seg_doc, first
