"""``streamload show``'s library side: a step's view equals what ``build_loader`` delivered at
that step (ordered, every tensor), and its documents trace back to the right shard rows."""

from __future__ import annotations

import itertools
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

import streamload
from streamload.errors import ConfigError
from streamload.formats.datatrove.datatrove import DatatroveWriter
from streamload.formats.dolma.dolma import DolmaWriter
from streamload.tools.show import StepBatch, StepRequest, load_step, parse_batch_sizes
from streamload.tools.show_report import describe_step, label_ranges, load_decoder
from tests.helpers.corpus_factory import Corpus
from tests.helpers.shards import write_megatron_documents
from tests.helpers.tokenizer import train_bpe

Batch = dict[str, torch.Tensor]


def assert_same_batch(got: Batch, want: Batch, where: str) -> None:
    assert sorted(got) == sorted(want), where
    for key, value in want.items():
        assert torch.equal(got[key], value), f"{where}: {key} differs"


def view(cfg: dict[str, Any], **request: Any) -> StepBatch:
    stream = streamload.build_stream(streamload.load_config(cfg))
    return load_step(stream, StepRequest(**request))


def assert_views_match_loaders(
    cfg: dict[str, Any], world: int, steps: Sequence[int], pass_index: int = 0
) -> None:
    """Every rank's loader batches at each optimizer step (its ``grad_accum_steps``
    micro-batches) equal the whole-step view's rank slices and the single-rank view (two
    passes are walked when ``pass_index`` is 1)."""
    accum = cfg.get("grad_accum_steps", 1)
    per_rank = cfg["global_batch_size"] // (world * accum)
    for rank in range(world):
        loader = streamload.build_loader(cfg, batch_size=per_rank, rank=rank, world_size=world)
        delivered = [list(loader) for _ in range(pass_index + 1)][pass_index]
        for step in steps:
            whole = view(cfg, step=step, pass_index=pass_index, world_size=world)
            mine = view(cfg, step=step, pass_index=pass_index, world_size=world, rank=rank)
            assert mine.micro_batches.tolist() == np.repeat(range(accum), per_rank).tolist()
            for micro in range(accum):
                where = f"pass {pass_index} step {step} micro-batch {micro} rank {rank}"
                want = delivered[step * accum + micro]
                assert_same_batch(whole.rank_batch(rank, micro), want, where)
                assert_same_batch(mine.rank_batch(rank, micro), want, where + " (--rank)")


def test_a_mixture_step_is_the_loaders_batch_on_every_rank(
    make_corpus: Callable[..., Corpus],
) -> None:
    a, b = make_corpus([600], seed=1), make_corpus([500, 300], seed=2)
    cfg = a.config(seq_len=16, global_batch_size=6, packing={"masks": True})
    cfg["sampling"] = {"shuffle": True, "num_samples": 60}
    cfg["sources"] = [
        {"name": "a", "path": str(a.folder), "dtype": a.dtype, "weight": 0.7},
        {"name": "b", "path": str(b.folder), "dtype": b.dtype, "weight": 0.3},
    ]
    cfg["schedule"] = [{"start_step": 4, "weights": {"a": 0.2, "b": 0.8}}]
    assert_views_match_loaders(cfg, world=2, steps=[0, 3, 4, 9])


@pytest.mark.filterwarnings("ignore:each pass of")
def test_a_step_under_gradient_accumulation_shows_its_micro_batches(
    make_corpus: Callable[..., Corpus],
) -> None:
    a, b = make_corpus([600], seed=1), make_corpus([500, 300], seed=2)
    cfg = a.config(seq_len=16, global_batch_size=12, packing={"masks": True})
    cfg["grad_accum_steps"] = 3  # 2 ranks x 2 samples x 3 micro-batches
    cfg["sampling"] = {"shuffle": True, "num_samples": 100}
    cfg["sources"] = [
        {"name": "a", "path": str(a.folder), "dtype": a.dtype, "weight": 0.7},
        {"name": "b", "path": str(b.folder), "dtype": b.dtype, "weight": 0.3},
    ]
    cfg["schedule"] = [{"start_step": 4, "weights": {"a": 0.2, "b": 0.8}}]
    assert_views_match_loaders(cfg, world=2, steps=[0, 3, 4, 7])
    stream = streamload.build_stream(streamload.load_config(cfg))
    request = StepRequest(step=4, world_size=2)
    report = describe_step(stream, load_step(stream, request))
    assert (report["global_batch_size"], report["grad_accum_steps"]) == (12, 3)
    assert (report["world_size"], report["batch_size"]) == (2, 2)
    assert [s["micro_batch"] for s in report["samples"]] == [0] * 4 + [1] * 4 + [2] * 4
    assert [s["rank"] for s in report["samples"]] == [0, 0, 1, 1] * 3
    assert [s["row"] for s in report["samples"]] == [0, 1] * 6
    assert [s["sample_index"] for s in report["samples"]] == list(range(48, 60))
    with pytest.raises(ConfigError, match=r"the pass ends before it|beyond the end of pass 0"):
        view(cfg, step=8, world_size=2)  # 100 samples: 8 whole steps of 12


