"""A training step on packed batches: whole documents, one varlen attention call per layer.

    python examples/packed_varlen.py     # CPU: about 3 s (10 steps); CUDA: a varlen kernel
    python examples/packed_varlen.py --steps 200 --seq-len 512 --batch-size 16  # larger

Attention: on CUDA flash-attn's ``flash_attn_varlen_func`` when installed, else torch's own
flash kernel ``torch.nn.attention.varlen.varlen_attn`` (torch >= 2.10; no extra package;
causal is ``window_size=(-1, 0)``); on CPU, where neither kernel runs, a dense
``scaled_dot_product_attention`` per row under a block-causal mask built from the segments'
ids (what the batch's ``doc_ids`` hold), the same result at ``O(L^2)`` per row.

With ``sampling.mode = "packed"`` and ``[packing] masks = true``, a batch row holds whole
documents, then ``pad_token_id``. The model flattens the ``[b, seq_len]`` tokens to
``[b * seq_len]`` and attends inside each segment of ``flatten_cu_seqlens(batch["cu_seqlens"])``
only, so no token sees another document; ``position_ids`` restart at 0 per document.

How padding appears in ``cu_seqlens``: when a row holds ``d < seq_len + 1`` data tokens, a
segment starts at input position ``d``, so ``cu_seqlens[i] = [0, s1, ..., d, seq_len, ...]``.
The padding is the row's last segment: attention never mixes it with a document, and all its
labels are -100, so it adds nothing to the loss. The repeated ``seq_len`` tail (zero-length
segments that give every row the same shape) vanishes in ``flatten_cu_seqlens``.
"""

from __future__ import annotations

import argparse
import itertools
import tempfile
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor

import streamload
from streamload.ops.varlen import flatten_cu_seqlens

try:  # flash-attn's kernel: CUDA, fp16/bf16
    from flash_attn import flash_attn_varlen_func
except ImportError:
    flash_attn_varlen_func = None
try:  # torch's own flash kernel (torch >= 2.10): CUDA, fp16/bf16; no extra package
    from torch.nn.attention.varlen import varlen_attn
except ImportError:
    varlen_attn = None

VOCAB, EOS, PAD = 256, 0, 1


