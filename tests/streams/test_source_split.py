"""Where a source's splits lie (``streams/source_split.py``), checked against direct counts."""

from __future__ import annotations

import random
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from streamload.catalog.sources import describe_sources
from streamload.config import load_config
from streamload.errors import ConfigError
from streamload.formats.documents import document_bounds
from streamload.plan.split import SPLIT_NAMES, parse_split, split_bookends
from streamload.streams.shard_set import ShardSet
from streamload.streams.source_split import FIRST_SCAN_TOKENS, SourceSplit, source_split
from tests.helpers.paths import DATA
from tests.helpers.shards import write_megatron_documents

INDEXED = [
    DATA / "megatron" / "tiny_text_document.bin",
    DATA / "megatron" / "emptydoc.bin",
    DATA / "megatron" / "merged.bin",
    DATA / "datatrove" / "tiny_00000_unshuffled.ds",
    DATA / "datatrove_loss" / "loss_00000_unshuffled.ds",
    DATA / "modalities" / "docs.pbin",
]
SPLITS = ["1,1,1", "98,2,0", "50,50", "0,1,0", "2,1,1", "969,30,1"]


def split_of(source: dict[str, Any], split: str, **top: Any) -> tuple[SourceSplit, ShardSet]:
    """The splits of one source, read as its largest split (an empty one is refused)."""
    shares = parse_split(split)
    name = SPLIT_NAMES[shares.index(max(shares))]
    sampling = {"split": split, "split_name": name}
    cfg = load_config({"seq_len": 2, "sources": [source], "sampling": sampling, **top})
    catalog = describe_sources(cfg)[0]
    shards = ShardSet(catalog.shards)
    found = source_split(cfg, catalog, shards)
    assert found is not None
    return found, shards


def all_document_starts(shards: ShardSet, eos: int | None) -> tuple[list[int], int]:
    """Every document's first token in the source's stream (shard by shard), and its tokens."""
    starts: list[int] = []
    for i in range(len(shards.shards)):
        bounds = np.asarray(document_bounds(shards.shard(i), eos)).tolist()
        starts += [int(shards.offsets[i]) + b for b in bounds[:-1]]
    return starts, shards.num_tokens


@pytest.mark.parametrize("path", INDEXED, ids=lambda p: p.name)
def test_the_descriptions_count_every_document(path: Path) -> None:
    """The document counts read from the headers are those of the document index, so the
    bookend documents are found without reading any index."""
    found, shards = split_of({"name": "x", "path": str(path)}, "1,1,1")
    starts, _ = all_document_starts(shards, None)
    assert found.rule == "documents" and found.total_documents == len(starts)


@pytest.mark.parametrize("split", SPLITS)
def test_the_document_rule_splits_documents_as_megatron(tmp_path: Path, split: str) -> None:
    """Three Megatron shards of random documents (empty ones too): split i is documents
    ``[round(c_i·D), round(c_(i+1)·D))``, its tokens from its first document's first token."""
    rng = np.random.default_rng(len(split))
    paths = []
    for k in range(3):
        lengths = rng.integers(0, 9, size=int(rng.integers(1, 30))).tolist()
        tokens = rng.integers(1, 100, size=sum(lengths)).astype(np.uint16)
        paths.append(str(write_megatron_documents(tmp_path / f"s{k}", tokens, lengths)))
    found, shards = split_of({"name": "x", "path": paths}, split)
    starts, total = all_document_starts(shards, None)
    docs = split_bookends(split, len(starts))
    assert found.documents == tuple(docs)
    assert found.tokens == tuple(starts[d] if d < len(starts) else total for d in docs)


def eos_starts(tokens: list[np.ndarray], eos: int) -> list[int]:
    """Document starts by EOS, written out directly: each shard start, and each position
    right after an EOS (a shard's end is the next shard's start)."""
    out, base = [], 0
    for shard in tokens:
        out += [base] + [base + int(p) + 1 for p in np.flatnonzero(shard == eos)]
        base += len(shard)
    return sorted(set(out) | {base})


@pytest.mark.parametrize("seed", range(6))
def test_the_token_rule_moves_each_bookend_to_the_next_document_start(
    make_corpus: Callable, seed: int
) -> None:
    rng = random.Random(seed)
    sizes = [rng.randint(1, 400) for _ in range(rng.randint(1, 4))]
    corpus = make_corpus(sizes, seed=seed, mean_doc_len=rng.choice([3.0, 20.0, 90.0]))
    split = rng.choice(SPLITS)
    cfg = corpus.config()
    found, _ = split_of(cfg["sources"][0], split, eos_token_id=corpus.eos_token_id)
    starts = eos_starts(corpus.tokens, corpus.eos_token_id)
    expected = [min(s for s in starts if s >= t) for t in split_bookends(split, sum(sizes))]
    assert found.rule == "tokens" and found.documents is None
    assert found.tokens == tuple(expected)


def test_without_eos_or_index_each_shard_is_one_document(make_corpus: Callable) -> None:
    corpus = make_corpus([100, 100, 100, 100])
    source = corpus.config()["sources"][0]
    found, _ = split_of(source, "60,40")  # no eos_token_id: bookend 240 moves to 300
    assert found.tokens == (0, 300, 400, 400)


def test_finding_a_start_reads_one_document_not_the_corpus(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Start-up cost does not grow with the corpus: each bookend reads the tokens up to the
    next EOS (blocks doubling from FIRST_SCAN_TOKENS), here 2 of 1,000,000 tokens' worth."""
    tokens = np.ones(1_000_000, dtype=np.uint16)
    tokens[4999::5000] = 0  # documents of 5,000 tokens
    np.save(tmp_path / "s.npy", tokens)
    read: list[int] = []
    original = ShardSet.shard

    def counting(self: ShardSet, index: int) -> Any:
        shard = original(self, index)

        class Counted:
            info = shard.info

            def tokens(self, start: int, stop: int) -> np.ndarray:
                read.append(stop - start)
                return shard.tokens(start, stop)

            def document_bounds(self) -> None:
                return None

        return Counted()

    monkeypatch.setattr(ShardSet, "shard", counting)
    found, _ = split_of({"name": "x", "path": str(tmp_path)}, "97,2,1", eos_token_id=0)
    assert found.tokens == (0, 970_000, 990_000, 1_000_000)  # bookends fell on starts
    found, _ = split_of({"name": "x", "path": str(tmp_path)}, "96.99,2,1.01", eos_token_id=0)
    assert found.tokens == (0, 970_000, 990_000, 1_000_000)
    assert sum(read) <= 2 * (5000 + 2 * FIRST_SCAN_TOKENS)


def test_an_empty_split_is_refused(make_corpus: Callable) -> None:
    corpus = make_corpus([100, 100])
    source = corpus.config()["sources"][0]
    with pytest.raises(
        ConfigError,
        match=r"source 'x': sampling.split = '99,1' leaves its valid split empty \(200 tokens, "
        r"split at the document starts \[0, 200, 200, 200\]",
    ):
        load = {"seq_len": 2, "sources": [source | {"name": "x"}]}
        cfg = load_config(load | {"sampling": {"split": "99,1", "split_name": "valid"}})
        catalog = describe_sources(cfg)[0]
        source_split(cfg, catalog, ShardSet(catalog.shards))
