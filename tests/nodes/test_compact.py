"""Compact batches (``packing.compact``): ``tokens`` in the data's width, shifted by the two
documented lines, give exactly the full batch's ``input_ids`` and ``labels`` (``label_mask``
where a label can be -100), in every mode, with masks, loss-mask files, evaluation padding,
workers and ranks; a compact loader resumes exactly, and its state is the full loader's."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from torchdata.stateful_dataloader import StatefulDataLoader

import streamload
from streamload import RankSpec, SampleStream, StreamDataset, build_loader, load_config
from streamload.errors import ConfigError, FormatError
from streamload.integrations.torchtitan import TorchtitanLoader
from streamload.nodes.compact import can_mask_labels, compact_dtype
from streamload.testing import assert_batches_equal, assert_resumes_exactly
from tests.helpers.corpus_factory import Corpus
from tests.streams.test_loss_masks import _olmo_source, write_olmo
from tests.streams.test_megatron import GOLDENS, config_of, load

pytestmark = pytest.mark.filterwarnings("ignore:each pass of")

Batch = dict[str, torch.Tensor]


def compact(cfg: dict[str, Any]) -> dict[str, Any]:
    """``cfg`` with ``packing.compact = true``."""
    return {**cfg, "packing": {**cfg.get("packing", {}), "compact": True}}


def shifted(batch: Batch) -> tuple[torch.Tensor, torch.Tensor]:
    """The training step's lines of docs/config.md "Compact batches" (device: the CPU)."""
    tokens = batch["tokens"].to("cpu", non_blocking=True).long()
    input_ids, labels = tokens[:, :-1], tokens[:, 1:]
    if "label_mask" in batch:
        labels = labels.masked_fill(~batch["label_mask"].to("cpu"), -100)
    return input_ids, labels


def run(cfg: dict[str, Any], count: int = 8, **kw: Any) -> list[Batch]:
    with build_loader(cfg, batch_size=kw.pop("batch_size", 4), **kw) as loader:
        out = []
        for batch in loader:
            out.append({k: v.clone() for k, v in batch.items()})
            if len(out) == count:
                break
    return out


def assert_compact_equals_full(cfg: dict[str, Any], count: int = 8, **kw: Any) -> list[Batch]:
    """The compact run, checked against the full run of the same config; returns it."""
    full, small = run(cfg, count, **kw), run(compact(cfg), count, **kw)
    assert len(full) == len(small) > 0
    width = None
    for i, (want, got) in enumerate(zip(full, small, strict=True)):
        input_ids, labels = shifted(got)
        assert torch.equal(input_ids, want["input_ids"]), i
        assert torch.equal(labels, want["labels"]), i
        rest = {k: v for k, v in want.items() if k not in ("input_ids", "labels")}
        ids = [k for k in ("doc_ids", "position_ids") if k in got]
        assert all(got[k].dtype == torch.int32 for k in ids)  # compact batches: compact masks
        same = {k: got[k].long() if k in ids else got[k] for k in rest}
        assert_batches_equal([rest], [same], f"batch {i}")
        assert set(got) - set(rest) <= {"tokens", "label_mask"}
        assert got["tokens"].element_size() <= 4
        width = got["tokens"].dtype if width is None else width
        assert got["tokens"].dtype == width  # one dtype for the whole run
    return small


@pytest.mark.parametrize("dtype", ["uint8", "uint16", "int32", "uint32", "int64"])
@pytest.mark.parametrize("masks", [False, True])
def test_concat_every_dtype(make_corpus: Callable[..., Corpus], dtype: str, masks: bool) -> None:
    corpus = make_corpus([300, 200], dtype=dtype, vocab_size=200)
    batches = assert_compact_equals_full(
        corpus.config(seq_len=16, packing={"masks": masks}, sampling={"shuffle": True})
    )
    want = {1: torch.uint8, 2: torch.uint16}.get(np.dtype(dtype).itemsize, torch.int32)
    assert batches[0]["tokens"].dtype == want
    assert batches[0]["tokens"].shape == (4, 17)
    assert ("label_mask" in batches[0]) == masks  # plain concat never masks a label


@pytest.mark.parametrize("mode", ["packed", "padded"])
@pytest.mark.parametrize("masks", [False, True])
def test_whole_document_modes(make_corpus: Callable[..., Corpus], mode: str, masks: bool) -> None:
    corpus = make_corpus([300, 200], mean_doc_len=6.0)
    cfg = corpus.config(
        seq_len=16, pad_token_id=999, sampling={"mode": mode}, packing={"masks": masks}
    )
    batches = assert_compact_equals_full(cfg)
    assert any(not bool(b["label_mask"].all()) for b in batches)  # padding is masked


@pytest.mark.parametrize("name", ["blend_train", "gpt_no_extra_e2", "gpt_split_valid_keep_last"])
def test_megatron_mode(tmp_path_factory: pytest.TempPathFactory, name: str) -> None:
    """Megatron's pads (-1 in the short last sample; the rolled label without the extra
    token) are input 0 and a masked label, as in the full batch."""
    prefixes = GOLDENS.write_datasets(tmp_path_factory.mktemp("megatron"))
    extra = {"num_samples": load(name)[1]["text"].shape[0] - 1} if "keep" in name else {}
    batches = assert_compact_equals_full(config_of(name, prefixes, **extra), count=100)
    assert "label_mask" in batches[0]
    assert int(min(int(b["tokens"].long().min()) for b in batches)) >= 0
    if name != "blend_train":
        assert any(not bool(b["label_mask"].all()) for b in batches)


