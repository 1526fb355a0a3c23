"""The small GPT of ``gpu_step.py``: torch only, dense causal or varlen (packed) attention.

Token and learned position embeddings, ``layers`` pre-norm blocks (causal self-attention,
4x GELU MLP), final norm, untied head over ``vocab`` ids (token ids are taken modulo it on
the device: the benchmark corpus has 128,256 ids and a full-size head would dwarf a small
model). Attention:

* dense batches ``[b, L]``: ``scaled_dot_product_attention(is_causal=True)``;
* packed batches, flat ``cu_seqlens`` given: ``examples/packed_varlen.py``'s ``attention``
  over the flattened ``[b * L, heads, dim]`` tokens: on CUDA flash-attn's kernel if
  installed, else torch's own ``torch.nn.attention.varlen.varlen_attn`` (causal:
  ``window_size=(-1, 0)``; bf16); elsewhere a dense ``scaled_dot_product_attention`` per row
  under a block-causal mask built from the segments' ids (what ``doc_ids`` holds).
"""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

import torch
import torch.nn.functional as F
from torch import Tensor, nn

__all__ = ["GPT", "VARLEN"]


def _load_example() -> ModuleType:
    """``examples/packed_varlen.py`` as a module: the benchmark runs the example's attention,
    so what it measures is what the example shows a user."""
    path = Path(__file__).resolve().parents[1] / "examples" / "packed_varlen.py"
    spec = importlib.util.spec_from_file_location("packed_varlen", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


VARLEN = _load_example()
"""The example: ``attention(q, k, v, cu_seqlens, max_seqlen, rows)``, ``attention_kind``."""


class Block(nn.Module):
    """Pre-norm block: causal self-attention (dense or varlen), then a 4x GELU MLP."""

    def __init__(self, width: int, heads: int) -> None:
        super().__init__()
        self.heads = heads
        self.norm1, self.norm2 = nn.LayerNorm(width), nn.LayerNorm(width)
        self.qkv, self.out = nn.Linear(width, 3 * width), nn.Linear(width, width)
        self.mlp = nn.Sequential(nn.Linear(width, 4 * width), nn.GELU(),
                                 nn.Linear(4 * width, width))  # fmt: skip

    def forward(self, x: Tensor, cu_seqlens: Tensor | None = None, max_seqlen: int = 0) -> Tensor:
        rows, length, width = x.shape
        qkv = self.qkv(self.norm1(x)).view(rows, length, 3, self.heads, width // self.heads)
        if cu_seqlens is None:
            q, k, v = qkv.permute(2, 0, 3, 1, 4)  # [rows, heads, L, dim] each
            attended = F.scaled_dot_product_attention(q, k, v, is_causal=True).transpose(1, 2)
        else:
            q, k, v = qkv.flatten(0, 1).unbind(1)  # [rows * L, heads, dim] each
            attended = VARLEN.attention(q, k, v, cu_seqlens, max_seqlen, rows=rows)
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
