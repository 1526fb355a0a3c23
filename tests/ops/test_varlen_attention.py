"""Varlen attention over packed batches (``examples/packed_varlen.py``).

On real packed batches of a real loader: the example's reference ``varlen_attention`` over
``flatten_cu_seqlens(batch["cu_seqlens"])`` equals dense attention over each row under a
block-diagonal causal mask built independently from ``doc_ids``; a document's outputs do not
depend on the other documents of its row nor on the padding (the point of ``cu_seqlens``);
the example trains and resumes. On CUDA, the real kernels are checked against the reference.
"""

from __future__ import annotations

import itertools
import math
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch
import torch.nn.functional as F

from streamload import build_loader
from streamload.ops.varlen import flatten_cu_seqlens
from tests.helpers.corpus_factory import Corpus
from tests.helpers.paths import REPO, load_script

EXAMPLE = REPO / "examples" / "packed_varlen.py"
PAD = 1
SEQ_LENS = (8, 33, 64)  # each has rows that end in padding on the corpus below
Batch = dict[str, torch.Tensor]


def load_example() -> Any:
    return load_script(EXAMPLE)


@pytest.fixture(scope="module")
def example() -> Any:
    return load_example()


@pytest.fixture(scope="module")
def batches(make_corpus: Callable[..., Corpus]) -> dict[int, list[Batch]]:
    """Every batch of pass 0 in packed mode with masks, per seq_len (b = 4)."""
    corpus = make_corpus([700, 1, 450], mean_doc_len=12.0)
    out = {}
    for seq_len in SEQ_LENS:
        cfg = corpus.config(
            seq_len=seq_len,
            pad_token_id=PAD,
            sampling={"mode": "packed"},
            packing={"masks": True},
        )
        with warnings.catch_warnings():  # a pass's last partial batch is dropped
            warnings.simplefilter("ignore")
            loader = build_loader(cfg, batch_size=4)
        out[seq_len] = [{k: v.clone() for k, v in batch.items()} for batch in loader]
        loader.close()
    return out


def segments(batch: Batch, row: int) -> list[tuple[int, int]]:
    """The non-empty segments ``(start, end)`` of a row's inputs, from its ``cu_seqlens``."""
    bounds = batch["cu_seqlens"][row].tolist()
    return [(a, b) for a, b in itertools.pairwise(bounds) if b > a]


def padding_segment(batch: Batch, row: int) -> bool:
    """Whether a row's last segment is padding: all inputs PAD, all labels -100 (the corpus's
    documents end in EOS = 0, so no document segment is all PAD)."""
    start, end = segments(batch, row)[-1]
    ids, labels = batch["input_ids"][row, start:end], batch["labels"][row, start:end]
    return bool((ids == PAD).all() and (labels == -100).all())


def dense_block_causal(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, doc_ids: torch.Tensor
) -> torch.Tensor:
    """Dense SDPA over each row: token i sees token j iff same ``doc_ids`` and ``j <= i``.

    ``q, k, v``: flat ``[b * L, heads, dim]``; returns the same layout.
    """
    b, length = doc_ids.shape
    causal = torch.ones(length, length, dtype=torch.bool).tril()
    mask = (doc_ids[:, :, None] == doc_ids[:, None, :]) & causal  # [b, L, L]
    qr, kr, vr = (x.unflatten(0, (b, length)).transpose(1, 2) for x in (q, k, v))  # [b, h, L, d]
    out = F.scaled_dot_product_attention(qr, kr, vr, attn_mask=mask[:, None])
    return out.transpose(1, 2).flatten(0, 1)


@pytest.mark.parametrize("seq_len", SEQ_LENS)
def test_reference_equals_dense_attention_under_the_doc_ids_mask(
    example: Any, batches: dict[int, list[Batch]], seq_len: int
) -> None:
    """Every batch of the pass, random q/k/v: the reference over the flat ``cu_seqlens``
    equals dense SDPA per row under ``doc_ids``' block-diagonal causal mask (padding included)."""
    generator = torch.Generator().manual_seed(seq_len)
    padded_rows = 0
    for batch in batches[seq_len]:
        b = batch["input_ids"].shape[0]
        q, k, v = torch.randn(3, b * seq_len, 2, 8, generator=generator).unbind(0)
        cu_seqlens, max_seqlen = flatten_cu_seqlens(batch["cu_seqlens"])
        assert max_seqlen == int(batch["max_seqlen"].max())
        got = example.varlen_attention(q, k, v, cu_seqlens, max_seqlen)
        torch.testing.assert_close(got, dense_block_causal(q, k, v, batch["doc_ids"]))
        padded_rows += sum(padding_segment(batch, row) for row in range(b))
    assert padded_rows > 0, "the check must cover rows that end in padding"


def model_logits(model: torch.nn.Module, ids: torch.Tensor, batch: Batch) -> torch.Tensor:
    """Logits ``[b, L, vocab]`` of ``ids`` laid out as ``batch`` (positions, segments)."""
    cu_seqlens, max_seqlen = flatten_cu_seqlens(batch["cu_seqlens"])
    with torch.no_grad():
        logits = model(ids, batch["position_ids"], cu_seqlens, max_seqlen)
    out: torch.Tensor = logits.unflatten(0, ids.shape)
    return out