@pytest.mark.filterwarnings("ignore:each pass of")
def test_a_step_of_a_batch_size_ramp_shows_its_micro_batches(
    make_corpus: Callable[..., Corpus],
) -> None:
    a, b = make_corpus([600], seed=1), make_corpus([500, 300], seed=2)
    cfg = a.config(seq_len=16, global_batch_size=12, rampup_batch_size=[4, 4, 10])
    cfg["sampling"] = {"shuffle": True, "num_samples": 100}  # steps 4, 4, 8, 12, 12, ...
    cfg["sources"] = [
        {"name": "a", "path": str(a.folder), "dtype": a.dtype, "weight": 0.7},
        {"name": "b", "path": str(b.folder), "dtype": b.dtype, "weight": 0.3},
    ]
    micro = [1, 1, 2, 3, 3, 3]  # micro-batches of 2 ranks x 2 per step
    for rank in range(2):
        delivered = list(streamload.build_loader(cfg, batch_size=2, rank=rank, world_size=2))
        for step in (0, 2, 3, 5):
            shown = view(cfg, step=step, world_size=2, rank=rank, batch_size=2)
            assert shown.grad_accum_steps == micro[step]
            for m in range(micro[step]):
                want = delivered[sum(micro[:step]) + m]
                assert_same_batch(shown.rank_batch(rank, m), want, f"step {step} micro {m}")
    with pytest.raises(ConfigError, match="--batch-size is needed with a batch size schedule"):
        view(cfg, step=0, world_size=2)
    with pytest.raises(ConfigError, match="--step 30 lies beyond the end of pass 0"):
        view(cfg, step=30, world_size=2, batch_size=2)


@pytest.mark.parametrize(
    ("request_args", "match"),
    [
        ({"step": 0, "world_size": 3}, "global_batch_size = 8 in the config does not split "
         "over grad_accum_steps 2 x --world-size 3"),
        ({"step": 0, "world_size": 2, "batch_size": 4}, "grad_accum_steps 2 x world_size 2 x "
         "batch_size 4 = 16"),
        ({"step": 0, "batch_sizes": ((0, 5),)},
         "size 5 at step 0 .* split over grad_accum_steps 2"),
    ],
)  # fmt: skip
def test_wrong_input_under_gradient_accumulation_is_named(
    make_corpus: Callable[..., Corpus], request_args: dict[str, Any], match: str
) -> None:
    cfg = make_corpus([300]).config(seq_len=8, global_batch_size=8)
    with pytest.raises(ConfigError, match=match):
        view({**cfg, "grad_accum_steps": 2}, **request_args)


@pytest.mark.filterwarnings("ignore:each pass of")
@pytest.mark.parametrize("masks", [True, False])
def test_a_packed_step_is_the_loaders_batch_in_a_later_pass(
    make_corpus: Callable[..., Corpus], masks: bool
) -> None:
    corpus = make_corpus([700], mean_doc_len=9.0)
    cfg = corpus.config(
        seq_len=16,
        pad_token_id=1,
        global_batch_size=4,
        sampling={"mode": "packed", "shuffle": True},
        packing={"masks": masks},
    )
    assert_views_match_loaders(cfg, world=2, steps=[0, 5], pass_index=1)


def test_a_run_resumed_with_another_global_batch_size(
    make_corpus: Callable[..., Corpus],
) -> None:
    a, b = make_corpus([600], seed=3), make_corpus([400], seed=4)
    cfg = a.config(seq_len=8, global_batch_size=4, sampling={"shuffle": True})
    cfg["sources"] = [
        {"name": "a", "path": str(a.folder), "dtype": a.dtype, "weight": 0.5},
        {"name": "b", "path": str(b.folder), "dtype": b.dtype, "weight": 0.5},
    ]
    first = streamload.build_loader(cfg, batch_size=4)
    it = iter(first)
    for _ in range(3):
        next(it)
    state = first.state_dict()
    bigger = {**cfg, "global_batch_size": 6}
    resumed = streamload.build_loader(bigger, batch_size=3, rank=1, world_size=2)
    resumed.load_state_dict(state)
    delivered = list(itertools.islice(resumed, 3))
    sizes = parse_batch_sizes("0:4, 3:6")
    assert sizes == ((0, 4), (3, 6))
    for k, batch in enumerate(delivered):
        shown = view(bigger, step=3 + k, world_size=2, rank=1, batch_sizes=sizes)
        assert_same_batch(shown.batch, batch, f"step {3 + k}")


