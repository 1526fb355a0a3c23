"""Helpers for flash-attention varlen kernels over a whole batch."""

from __future__ import annotations

import torch

__all__ = ["flatten_cu_seqlens"]


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
