"""Cheap masks (issue 35): ``packing.mask_dtype = "int32"`` gives the int64 fields' values in
int32; ``packing.mask_fields = "cu_seqlens"`` gives ``cu_seqlens`` and ``max_seqlen`` only,
from which ``ids_from_cu_seqlens`` derives exactly the loader's ``doc_ids`` and
``position_ids``; the keys are validated with errors naming them."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from streamload import build_loader
from streamload.errors import ConfigError
from streamload.ops.masks import packing_fields, starts_from_eos
from streamload.ops.varlen import ids_from_cu_seqlens
from tests.helpers.corpus_factory import Corpus

Batch = dict[str, torch.Tensor]


@settings(max_examples=60, deadline=None)
@given(
    rows=st.integers(1, 5),
    length=st.integers(1, 40),
    density=st.floats(0.0, 0.6),
    seed=st.integers(0, 2**16),
)
def test_ids_from_cu_seqlens_equal_the_fields(
    rows: int, length: int, density: float, seed: int
) -> None:
    rng = np.random.default_rng(seed)
    tokens = np.where(rng.random((rows, length + 1)) < density, 0, 7).astype(np.int64)
    starts = starts_from_eos(tokens, 0)
    want = packing_fields(starts, tokens[:, 1:].copy())
    narrow = packing_fields(starts, tokens[:, 1:].copy(), dtype=np.int32)
    only = packing_fields(starts, tokens[:, 1:].copy(), ids=False)
    assert list(only) == ["cu_seqlens", "max_seqlen"]
    for key in want:
        assert np.array_equal(narrow[key], want[key]), key
        assert key in ("doc_ids", "position_ids") or np.array_equal(only[key], want[key])
    assert narrow["doc_ids"].dtype == narrow["position_ids"].dtype == np.int32
    for dtype in (torch.int64, torch.int32):
        doc, pos = ids_from_cu_seqlens(torch.from_numpy(only["cu_seqlens"]), dtype)
        assert doc.dtype == pos.dtype == dtype
        assert np.array_equal(doc.numpy(), want["doc_ids"])
        assert np.array_equal(pos.numpy(), want["position_ids"])


def first_batches(cfg: dict[str, Any], count: int = 6, **kw: Any) -> list[Batch]:
    with build_loader(cfg, batch_size=4, **kw) as loader:
        out = []
        for batch in loader:
            out.append({k: v.clone() for k, v in batch.items()})
            if len(out) == count:
                break
    return out


@pytest.mark.parametrize("mode", ["concat", "packed"])
@pytest.mark.parametrize("workers", [(0, "thread"), (2, "process")])
def test_narrow_and_cu_seqlens_only_batches_equal_the_default(
    make_corpus: Callable[..., Corpus], mode: str, workers: tuple[int, str]
) -> None:
    corpus = make_corpus([400, 300], mean_doc_len=9.0)
    cfg = corpus.config(seq_len=16, sampling={"mode": mode, "shuffle": True}, pad_token_id=999)
    kw = {"num_workers": workers[0], "options": {"worker_type": workers[1]}}
    want = first_batches({**cfg, "packing": {"masks": True}}, **kw)
    narrow = first_batches({**cfg, "packing": {"masks": True, "mask_dtype": "int32"}}, **kw)
    only = first_batches({**cfg, "packing": {"masks": True, "mask_fields": "cu_seqlens"}}, **kw)
    assert len(want) == len(narrow) == len(only) == 6
    for full, small, bare in zip(want, narrow, only, strict=True):
        assert list(small) == list(full) and set(full) - set(bare) == {"doc_ids", "position_ids"}
        for key, value in full.items():
            narrowed = key in ("doc_ids", "position_ids")
            assert small[key].dtype == (torch.int32 if narrowed else value.dtype), key
            assert torch.equal(small[key].long(), value.long()), key
            assert narrowed or torch.equal(bare[key], value), key
        doc, pos = ids_from_cu_seqlens(bare["cu_seqlens"])
        assert torch.equal(doc, full["doc_ids"]) and torch.equal(pos, full["position_ids"])


@pytest.mark.parametrize(
    ("packing", "names"),
    [
        ({"masks": True, "mask_dtype": "int16"}, "packing.mask_dtype = 'int16'"),
        ({"masks": True, "mask_fields": "doc_ids"}, "packing.mask_fields = 'doc_ids'"),
        ({"mask_dtype": "int32"}, "needs packing.masks = true"),
        ({"mask_fields": "cu_seqlens"}, "needs packing.masks = true"),
        (
            {"masks": True, "mask_fields": "cu_seqlens", "reset_position_ids": False},
            "reset_position_ids equal to reset_attention_mask",
        ),
    ],
)
def test_mask_keys_are_validated(
    make_corpus: Callable[..., Corpus], packing: dict[str, Any], names: str
) -> None:
    corpus = make_corpus([100])
    with pytest.raises(ConfigError, match=names.replace("(", r"\(")):
        build_loader(corpus.config(seq_len=8, packing=packing), batch_size=2)