def write_dolma(folder: Path, docs_per_shard: Sequence[int]) -> dict[int, tuple[str, str, int]]:
    """Shards of documents whose every token is its number + 2 (EOS 0 closes it); returns
    ``{token: (id, src, number in its shard)}``."""
    folder.mkdir()
    out, number = {}, 0
    rng = np.random.default_rng(0)
    for shard, count in enumerate(docs_per_shard):
        writer = DolmaWriter(folder / f"part-{shard}-00000.npy", "uint16", mtime=0)
        for index in range(count):
            size = int(rng.integers(3, 14))
            doc = np.append(np.full(size, number + 2), 0)
            ident, src = f"doc-{number}", f"s3://raw/{shard}.json.gz"
            writer.add_document(doc, doc_id=ident, src=src)
            out[number + 2] = (ident, src, index)
            number += 1
        writer.close()
    return out


@pytest.mark.parametrize("mode", ["concat", "packed"])
def test_documents_carry_their_dolma_id_and_source(tmp_path: Path, mode: str) -> None:
    docs = write_dolma(tmp_path / "dolma", [30, 25])
    cfg = {
        "seq_len": 16, "seed": 1, "eos_token_id": 0, "pad_token_id": 1, "global_batch_size": 4,
        "sources": [{"name": "d", "path": str(tmp_path / "dolma"), "dtype": "uint16"}],
        "sampling": {"mode": mode, "shuffle": True},
    }  # fmt: skip
    stream = streamload.build_stream(streamload.load_config(cfg))
    report = describe_step(stream, load_step(stream, StepRequest(step=2)))
    traced = 0
    for sample in report["samples"]:
        assert sample["documents_from"] == ("items" if mode == "packed" else "index")
        for doc in sample["documents"]:
            if doc["kind"] == "padding":
                continue
            token = sample["input_ids"][doc["start"]]
            if token == 0:  # a segment that is only the EOS of a document cut before it
                assert doc["continued"]
                continue
            ident, src, index = docs[token]
            assert (doc["metadata"]["id"], doc["metadata"]["src"]) == (ident, src)
            assert doc["document"] == index
            assert doc["continued"] == (doc["shard_offset"] > doc["document_start"])
            traced += 1
    assert traced >= 4


def test_datatrove_shards_name_their_tokenizer(tmp_path: Path) -> None:
    writer = DatatroveWriter(tmp_path / "a.ds", "gpt2", 2)
    for k in range(20):
        writer.add_document(np.append(np.full(5, k + 2), 0))
    writer.close()
    cfg = {"seq_len": 8, "seed": 0, "sources": [{"name": "t", "path": str(tmp_path / "a.ds")}]}
    stream = streamload.build_stream(streamload.load_config(cfg))
    report = describe_step(stream, load_step(stream, StepRequest(step=1, batch_size=2)))
    assert report["shards"] == {
        str(tmp_path / "a.ds"): {"format": "datatrove", "tokenizer": "gpt2"}
    }
    assert all(d["metadata"] is None for s in report["samples"] for d in s["documents"])


def test_masked_positions_are_the_labels_set_to_ignore(make_corpus: Callable[..., Corpus]) -> None:
    assert label_ranges(np.array([-100, 3, -100, -100, 5, -100])) == [[0, 1], [2, 4], [5, 6]]
    assert label_ranges(np.array([1, 2])) == []
    corpus = make_corpus([500], mean_doc_len=5.0)
    cfg = corpus.config(seq_len=16, global_batch_size=4, packing={"masks": True})
    stream = streamload.build_stream(streamload.load_config(cfg))
    step = load_step(stream, StepRequest(step=3))
    report = describe_step(stream, step)
    for row, sample in enumerate(report["samples"]):
        labels = step.batch["labels"][row].numpy()
        masked = np.zeros(16, dtype=bool)
        for a, b in sample["masked"]:
            masked[a:b] = True
        np.testing.assert_array_equal(masked, labels == -100)
        starts = [d["start"] for d in sample["documents"]]
        assert starts == [0, *(np.flatnonzero(labels[:-1] == -100) + 1).tolist()]


