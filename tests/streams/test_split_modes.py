"""``sampling.split`` in concat, packed and padded modes: the splits never share a document.

Concat windows lie inside their split's token range; packed and padded items are the
split's documents only, and the three splits together hold exactly the unsplit items.
"""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

from streamload import build_loader, load_config
from streamload.errors import StateError
from streamload.modes.packed.plan_cache import plan_description
from streamload.plan.split import SPLIT_NAMES
from streamload.streams.interface import SampleStream


def stream_of(cfg: dict[str, Any]) -> Any:
    return SampleStream.from_config(load_config(cfg))


def sampled(cfg: dict[str, Any], **sampling: Any) -> dict[str, Any]:
    return cfg | {"sampling": {**cfg.get("sampling", {}), **sampling}}


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("cross_shard", [True, False])
def test_concat_windows_stay_inside_their_split(
    make_corpus: Callable, seed: int, cross_shard: bool
) -> None:
    rng = random.Random(seed)
    corpus = make_corpus([rng.randint(200, 500) for _ in range(rng.randint(1, 4))], seed=seed)
    split, seq_len = rng.choice(["80,15,5", "1,1,1", "60,40"]), rng.choice([4, 8])
    base = corpus.config(seq_len=seq_len, sampling={"split": split, "cross_shard": cross_shard})
    ranges = []
    for name in ("train", "valid"):
        source = stream_of(sampled(base, split_name=name)).sources[0]
        lo, hi = source.split.span
        starts = source.layout.starts(np.arange(source.num_windows))
        assert starts.min() >= lo and starts.max() + seq_len + 1 <= hi
        if not cross_shard:  # and never across a shard end
            shard = np.searchsorted(source.shards.offsets, starts, side="right")
            assert np.all(starts + seq_len + 1 <= source.shards.offsets[shard])
        ranges.append((lo, hi))
    assert ranges[0][1] == ranges[1][0]  # contiguous: the valid split starts where train ends
    boundary, shard_starts = ranges[0][1], np.cumsum([len(t) for t in corpus.tokens]).tolist()
    after_eos = corpus.stream[boundary - 1] == corpus.eos_token_id
    assert after_eos or boundary in shard_starts  # a document start: no document is cut


def items_of(cfg: dict[str, Any]) -> list[tuple[int, int]]:
    plan = stream_of(cfg).sources[0].plan
    return list(zip(plan.starts.tolist(), plan.lengths.astype(int).tolist(), strict=True))


@pytest.mark.parametrize("mode", ["packed", "padded"])
@pytest.mark.parametrize("long_documents", ["split", "truncate"])
@pytest.mark.parametrize("split", ["80,15,5", "1,1,1"])
def test_packed_splits_hold_every_item_once(
    make_corpus: Callable, mode: str, long_documents: str, split: str
) -> None:
    corpus = make_corpus([300, 500, 200], mean_doc_len=12.0)
    base = corpus.config(pad_token_id=1, sampling={"mode": mode, "long_documents": long_documents})
    whole = items_of(base)
    parts = []
    for name in SPLIT_NAMES:
        cfg = sampled(base, split=split, split_name=name)
        stream = stream_of(cfg)
        lo, hi = stream.sources[0].split.span
        items = items_of(cfg)
        assert all(lo <= s and s + n <= hi for s, n in items)  # inside the split's tokens
        parts += items
    assert Counter(parts) == Counter(whole)  # every item in exactly one split


def test_a_split_changes_the_plan_key_only_when_set(make_corpus: Callable) -> None:
    """Unsplit plans keep their cache key (their cached files stay valid); each split has its
    own plan, keyed by its token range."""
    corpus = make_corpus([300, 500])
    base = corpus.config(pad_token_id=1, sampling={"mode": "packed"})
    catalog = stream_of(base).sources[0].catalog
    plain = plan_description(load_config(base), catalog)
    assert "split_tokens" not in plain and plain == plan_description(
        load_config(base), catalog, None
    )
    train = stream_of(sampled(base, split="1,1")).sources[0]
    valid = stream_of(sampled(base, split="1,1", split_name="valid")).sources[0]
    assert train.plan.files and valid.plan.files
    assert set(train.plan.files.values()).isdisjoint(valid.plan.files.values())
    keyed = plan_description(load_config(sampled(base, split="1,1")), catalog, train.split.span)
    assert keyed == plain | {"split_tokens": list(train.split.span)}


@pytest.mark.parametrize("mode", ["concat", "packed", "padded"])
def test_the_split_is_in_the_fingerprint_only_when_set(make_corpus: Callable, mode: str) -> None:
    corpus = make_corpus([300, 500])
    base = corpus.config(pad_token_id=1, sampling={"mode": mode})
    plain = stream_of(base).fingerprint()
    assert "split" not in plain and "split_name" not in plain
    train = stream_of(sampled(base, split="9,1")).fingerprint()
    valid = stream_of(sampled(base, split="9,1", split_name="valid")).fingerprint()
    assert train == plain | {"split": [[0, 0.9], [0.9, 1.0], None], "split_name": "train"}
    assert valid == train | {"split_name": "valid"}


def test_a_train_state_does_not_load_into_the_valid_stream(make_corpus: Callable) -> None:
    corpus = make_corpus([300, 500])
    base = corpus.config(sampling={"split": "9,1"})
    train = build_loader(base, batch_size=1)
    next(iter(train))
    valid = build_loader(sampled(base, split_name="valid"), batch_size=1)
    with pytest.raises(StateError, match=r"split_name: saved 'train', now 'valid'"):
        valid.load_state_dict(train.state_dict())
