"""Megatron's mask switches on top of the packing masks, and its pad convention.

megatron-core's ``_get_ltor_masks_and_position_ids(tokens, eod, reset_position_ids,
reset_attention_mask, eod_mask_loss)`` works on the ``seq_len`` input tokens of a sample:

* ``eod_mask_loss``: ``loss_mask[t] = 0`` where ``tokens[t] == eod`` (the label after an EOD
  opens the next document). Here: ``labels[t] = -100``.
* ``reset_position_ids``: positions restart at 0 after every EOD.
* ``reset_attention_mask``: a token after an EOD attends only to its own document. Here the
  segments are ``doc_ids`` / ``cu_seqlens`` / ``max_seqlen`` (never a dense ``S x S`` mask);
  without it every sample is one segment.

These are exactly :func:`streamload.ops.masks.packing_fields` on document starts found from
EOS (``starts[t] = tokens[t - 1] == eos``), each switched off on its own. A sample shorter
than ``seq_len + extra`` (Megatron pads it with ``-1``) gets input 0 and label -100, like
Megatron's ``tokens[pad] = 0`` and ``loss_mask[labels == pad] = 0``.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from streamload.ops.masks import IGNORE_INDEX, packing_fields

__all__ = ["mask_pad", "switched_fields"]


def mask_pad(input_ids: np.ndarray, labels: np.ndarray) -> None:
    """Pad ids (negative) become input 0 and label -100, in place."""
    input_ids[input_ids < 0] = 0
    labels[labels < 0] = IGNORE_INDEX


def switched_fields(
    starts: np.ndarray,
    labels: np.ndarray,
    flags: tuple[bool, bool, bool],
    fill: int = IGNORE_INDEX,
    *,
    dtype: Any = np.int64,
    ids: bool = True,
) -> dict[str, np.ndarray]:
    """:func:`packing_fields` with Megatron's three switches applied.

    Args:
        starts: Document starts, bool ``[n, L + 1]``.
        labels: int64 ``[n, L]`` (or a bool "trained" mask), set to ``fill`` in place where
            ``eod_mask_loss`` masks.
        flags: ``(reset_position_ids, reset_attention_mask, eod_mask_loss)``.
        fill: What a masked label becomes (-100; false in a "trained" mask).
        dtype: Of ``doc_ids`` and ``position_ids``.
        ids: Add ``doc_ids`` and ``position_ids`` (``False``: ``cu_seqlens`` and
            ``max_seqlen`` only).
    """
    reset_positions, reset_attention, eod_mask_loss = flags
    masked = labels if eod_mask_loss else labels.copy()
    fields = packing_fields(starts, masked, fill, dtype=dtype, ids=ids)
    n, length = labels.shape
    if not reset_positions and ids:
        fields["position_ids"] = np.tile(np.arange(length, dtype=dtype), (n, 1))
    if not reset_attention:
        if ids:
            fields["doc_ids"] = np.zeros((n, length), dtype=dtype)
        cu_seqlens = np.full((n, length + 1), length, dtype=np.int32)
        cu_seqlens[:, 0] = 0
        fields["cu_seqlens"] = cu_seqlens
        fields["max_seqlen"] = np.full(n, length, dtype=np.int32)
    return fields
