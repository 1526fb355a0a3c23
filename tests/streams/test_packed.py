"""Packed and padded modes end to end: every item exactly once per epoch, whole, contiguous
from position 0, padding only at sample ends, labels and masks of padding, exact resumption.

The expected items are computed here from the corpus's documents by the rule of
docs/design.md §3.1, independently of :mod:`streamload.plan.packing`.
"""

from __future__ import annotations

import itertools
from collections import Counter
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
import torch

import streamload
from streamload.streams.chunks import ChunkPlan
from streamload.testing import assert_resumes_exactly
from tests.helpers.corpus_factory import Corpus

PAD = 1


def expected_items(corpus: Corpus, seq_len: int, long_documents: str) -> Counter[tuple[int, ...]]:
    """Items of every shard's EOS-delimited documents (a trailing partial one counts)."""
    items: Counter[tuple[int, ...]] = Counter()
    for shard in corpus.tokens:
        ends = np.flatnonzero(shard == corpus.eos_token_id) + 1
        bounds = np.unique(np.concatenate([[0], ends, [shard.size]]))
        for a, b in zip(bounds[:-1].tolist(), bounds[1:].tolist(), strict=True):
            doc = shard[a:b].tolist()
            if long_documents == "truncate" or len(doc) <= seq_len + 1:
                items[tuple(doc[: seq_len + 1])] += 1
                continue
            for k in range((len(doc) - 2) // seq_len + 1):
                items[tuple(doc[k * seq_len : k * seq_len + seq_len + 1])] += 1
    return items


def packed_config(
    corpus: Corpus, mode: str = "packed", masks: bool = False, **sampling: Any
) -> dict[str, Any]:
    return corpus.config(
        seq_len=16,
        pad_token_id=PAD,
        sampling={"mode": mode, "shuffle": True, **sampling},
        packing={"masks": masks},
    )


def epoch_rows(stream: Any) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Tokens, data lengths and item starts of every sample of pass 0, in order."""
    n = stream.pass_length
    ids = np.arange(n, dtype=np.int64)
    src, local = stream.locate(0, ids)
    chunk = stream.read_chunk(ChunkPlan(0, ids, src, local), documents=True)
    return chunk.tokens, chunk.lengths, chunk.doc_starts


def split_rows(tokens: np.ndarray, lengths: np.ndarray, starts: np.ndarray) -> Counter:
    found: Counter[tuple[int, ...]] = Counter()
    for row, length, start in zip(tokens, lengths, starts, strict=True):
        cuts = np.append(np.flatnonzero(start[:length]), length)
        assert cuts[0] == 0  # items are contiguous from position 0
        for a, b in zip(cuts[:-1].tolist(), cuts[1:].tolist(), strict=True):
            found[tuple(row[a:b].tolist())] += 1
    return found


@pytest.mark.parametrize("mode", ["packed", "padded"])
@pytest.mark.parametrize("long_documents", ["split", "truncate"])
def test_every_item_once_whole_and_padding_only_at_the_end(
    make_corpus: Callable[..., Corpus], mode: str, long_documents: str
) -> None:
    corpus = make_corpus([700, 1, 450], mean_doc_len=12.0)
    cfg = packed_config(corpus, mode, long_documents=long_documents)
    stream = streamload.build_stream(streamload.load_config(cfg))
    tokens, lengths, starts = epoch_rows(stream)
    assert split_rows(tokens, lengths, starts) == expected_items(corpus, 16, long_documents)
    width = np.arange(tokens.shape[1])
    assert np.all(tokens[width[None, :] >= lengths[:, None]] == PAD)
    if mode == "padded":
        assert starts[:, 1:].sum(axis=1).max() <= 1  # one item (then the padding segment)
    else:
        bound = -(-int(lengths.sum()) // 17)
        assert len(lengths) <= bound + 2  # a few samples over the bound on this tiny corpus


def test_labels_of_padding_and_masks(make_corpus: Callable[..., Corpus]) -> None:
    corpus = make_corpus([600], mean_doc_len=10.0)
    cfg = packed_config(corpus, masks=True)
    with streamload.build_loader(cfg, batch_size=4) as loader:
        batch = next(iter(loader))
    stream = loader.stream
    ids = batch["sample_index"].reshape(-1).numpy()
    src, local = stream.locate(0, ids)
    chunk = stream.read_chunk(ChunkPlan(0, ids, src, local), documents=True)
    for row in range(4):
        length = int(chunk.lengths[row])
        labels = batch["labels"][row].numpy()
        assert np.all(labels[length - 1 :] == -100)  # labels that are padding
        cu = batch["cu_seqlens"][row].numpy()
        item_starts = np.flatnonzero(chunk.doc_starts[row, :16])
        if length < 17:  # the padding is the last segment
            assert length in cu.tolist() or length == 16
        assert cu[: item_starts.size].tolist() == item_starts.tolist()
        positions = batch["position_ids"][row].numpy()
        assert np.all(positions[item_starts] == 0)


@pytest.mark.parametrize("workers", [0, 2])
def test_packed_resumes_exactly(make_corpus: Callable[..., Corpus], workers: int) -> None:
    corpus = make_corpus([500, 300], mean_doc_len=9.0)
    cfg = packed_config(corpus, masks=True)
    assert_resumes_exactly(
        lambda: streamload.build_loader(cfg, batch_size=3, num_workers=workers),
        passes=2,
        save_points=[0, 1, 5, 9],
    )


def drawn_rows(stream: Any, passes: range, count: int) -> tuple[int, int]:
    """Items and data tokens of the first ``count`` samples of each of the passes."""
    items = data = 0
    for pass_index in passes:
        ids = np.arange(count, dtype=np.int64)
        src, local = stream.locate(pass_index, ids)
        chunk = stream.read_chunk(ChunkPlan(pass_index, ids, src, local), documents=True)
        width = np.arange(chunk.tokens.shape[1])
        items += int((chunk.doc_starts & (width[None, :] < chunk.lengths[:, None])).sum())
        data += int(chunk.lengths.sum())
    return items, data


@pytest.mark.parametrize("long_documents", ["split", "truncate"])
def test_stats_count_items_padding_and_truncation_as_the_run_goes(
    make_corpus: Callable[..., Corpus], long_documents: str
) -> None:
    corpus = make_corpus([700, 450], mean_doc_len=14.0)
    cfg = packed_config(corpus, long_documents=long_documents)
    seen = []
    with streamload.build_loader(cfg, batch_size=1) as loader:  # no sample dropped
        n = loader.stream.pass_length
        report = loader.stream.sources[0].packing_report()
        for _ in range(2):  # two epochs: the counts go on across the epoch boundary
            for step, _ in enumerate(loader, 1):
                seen.append((step, loader.stats()["sources"]["web"], loader.state_dict()))
    for step, counts, state in seen[::11] + seen[n - 1 : n + 1] + seen[-1:]:
        passes, into = divmod(counts["samples"], n)
        items, data = drawn_rows(loader.stream, range(passes), n)
        more = drawn_rows(loader.stream, range(passes, passes + 1), into)
        assert (counts["items"], counts["data_tokens"]) == (items + more[0], data + more[1])
        assert counts["padding_tokens"] == counts["samples"] * 17 - counts["data_tokens"]
        with streamload.build_loader(cfg, batch_size=1) as resumed:
            resumed.load_state_dict(state)  # a fresh process counts from the position alone
            assert resumed.stats()["sources"]["web"] == counts, step
    end_of_epoch = seen[n - 1][1]
    assert (end_of_epoch["items"], end_of_epoch["truncated_tokens"]) == (
        report["items"],
        report["truncated_tokens"],
    )
    assert seen[-1][1]["truncated_tokens"] == 2 * report["truncated_tokens"]
    assert (report["truncated_tokens"] > 0) == (long_documents == "truncate")


def test_packed_mixture_resumes_on_another_world_size(make_corpus: Callable[..., Corpus]) -> None:
    a, b = make_corpus([400], mean_doc_len=8.0, seed=1), make_corpus([300], seed=2)
    cfg = packed_config(a, mode="padded")
    cfg["sources"] = [
        {"name": "a", "path": str(a.folder), "dtype": a.dtype, "weight": 0.7},
        {"name": "b", "path": str(b.folder), "dtype": b.dtype, "weight": 0.3},
    ]
    cfg["global_batch_size"] = 4
    cfg["sampling"]["num_samples"] = 40
    whole = [batch["input_ids"] for batch in streamload.build_loader(cfg, batch_size=4)]
    halves = [
        list(streamload.build_loader(cfg, batch_size=2, rank=r, world_size=2)) for r in range(2)
    ]
    for step, reference in enumerate(whole):
        joined = torch.cat([halves[0][step]["input_ids"], halves[1][step]["input_ids"]])
        assert torch.equal(joined, reference)
    assert_resumes_exactly(lambda: streamload.build_loader(cfg, batch_size=4))


def test_each_epoch_visits_the_same_samples_in_another_order(
    make_corpus: Callable[..., Corpus],
) -> None:
    corpus = make_corpus([800], mean_doc_len=10.0)
    stream = streamload.build_stream(streamload.load_config(packed_config(corpus)))
    n = stream.pass_length
    first, _ = stream.read(0, np.arange(n))
    second, _ = stream.read(1, np.arange(n))
    assert not np.array_equal(first, second)
    assert sorted(map(tuple, first.tolist())) == sorted(map(tuple, second.tolist()))


def test_plan_reports_the_packing_per_source(
    make_corpus: Callable[..., Corpus], tmp_path: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    import json

    from streamload.cli.main import main

    corpus = make_corpus([900], mean_doc_len=30.0)
    cfg = packed_config(corpus, long_documents="truncate")
    (tmp_path / "c.json").write_text(json.dumps(cfg))
    assert main(["plan", str(tmp_path / "c.json"), "--steps", "2", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)["packing"]["web"]
    items = expected_items(corpus, 16, "truncate")
    assert report["items"] == sum(items.values())
    assert report["data_tokens"] == sum(len(k) * v for k, v in items.items())
    assert report["truncated_tokens"] > 0
    assert report["padding_tokens"] == report["samples"] * 17 - report["data_tokens"]


@pytest.mark.parametrize(
    ("path", "fmt"),
    [
        ("megatron/tiny_text_document.bin", "megatron"),
        ("modalities/docs.pbin", "modalities"),
        ("datatrove/tiny_00000_unshuffled.ds", "datatrove"),
        ("dolma/part-0-00000.npy", "dolma"),
    ],
)
def test_files_the_real_tools_wrote_pack_without_losing_a_token(path: str, fmt: str) -> None:
    """Every document of a real tool's file is an item (or split into pieces) of the plan."""
    from streamload.formats import open_shard
    from streamload.formats.documents import document_bounds
    from tests.helpers.paths import DATA

    cfg = {
        "seq_len": 32,
        "pad_token_id": 3,
        "eos_token_id": 0,
        "sources": [{"name": "t", "path": str(DATA / path), "format": fmt}],
        "sampling": {"mode": "packed", "shuffle": False},
    }
    if fmt == "dolma":
        cfg["sources"][0]["dtype"] = "uint16"  # dolma's .npy does not record it
    stream = streamload.build_stream(streamload.load_config(cfg))
    shard = open_shard(stream.sources[0].catalog.shards[0])
    bounds = np.asarray(document_bounds(shard, None)).tolist()
    tokens = np.asarray(shard.tokens(0, shard.info.num_tokens))
    expected: Counter[tuple[int, ...]] = Counter()
    for a, b in itertools.pairwise(bounds):
        doc = tokens[a:b].tolist()
        for k in range(max(1, (len(doc) - 2) // 32 + 1)) if doc else []:
            expected[tuple(doc[k * 32 : k * 32 + 33])] += 1
    rows, lengths, starts = epoch_rows(stream)
    assert split_rows(rows, lengths, starts) == expected


@pytest.mark.parametrize("mode", ["packed", "padded"])
def test_a_token_beyond_the_vocabulary_is_named_with_its_file_and_offset(
    make_corpus: Callable[..., Corpus], mode: str
) -> None:
    import re

    from streamload.errors import FormatError

    corpus = make_corpus([400, 300], mean_doc_len=10.0)
    cfg = packed_config(corpus, mode) | {"vocab_size": 500}
    stream = streamload.build_stream(streamload.load_config(cfg))
    with pytest.raises(FormatError, match=r"token \d+ is \d+, expected < vocab_size = 500") as err:
        stream.read(0, np.arange(stream.pass_length))
    path, offset, value = re.match(r"(\S+): token (\d+) is (\d+)", str(err.value)).groups()
    assert int(np.load(path)[int(offset)]) == int(value) >= 500
