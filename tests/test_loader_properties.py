"""Properties of StreamLoader over random corpora, world sizes, batch sizes and save points."""

from __future__ import annotations

import functools
import tempfile
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import torch
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from streamload import LoaderOptions, StreamLoader, build_loader
from streamload.testing import assert_resumes_exactly
from tests.helpers.corpus import Corpus, write_shards
from tests.helpers.elastic import assert_resumes_on_world

SETTINGS = settings(max_examples=25, deadline=None)


@st.composite
def setups(draw: st.DrawFn) -> dict[str, Any]:
    """A corpus shape, a sampling config and a data-parallel layout with >= 1 global batch."""
    sizes = draw(st.lists(st.integers(1, 160), min_size=1, max_size=4))
    seq_len = draw(st.integers(1, 12))
    cross_shard = draw(st.booleans())
    per_shard = sum((n - 1) // seq_len for n in sizes)
    windows = (sum(sizes) - 1) // seq_len if cross_shard else per_shard
    assume(windows >= 1)
    world = draw(st.integers(1, 4))
    b = draw(st.integers(1, 3))
    num_samples = draw(st.none() | st.integers(1, 3 * windows + 5))
    pass_length = num_samples if num_samples is not None else windows
    assume(pass_length >= world * b)
    return {
        "sizes": sizes,
        "seq_len": seq_len,
        "cross_shard": cross_shard,
        "shuffle": draw(st.booleans()),
        "seed": draw(st.integers(0, 2**32)),
        "world": world,
        "b": b,
        "num_samples": num_samples,
        "windows": windows,
        "pass_length": pass_length,
        "chunk": draw(st.integers(1, 4)),
    }


def config(corpus: Corpus, s: dict[str, Any]) -> dict[str, Any]:
    sampling = {
        "cross_shard": s["cross_shard"],
        "shuffle": s["shuffle"],
        "num_samples": s["num_samples"],
    }
    return corpus.config(s["seq_len"], seed=s["seed"], sampling=sampling)


def rank_loaders(cfg: dict[str, Any], world: int, b: int, chunk: int) -> list[StreamLoader]:
    opts = LoaderOptions(chunk_batches=chunk)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return [
            build_loader(cfg, batch_size=b, rank=r, world_size=world, options=opts)
            for r in range(world)
        ]


@SETTINGS
@given(s=setups(), data=st.data())
def test_resumes_exactly_at_a_random_save_point(s: dict[str, Any], data: st.DataObject) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        corpus = write_shards(Path(tmp), s["sizes"], kind="positions")
        cfg = config(corpus, s)
        per_pass = s["pass_length"] // (s["world"] * s["b"])
        point = data.draw(st.integers(0, 2 * per_pass), label="save point")
        rank = data.draw(st.integers(0, s["world"] - 1), label="rank")

        def make() -> StreamLoader:
            return rank_loaders(cfg, s["world"], s["b"], s["chunk"])[rank]

        assert_resumes_exactly(make, save_points=[point], passes=2)


@SETTINGS
@given(s=setups(), data=st.data())
def test_resumes_on_another_world_size(s: dict[str, Any], data: st.DataObject) -> None:
    big = s["world"] * s["b"]
    other = data.draw(st.sampled_from([w for w in range(1, 5) if big % w == 0]), label="world")

    def pick(batches: int) -> int:
        return data.draw(st.integers(0, batches), label="save step")

    with tempfile.TemporaryDirectory() as tmp:
        corpus = write_shards(Path(tmp), s["sizes"], kind="positions")
        cfg = config(corpus, s)
        saved, resumed = (s["world"], s["b"], s["chunk"]), (other, big // other, 1 + s["chunk"] % 3)
        assert_resumes_on_world(functools.partial(rank_loaders, cfg), saved, resumed, pick)


@SETTINGS
@given(s=setups())
def test_each_window_once_per_epoch_and_ranks_disjoint(s: dict[str, Any]) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        corpus = write_shards(Path(tmp), s["sizes"], kind="positions")
        loaders = rank_loaders(config(corpus, s), s["world"], s["b"], s["chunk"])
        starts = corpus.window_starts(s["seq_len"], s["cross_shard"])
        n, big = len(starts), s["world"] * s["b"]
        for pass_index in range(2):
            per_rank = [[batch for batch in loader] for loader in loaders]
            check_pass(per_rank, starts, s, pass_index)
        assert n == s["windows"] and big >= 1


def check_pass(
    per_rank: list[list[dict[str, torch.Tensor]]],
    starts: list[int],
    s: dict[str, Any],
    pass_index: int,
) -> None:
    """Partition, contiguity and per-epoch coverage of one pass over all ranks."""
    n, b, big = len(starts), s["b"], s["world"] * s["b"]
    count = s["pass_length"] // big
    assert all(len(batches) == count for batches in per_rank)
    ids = torch.empty(count * big, dtype=torch.int64)
    first = np.empty(count * big, dtype=np.int64)
    for rank, batches in enumerate(per_rank):
        for k, batch in enumerate(batches):
            want = torch.arange(k * big + rank * b, k * big + (rank + 1) * b)
            assert torch.equal(batch["sample_index"], want), "rank slices are fixed"
            inputs = batch["input_ids"]
            assert torch.equal(inputs, inputs[:, :1] + torch.arange(s["seq_len"]))
            assert torch.equal(batch["labels"], inputs + 1)
            ids[want] = want
            first[want.numpy()] = inputs[:, 0].numpy()
    assert torch.equal(ids, torch.arange(count * big)), "ranks are disjoint and cover the pass"
    epoch_of = np.arange(count * big) + (0 if s["num_samples"] else pass_index * n)
    for epoch in np.unique(epoch_of // n):
        seen = first[epoch_of // n == epoch].tolist()
        assert len(set(seen)) == len(seen), f"a window repeats in epoch {epoch}"
        assert set(seen) <= set(starts)
        if len(seen) == n:
            assert sorted(seen) == starts
        if not s["shuffle"]:
            slots = epoch_of[epoch_of // n == epoch] % n
            assert seen == [starts[j] for j in slots]