def test_decoded_text_is_each_documents_text(tmp_path: Path) -> None:
    texts = [f"story {k}: the cat sat on mat {k}" for k in range(12)]
    train_bpe(tmp_path / "tok.json", texts)
    decode, size = load_decoder(str(tmp_path / "tok.json"))
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(str(tmp_path / "tok.json"))
    (tmp_path / "d").mkdir()
    writer = DolmaWriter(tmp_path / "d" / "part-0-00000.npy", "uint16", mtime=0)
    for k, text in enumerate(texts):
        writer.add_document(np.append(tok.encode(text).ids, 0), doc_id=str(k))
    writer.close()
    cfg = {
        "seq_len": 512, "seed": 0, "eos_token_id": 0, "pad_token_id": 1,
        "sources": [{"name": "d", "path": str(tmp_path / "d"), "dtype": "uint16"}],
        "sampling": {"mode": "padded"},
    }  # fmt: skip
    stream = streamload.build_stream(streamload.load_config(cfg))
    report = describe_step(
        stream, load_step(stream, StepRequest(step=0, batch_size=3)), (decode, size), "tok.json"
    )
    for sample in report["samples"]:
        doc, *padding = sample["documents"]
        assert doc["text"] == texts[int(doc["metadata"]["id"])] + "<|endoftext|>"
        assert [p["kind"] for p in padding] == ["padding"]
    with pytest.raises(ConfigError, match="holds 2 ids, but the step has token id"):
        describe_step(stream, load_step(stream, StepRequest(step=0, batch_size=3)),
                      (decode, 2), "tok.json")  # fmt: skip


@pytest.mark.parametrize(
    ("request_args", "match"),
    [
        ({"step": 10_000}, r"--step 10000 lies beyond the end of pass 0, which holds \d+ global"),
        ({"step": -1}, "--step = -1 must be >= 0"),
        ({"step": 0, "rank": 2, "world_size": 2}, r"--rank 2 must be in \[0, --world-size 2\)"),
        ({"step": 0, "rank": 0}, "--rank 0 needs --world-size"),
        ({"step": 0, "world_size": 3}, "global_batch_size = 4 in the config does not split"),
        ({"step": 0, "world_size": 2, "batch_size": 3}, "global_batch_size = 4 in the config"),
        ({"step": 0, "pass_index": -1}, "--pass = -1 must be >= 0"),
        ({"step": 0, "batch_sizes": ((0, 5),), "world_size": 2}, "size 5 at step 0 .* split"),
    ],
)
def test_wrong_input_is_a_config_error_naming_it(
    make_corpus: Callable[..., Corpus], request_args: dict[str, Any], match: str
) -> None:
    corpus = make_corpus([300])
    with pytest.raises(ConfigError, match=match):
        view(corpus.config(seq_len=8, global_batch_size=4), **request_args)


@pytest.mark.filterwarnings("ignore:the stream ended")
def test_a_step_after_a_source_policy_ended_the_stream(make_corpus: Callable[..., Corpus]) -> None:
    a, b = make_corpus([800], seed=5), make_corpus([100], seed=6)
    cfg = a.config(seq_len=8, global_batch_size=4)
    cfg["sources"] = [
        {"name": "a", "path": str(a.folder), "dtype": a.dtype, "weight": 0.5},
        {"name": "b", "path": str(b.folder), "dtype": b.dtype, "weight": 0.5,
         "policy": "stop"},
    ]  # fmt: skip
    steps = len(list(streamload.build_loader(cfg, batch_size=4)))  # b's 12 windows: 6 steps
    assert steps == 6
    view(cfg, step=steps - 1)
    with pytest.raises(ConfigError, match=f"--step {steps} was never delivered: source 'b'"):
        view(cfg, step=steps)


@pytest.mark.parametrize("text", ["", "1:4", "0:4,0:8", "0:4,x", "0:0", "0:4;5:8"])
def test_bad_batch_sizes_are_refused(text: str) -> None:
    with pytest.raises(ConfigError, match="--batch-sizes"):
        parse_batch_sizes(text)


def test_a_missing_tokenizer_is_named(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="no such file"):
        load_decoder(str(tmp_path / "nope.json"))


def test_a_megatron_step_is_the_loaders_batch(
    make_corpus: Callable[..., Corpus], tmp_path: Path
) -> None:
    corpus = make_corpus([900], mean_doc_len=12.0)
    tokens = corpus.stream
    ends = np.flatnonzero(tokens == corpus.eos_token_id) + 1
    lengths = np.diff(np.concatenate([[0], ends])).tolist()
    path = write_megatron_documents(tmp_path / "mg", tokens, lengths)
    cfg = corpus.config(
        seq_len=16,
        global_batch_size=4,
        source={"path": str(path)},
        sampling={"mode": "megatron", "num_samples": 40},
        packing={"masks": True, "reset_attention_mask": False},
    )
    assert_views_match_loaders(cfg, world=2, steps=[0, 9])
    assert_views_match_loaders({**cfg, "grad_accum_steps": 2, "global_batch_size": 8}, 2, [4])
    stream = streamload.build_stream(streamload.load_config(cfg))
    report = describe_step(stream, load_step(stream, StepRequest(step=9)))
    docs = [d for s in report["samples"] for d in s["documents"]]
    assert {s["documents_from"] for s in report["samples"]} == {"eos"}
    assert all(d["shard"] is None for d in docs) and len(docs) > len(report["samples"])