@pytest.mark.parametrize("seq_len", SEQ_LENS)
def test_a_documents_outputs_ignore_the_rest_of_the_batch(
    example: Any, batches: dict[int, list[Batch]], seq_len: int
) -> None:
    """Keep the j-th segment of every row and replace every other token with a random one
    (other documents, padding): the kept segments' logits stay the same. Dense causal
    attention over whole rows (no ``cu_seqlens``) changes them: the control shows the check
    can fail."""
    torch.manual_seed(0)
    model = example.TinyLM(1000, seq_len, dim=16, heads=2).eval()
    generator = torch.Generator().manual_seed(seq_len)
    whole_rows = torch.full((1, seq_len + 1), seq_len, dtype=torch.int32)
    whole_rows[0, 0] = 0
    checked = mixed = 0
    for batch in batches[seq_len][:4]:
        ids = batch["input_ids"]
        base = model_logits(model, ids, batch)
        rows = [segments(batch, row) for row in range(ids.shape[0])]
        for j in range(max(map(len, rows))):
            keep = torch.zeros_like(ids, dtype=torch.bool)
            for row, segs in enumerate(rows):
                if j < len(segs):
                    keep[row, segs[j][0] : segs[j][1]] = True
            other = torch.where(keep, ids, torch.randint(2, 1000, ids.shape, generator=generator))
            logits = model_logits(model, other, batch)
            torch.testing.assert_close(logits[keep], base[keep])
            checked += int(keep.sum())
            if j > 0:  # control: the same tokens, one segment per row
                dense = {**batch, "cu_seqlens": whole_rows.expand(ids.shape[0], -1)}
                mixed += not torch.allclose(model_logits(model, other, dense)[keep], base[keep])
    assert checked > 0 and mixed > 0


def test_example_trains_and_resumes_on_the_next_batch(
    example: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    losses, same = example.run(tmp_path, steps=3, batch_size=4, seq_len=32)
    assert len(losses) == 3 and all(math.isfinite(loss) for loss in losses)
    assert same, "the loader resumed from state_dict() gives the same next batch"
    assert "next batch identical" in capsys.readouterr().out


def test_example_uses_the_reference_on_cpu(example: Any) -> None:
    """Neither varlen kernel runs on CPU (torch's ``varlen_attn`` raises there)."""
    q = torch.randn(10, 2, 8)
    cu_seqlens = torch.tensor([0, 3, 10], dtype=torch.int32)
    expected = example.varlen_attention(q, q, q, cu_seqlens, 7)
    torch.testing.assert_close(example.attention(q, q, q, cu_seqlens, 7), expected)
    assert example.attention_kind(torch.device("cpu")).startswith("dense reference")
    if example.flash_attn_varlen_func is None and example.varlen_attn is not None:
        assert example.attention_kind(torch.device("cuda")) == (
            "torch.nn.attention.varlen.varlen_attn"
        )


@pytest.mark.skipif(not torch.cuda.is_available(), reason="the varlen kernels need CUDA")
@pytest.mark.parametrize("kernel", ["flash_attn", "torch"])
def test_cuda_kernels_match_the_reference(
    example: Any, batches: dict[int, list[Batch]], kernel: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """flash-attn's ``flash_attn_varlen_func`` and torch's ``varlen_attn`` (causal is
    ``window_size=(-1, 0)``), in bf16, against the fp32 reference."""
    if kernel == "flash_attn":
        if example.flash_attn_varlen_func is None:
            pytest.skip("flash_attn is not installed")
        call = example.attention
    else:  # the example's own path where flash-attn is not installed
        if example.varlen_attn is None:
            pytest.skip("this torch has no torch.nn.attention.varlen")
        monkeypatch.setattr(example, "flash_attn_varlen_func", None)
        call = example.attention

    batch = batches[64][0]
    q, k, v = torch.randn(3, batch["input_ids"].numel(), 4, 64).unbind(0)
    cu_seqlens, max_seqlen = flatten_cu_seqlens(batch["cu_seqlens"])
    expected = example.varlen_attention(q, k, v, cu_seqlens, max_seqlen)
    cuda = [x.cuda() for x in (q, k, v, cu_seqlens)]
    got = call(*cuda, max_seqlen).cpu()
    torch.testing.assert_close(got, expected, atol=2e-2, rtol=2e-2)


@pytest.mark.parametrize("seq_len", SEQ_LENS)
def test_cpu_attention_is_dense_under_the_segments_doc_ids(
    example: Any, batches: dict[int, list[Batch]], seq_len: int
) -> None:
    """On CPU the example's ``attention`` (dense, block-causal mask of ``segment_ids``) equals
    the per-segment reference on every batch; ``segment_ids`` groups a row's tokens exactly
    as its ``doc_ids`` do."""
    generator = torch.Generator().manual_seed(seq_len + 1)
    for batch in batches[seq_len]:
        b = batch["input_ids"].shape[0]
        cu_seqlens, max_seqlen = flatten_cu_seqlens(batch["cu_seqlens"])
        ids = example.segment_ids(cu_seqlens, b)
        same = ids[:, :, None] == ids[:, None, :]
        docs = batch["doc_ids"]
        assert torch.equal(same, docs[:, :, None] == docs[:, None, :])
        q, k, v = torch.randn(3, b * seq_len, 2, 8, generator=generator).unbind(0)
        expected = example.varlen_attention(q, k, v, cu_seqlens, max_seqlen)
        got = example.attention(q, k, v, cu_seqlens, max_seqlen, rows=b)
        torch.testing.assert_close(got, expected)