def write_corpus(folder: Path, seq_len: int, num_tokens: int = 60_000) -> dict[str, Any]:
    """One NPY shard of log-normal documents ending in EOS; returns a packed-mode config.

    Documents count up (``t, t + 1, ...``, never EOS or PAD), so the loss visibly falls.
    """
    rng = np.random.default_rng(0)
    tokens = (2 + np.arange(num_tokens) % (VOCAB - 2)).astype(np.uint16)
    ends = np.cumsum(rng.lognormal(np.log(24), 0.8, size=num_tokens // 8).astype(int) + 1)
    tokens[ends[ends <= num_tokens] - 1] = EOS
    np.save(folder / "shard_00000.npy", tokens)
    return {
        "seq_len": seq_len,
        "seed": 0,
        "eos_token_id": EOS,
        "pad_token_id": PAD,
        "vocab_size": VOCAB,
        "sources": [{"name": "docs", "path": str(folder)}],
        "sampling": {"mode": "packed", "cache_dir": str(folder / "plans")},  # the packing plan
        "packing": {"masks": True},
    }


def varlen_attention(
    q: Tensor, k: Tensor, v: Tensor, cu_seqlens: Tensor, max_seqlen: int, causal: bool = True
) -> Tensor:
    """Reference varlen attention: ``[total, heads, dim]`` tensors, attention inside each
    segment ``cu_seqlens[i]:cu_seqlens[i + 1]`` only (``max_seqlen`` is unused; it is there to
    match ``flash_attn_varlen_func``)."""
    outs = []
    for start, end in itertools.pairwise(cu_seqlens.tolist()):
        qs, ks, vs = (x[start:end].transpose(0, 1) for x in (q, k, v))  # [heads, len, dim]
        outs.append(F.scaled_dot_product_attention(qs, ks, vs, is_causal=causal).transpose(0, 1))
    return torch.cat(outs)


def segment_ids(cu_seqlens: Tensor, rows: int) -> Tensor:
    """Flat ``cu_seqlens`` over ``rows`` rows of equal length → ``[rows, L]`` segment numbers:
    two tokens of a row share one exactly when they share a ``doc_ids`` value (documents and
    the padding; zero-length segments take no token)."""
    lengths = (cu_seqlens[1:] - cu_seqlens[:-1]).long()
    ids = torch.repeat_interleave(torch.arange(lengths.numel(), device=lengths.device), lengths)
    return ids.view(rows, -1)


def dense_doc_attention(q: Tensor, k: Tensor, v: Tensor, doc_ids: Tensor) -> Tensor:
    """Causal attention inside each document, dense: flat ``[b * L, heads, dim]`` q/k/v and
    ``[b, L]`` document ids; token i sees token j iff same id and ``j <= i``."""
    b, length = doc_ids.shape
    causal = torch.ones(length, length, dtype=torch.bool, device=q.device).tril()
    mask = (doc_ids[:, :, None] == doc_ids[:, None, :]) & causal  # [b, L, L]
    qr, kr, vr = (x.unflatten(0, (b, length)).transpose(1, 2) for x in (q, k, v))  # [b, h, L, d]
    out = F.scaled_dot_product_attention(qr, kr, vr, attn_mask=mask[:, None])
    return out.transpose(1, 2).flatten(0, 1)


def attention(q: Tensor, k: Tensor, v: Tensor, cu: Tensor, m: int, rows: int = 1) -> Tensor:
    """Causal varlen attention over ``rows`` rows flattened to ``[rows * L, heads, dim]``: on
    CUDA flash-attn's kernel when installed, else torch's
    ``torch.nn.attention.varlen.varlen_attn`` where this torch has it; on CPU (neither kernel
    runs there) dense attention under the block-causal mask of the segments' ids."""
    if q.is_cuda and (flash_attn_varlen_func is not None or varlen_attn is not None):
        # Both kernels take fp16/bf16. Contiguous as in their documented calls: under autocast
        # q, k, v are already bf16 strided views of one qkv projection (a copy only then).
        half = [x.bfloat16().contiguous() for x in (q, k, v)]
        cu = cu.to(torch.int32)
        if flash_attn_varlen_func is not None:
            out: Tensor = flash_attn_varlen_func(*half, cu, cu, m, m, causal=True)
        else:  # causal: no key after the query, any number before it
            out = varlen_attn(*half, cu, cu, m, m, window_size=(-1, 0))
        return out.to(q.dtype)
    return dense_doc_attention(q, k, v, segment_ids(cu, rows))


def attention_kind(device: torch.device) -> str:
    """Which attention :func:`attention` runs on ``device`` (printed by the example)."""
    if device.type == "cuda" and flash_attn_varlen_func is not None:
        return "flash_attn_varlen_func"
    if device.type == "cuda" and varlen_attn is not None:
        return "torch.nn.attention.varlen.varlen_attn"
    return "dense reference (scaled_dot_product_attention, block-causal mask from doc ids)"


class TinyLM(torch.nn.Module):
    """Embedding + learned positions, one pre-norm attention block, LM head."""

    def __init__(self, vocab: int, seq_len: int, dim: int = 64, heads: int = 4) -> None:
        super().__init__()
        self.heads = heads
        self.embed = torch.nn.Embedding(vocab, dim)
        self.pos = torch.nn.Embedding(seq_len, dim)  # indexed by position_ids
        self.norm = torch.nn.LayerNorm(dim)
        self.qkv = torch.nn.Linear(dim, 3 * dim)
        self.proj = torch.nn.Linear(dim, dim)
        self.head = torch.nn.Linear(dim, vocab)

    def forward(self, input_ids: Tensor, position_ids: Tensor, cu: Tensor, m: int) -> Tensor:
        """``[b, L]`` ids and positions, flat ``cu_seqlens`` → logits ``[b * L, vocab]``."""
        x = (self.embed(input_ids) + self.pos(position_ids)).flatten(0, 1)  # [b * L, dim]
        q, k, v = self.qkv(self.norm(x)).unflatten(1, (3, self.heads, -1)).unbind(1)
        x = x + self.proj(attention(q, k, v, cu, m, rows=input_ids.shape[0]).flatten(1))
        return self.head(x)


def train_step(model: TinyLM, optim: torch.optim.Optimizer, batch: dict[str, Any]) -> float:
    """One optimizer step on a packed batch; returns the loss."""
    device = next(model.parameters()).device
    cu_seqlens, max_seqlen = flatten_cu_seqlens(batch["cu_seqlens"].to(device))
    ids, pos = batch["input_ids"].to(device), batch["position_ids"].to(device)
    logits = model(ids, pos, cu_seqlens, max_seqlen)
    loss = F.cross_entropy(logits, batch["labels"].to(device).flatten(), ignore_index=-100)
    optim.zero_grad()
    loss.backward()
    optim.step()
    return loss.item()


def run(
    folder: Path, *, steps: int = 10, batch_size: int = 8, seq_len: int = 64
) -> tuple[list[float], bool]:
    """Train ``steps`` steps, then check that a loader resumed from the state gives the same
    next batch. Returns the losses and whether it did."""
    torch.manual_seed(0)
    config = write_corpus(folder, seq_len)
    model = TinyLM(VOCAB, seq_len).to("cuda" if torch.cuda.is_available() else "cpu")
    print(f"attention: {attention_kind(next(model.parameters()).device)}")
    optim = torch.optim.AdamW(model.parameters(), lr=1e-2)
    losses: list[float] = []
    with streamload.build_loader(config, batch_size=batch_size) as loader:
        batches = iter(loader)
        for step in range(1, steps + 1):
            batch = next(batches)
            losses.append(train_step(model, optim, batch))
            segments = flatten_cu_seqlens(batch["cu_seqlens"])[0].numel() - 1
            print(f"step {step} loss {losses[-1]:.3f} ({segments} segments in {batch_size} rows)")
        state = loader.state_dict()  # what a checkpoint saves
        expected = next(batches)
    with streamload.build_loader(config, batch_size=batch_size) as resumed:
        resumed.load_state_dict(state)
        got = next(iter(resumed))
    same = all(torch.equal(expected[key], got[key]) for key in expected)
    print(f"resumed loader: next batch {'identical' if same else 'DIFFERENT'}")
    return losses, same


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=10, help="training steps (default 10)")
    parser.add_argument("--batch-size", type=int, default=8, help="rows per batch (default 8)")
    parser.add_argument("--seq-len", type=int, default=64, help="tokens per row (default 64)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        _, same = run(Path(tmp), steps=args.steps, batch_size=args.batch_size, seq_len=args.seq_len)
    if not same:
        raise SystemExit("the resumed loader gave another batch")


if __name__ == "__main__":
    main()