def test_loss_mask_files_and_workers(tmp_path: Path) -> None:
    write_olmo(tmp_path / "sft", [400, 300])
    cfg = {"seq_len": 16, "eos_token_id": 0, "sources": [_olmo_source(tmp_path / "sft")]}
    for kw in ({}, {"num_workers": 2}, {"rank": 1, "world_size": 2, "num_workers": 2}):
        opts = {"options": streamload.LoaderOptions(worker_type="process")} if kw else {}
        batches = assert_compact_equals_full(cfg, **kw, **opts)
        assert any(not bool(b["label_mask"].all()) for b in batches)


def test_evaluation_padding_rows(make_corpus: Callable[..., Corpus]) -> None:
    corpus = make_corpus([300, 200])
    cfg = corpus.config(seq_len=16, sampling={"split": "80,20,0"})
    batches = assert_compact_equals_full(cfg, count=100, split="valid", batch_size=8)
    last = batches[-1]
    assert not bool(last["sample_mask"].all())
    assert not bool(last["label_mask"][~last["sample_mask"]].any())


@settings(
    max_examples=25,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(
    sizes=st.lists(st.integers(0, 300), min_size=1, max_size=3).filter(lambda s: sum(s) > 80),
    seq_len=st.integers(1, 24),
    batch=st.integers(1, 5),
    mode=st.sampled_from(["concat", "packed", "padded"]),
    masks=st.booleans(),
    dtype=st.sampled_from(["uint16", "uint32"]),
)
def test_any_corpus_any_mode(
    make_corpus: Callable[..., Corpus],
    sizes: list[int],
    seq_len: int,
    batch: int,
    mode: str,
    masks: bool,
    dtype: str,
) -> None:
    corpus = make_corpus(sizes, dtype=dtype, mean_doc_len=8.0)
    cfg = corpus.config(
        seq_len=seq_len,
        pad_token_id=999,
        sampling={"mode": mode, "shuffle": True},
        packing={"masks": masks},
    )
    assert_compact_equals_full(cfg, count=6, batch_size=batch)


@pytest.mark.parametrize("workers", [0, 2])
def test_resumes_exactly(make_corpus: Callable[..., Corpus], workers: int) -> None:
    corpus = make_corpus([300, 200], mean_doc_len=6.0)
    cfg = compact(corpus.config(seq_len=8, pad_token_id=999, sampling={"mode": "packed"}))
    assert_resumes_exactly(
        lambda: build_loader(cfg, batch_size=3, num_workers=workers),
        save_points=[0, 5, 17],
        passes=2,
    )


def test_a_full_loaders_state_resumes_compact_and_back(make_corpus: Callable[..., Corpus]) -> None:
    """The layout is not part of the position: a state resumes either way."""
    cfg = make_corpus([300, 200]).config(seq_len=8, sampling={"shuffle": True})
    for saver, loader_cfg in ((cfg, compact(cfg)), (compact(cfg), cfg)):
        first = build_loader(saver, batch_size=4)
        it = iter(first)
        for _ in range(5):
            next(it)
        state = first.state_dict()
        resumed = build_loader(loader_cfg, batch_size=4)
        resumed.load_state_dict(state)
        rest = list(it)
        again = list(resumed)
        assert len(rest) == len(again) > 0
        for a, b in zip(rest, again, strict=True):
            full, small = (a, b) if "input_ids" in a else (b, a)
            assert torch.equal(shifted(small)[0], full["input_ids"])
            assert torch.equal(shifted(small)[1], full["labels"])


def test_stream_dataset_under_stateful_dataloader(make_corpus: Callable[..., Corpus]) -> None:
    cfg = compact(make_corpus([300, 200]).config(seq_len=8, packing={"masks": True}))
    want = run(cfg, count=1000)
    stream = SampleStream.from_config(load_config(cfg))
    dl = StatefulDataLoader(StreamDataset(stream, RankSpec(0, 1, 4)), batch_size=None)
    assert_batches_equal(want, list(dl))


def test_ids_that_do_not_fit_int32_are_refused(tmp_path: Path) -> None:
    tokens = np.arange(200, dtype=np.uint32)
    tokens[37] = 2**31 + 5
    np.save(tmp_path / "big.npy", tokens)
    cfg = {"seq_len": 8, "sources": [{"name": "a", "path": str(tmp_path / "big.npy")}]}
    assert len(run(cfg, count=100)) > 0  # the full batch holds int64: fine
    with pytest.raises(FormatError, match=r"id 2147483653 does not fit the int32.*compact"):
        run(compact(cfg), count=100)


def test_config_and_adapter_errors(make_corpus: Callable[..., Corpus]) -> None:
    cfg = make_corpus([300]).config(seq_len=8)
    with pytest.raises(ConfigError, match=r"packing\.compact"):
        build_loader({**cfg, "packing": {"compact": "yes"}}, batch_size=2)
    with pytest.raises(ConfigError, match="torchtitan"):
        TorchtitanLoader(build_loader(compact(cfg), batch_size=2))


def test_which_configs_carry_a_label_mask(make_corpus: Callable[..., Corpus]) -> None:
    cfg = make_corpus([300]).config(seq_len=8)
    source = cfg["sources"][0]

    def needs(**changes: Any) -> bool:
        return can_mask_labels(SampleStream.from_config(load_config({**cfg, **changes})))

    assert not needs()
    assert not needs(packing={"masks": True, "eod_mask_loss": False})
    assert needs(packing={"masks": True})
    assert needs(sampling={"mode": "packed"}, pad_token_id=999)
    assert needs(sources=[{**source, "on_error": "skip"}])
    assert compact_dtype(np.dtype("uint16")) == np.uint16
    assert compact_dtype(np.dtype("uint32")) == np.int32
