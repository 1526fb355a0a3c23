"""The small GPT of ``gpu_step.py``: torch only, dense causal or varlen (packed) attention.

Token and learned position embeddings, ``layers`` pre-norm blocks (causal self-attention,
4x GELU MLP), final norm, untied head over ``vocab`` ids (token ids are taken modulo it on
the device: the benchmark corpus has 128,256 ids and a full-size head would dwarf a small
model). Attention:

* dense batches ``[b, L]``: ``scaled_dot_product_attention(is_causal=True)``;
* packed batches, flat ``cu_seqlens`` given: on CUDA torch's own flash kernel
  ``torch.nn.attention.varlen.varlen_attn`` over the flattened ``[b * L, heads, dim]`` tokens
  (causal: ``window_size=(-1, 0)``; bf16); elsewhere a dense ``scaled_dot_product_attention``
  per row under a block-causal mask built from the segments' ids (what ``doc_ids`` holds),
  the same result at ``O(L^2)`` per row.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

try:  # torch >= 2.10: CUDA flash kernel for packed sequences, no extra package
    from torch.nn.attention.varlen import varlen_attn
except ImportError:  # pragma: no cover - older torch
    varlen_attn = None

__all__ = ["GPT", "segment_ids", "varlen_attention"]


def segment_ids(cu_seqlens: Tensor, rows: int) -> Tensor:
    """Flat ``cu_seqlens`` over ``rows`` rows of equal length → ``[rows, L]`` segment numbers
    (numbered across the batch; zero-length segments take no token). Two tokens of a row
    share a number exactly when they share a ``doc_ids`` value."""
    lengths = (cu_seqlens[1:] - cu_seqlens[:-1]).long()
    ids = torch.repeat_interleave(torch.arange(lengths.numel(), device=lengths.device), lengths)
    return ids.view(rows, -1)


def varlen_attention(q: Tensor, k: Tensor, v: Tensor, cu_seqlens: Tensor, max_seqlen: int,
                     rows: int) -> Tensor:  # fmt: skip
    """Causal attention inside each segment of flat ``[rows * L, heads, dim]`` q/k/v."""
    if q.is_cuda and varlen_attn is not None:
        half = [x.to(torch.bfloat16) for x in (q, k, v)]  # the kernel takes fp16/bf16 only
        out = varlen_attn(*half, cu_seqlens, cu_seqlens, max_seqlen, max_seqlen,
                          window_size=(-1, 0))  # fmt: skip
        return out.to(q.dtype)  # type: ignore[union-attr]
    ids = segment_ids(cu_seqlens, rows)  # [rows, L]
    length = ids.shape[1]
    causal = torch.ones(length, length, dtype=torch.bool, device=q.device).tril()
    mask = (ids[:, :, None] == ids[:, None, :]) & causal
    qr, kr, vr = (x.unflatten(0, (rows, length)).transpose(1, 2) for x in (q, k, v))
    out = F.scaled_dot_product_attention(qr, kr, vr, attn_mask=mask[:, None])
    return out.transpose(1, 2).flatten(0, 1)


class Block(nn.Module):
    """Pre-norm block: causal self-attention (dense or varlen), then a 4x GELU MLP."""

    def __init__(self, width: int, heads: int) -> None:
        super().__init__()
        self.heads = heads
        self.norm1, self.norm2 = nn.LayerNorm(width), nn.LayerNorm(width)
        self.qkv, self.out = nn.Linear(width, 3 * width), nn.Linear(width, width)
        self.mlp = nn.Sequential(nn.Linear(width, 4 * width), nn.GELU(),
                                 nn.Linear(4 * width, width))  # fmt: skip

    def forward(self, x: Tensor, cu_seqlens: Tensor | None, max_seqlen: int) -> Tensor:
        rows, length, width = x.shape
        qkv = self.qkv(self.norm1(x)).view(rows, length, 3, self.heads, width // self.heads)
        if cu_seqlens is None:
            q, k, v = qkv.permute(2, 0, 3, 1, 4)  # [rows, heads, L, dim] each
            attended = F.scaled_dot_product_attention(q, k, v, is_causal=True).transpose(1, 2)
        else:
            q, k, v = qkv.flatten(0, 1).unbind(1)  # [rows * L, heads, dim] each
            attended = varlen_attention(q, k, v, cu_seqlens, max_seqlen, rows)
        x = x + self.out(attended.reshape(rows, length, width))
        return x + self.mlp(self.norm2(x))


class GPT(nn.Module):
    """Embeddings, blocks, final norm, untied head."""

    def __init__(self, vocab: int, seq_len: int, width: int, layers: int, heads: int) -> None:
        super().__init__()
        self.vocab = vocab
        self.embed, self.pos = nn.Embedding(vocab, width), nn.Embedding(seq_len, width)
        self.blocks = nn.ModuleList(Block(width, heads) for _ in range(layers))
        self.norm, self.head = nn.LayerNorm(width), nn.Linear(width, vocab, bias=False)

    def forward(self, input_ids: Tensor, position_ids: Tensor | None = None,
                cu_seqlens: Tensor | None = None, max_seqlen: int = 0) -> Tensor:  # fmt: skip
        """``[b, L]`` ids (any integer dtype), optional positions and flat ``cu_seqlens``
        → logits ``[b, L, vocab]``."""
        ids = input_ids.long() % self.vocab
        if position_ids is None:
            position_ids = torch.arange(ids.shape[1], device=ids.device)
        x = self.embed(ids) + self.pos(position_ids)
        for block in self.blocks:
            x = block(x, cu_seqlens, max_seqlen)
        logits: Tensor = self.head(self.norm(x))
        return logits
