"""Helpers for flash-attention varlen kernels over a whole batch, on the batch's device.

With ``packing.mask_fields = "cu_seqlens"`` a batch carries ``cu_seqlens`` ``[b, L+1]`` (int32,
padded with ``L``) and ``max_seqlen`` only; :func:`ids_from_cu_seqlens` derives the
``doc_ids`` and ``position_ids`` the loader would have built, on the GPU, from the
``4 * (L + 1)`` bytes per row that crossed the bus instead of ``16 * L``::

    cu_seqlens = batch["cu_seqlens"].to(device, non_blocking=True)
    doc_ids, position_ids = ids_from_cu_seqlens(cu_seqlens)
    flat, max_len = flatten_cu_seqlens(cu_seqlens)  # for flash_attn_varlen_func
"""

from __future__ import annotations

import torch

__all__ = ["flatten_cu_seqlens", "ids_from_cu_seqlens"]


def flatten_cu_seqlens(cu_seqlens: torch.Tensor) -> tuple[torch.Tensor, int]:
    """Batch ``cu_seqlens`` ``[b, L+1]`` (padded with L) → flat int32 boundaries and max length.

    The result indexes the flattened ``[b * L]`` tokens, as ``flash_attn_varlen_func`` expects:
    ``[0, ..., L, ..., 2L, ..., b*L]`` without the zero-length padding segments.

    Example:
        >>> flatten_cu_seqlens(torch.tensor([[0, 2, 3, 3], [0, 3, 3, 3]], dtype=torch.int32))
        (tensor([0, 2, 3, 6], dtype=torch.int32), 3)
    """
    b, width = cu_seqlens.shape
    length = width - 1
    offsets = torch.arange(b, dtype=cu_seqlens.dtype, device=cu_seqlens.device) * length
    flat = torch.unique_consecutive((cu_seqlens + offsets[:, None]).reshape(-1))
    max_len = int((flat[1:] - flat[:-1]).max()) if flat.numel() > 1 else 0
    return flat.to(torch.int32), max_len


def ids_from_cu_seqlens(
    cu_seqlens: torch.Tensor, dtype: torch.dtype = torch.int64
) -> tuple[torch.Tensor, torch.Tensor]:
    """``doc_ids`` and ``position_ids`` ``[b, L]`` of batch ``cu_seqlens`` ``[b, L+1]``.

    Exactly the loader's fields with ``packing.mask_fields = "all"`` (docs/config.md): a
    position's document is the number of segment starts after column 0 at or before it (one
    batched ``searchsorted`` over each row's sorted boundaries; the padding ``L`` is past
    every position), and its position is its column minus its document's start. No host
    synchronisation (no ``.item()``), on any device.

    Args:
        cu_seqlens: Batch boundaries ``[b, L+1]``, padded with ``L`` (any integer dtype).
        dtype: Of the results (int64, or int32 as ``packing.mask_dtype``).

    Example:
        >>> doc, pos = ids_from_cu_seqlens(torch.tensor([[0, 2, 5, 6, 6, 6, 6]]))
        >>> doc.tolist(), pos.tolist()
        ([[0, 0, 1, 1, 1, 2]], [[0, 1, 0, 1, 2, 0]])
    """
    b, width = cu_seqlens.shape
    length = width - 1
    columns = torch.arange(length, dtype=cu_seqlens.dtype, device=cu_seqlens.device)
    columns = columns.expand(b, length).contiguous()
    doc_ids = torch.searchsorted(cu_seqlens[:, 1:].contiguous(), columns, right=True)
    position_ids = columns - cu_seqlens.gather(1, doc_ids)
    return doc_ids.to(dtype), position_ids.to(dtype)
