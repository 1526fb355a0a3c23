"""Properties of packed and padded modes over any corpus: document lengths from 1 token to
several seq_lens (empty documents too), single-document shards, seq_lens, world sizes and
save points. Every item once per epoch, padding only at sample ends, a rank's share is its
slice of the global batch, and resumption is exact and ordered."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import streamload
from streamload.testing import assert_resumes_exactly
from tests.streams.test_packed import epoch_rows, split_rows

EOS, PAD = 0, 1

SETTINGS = settings(
    max_examples=12,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)

documents = st.lists(st.integers(0, 30), min_size=1, max_size=12)  # 0: an empty document
shards = st.lists(documents, min_size=1, max_size=3)


def write(folder: Path, layout: list[list[int]], seed: int) -> list[list[list[int]]]:
    """NPY shards of documents of the given lengths (each ending in EOS; 0 = no tokens)."""
    rng = np.random.default_rng(seed)
    folder.mkdir(parents=True, exist_ok=True)
    out = []
    for index, lengths in enumerate(layout):
        docs = [[*rng.integers(2, 50, size=n).tolist()[:-1], EOS] if n else [] for n in lengths]
        tokens = np.array([t for d in docs for t in d] or [EOS], dtype=np.uint16)
        np.save(folder / f"shard_{index:05d}.npy", tokens)
        out.append([d for d in docs if d] or [[EOS]])
    return out


def items_of(docs: list[list[list[int]]], seq_len: int) -> dict[tuple[int, ...], int]:
    found: dict[tuple[int, ...], int] = {}
    for shard in docs:
        for doc in shard:
            pieces = [doc] if len(doc) <= seq_len + 1 else [
                doc[k * seq_len : k * seq_len + seq_len + 1]
                for k in range((len(doc) - 2) // seq_len + 1)
            ]  # fmt: skip
            for piece in pieces:
                found[tuple(piece)] = found.get(tuple(piece), 0) + 1
    return found


def config(folder: Path, seq_len: int, mode: str) -> dict[str, Any]:
    return {
        "seq_len": seq_len,
        "seed": 3,
        "eos_token_id": EOS,
        "pad_token_id": PAD,
        "sources": [{"name": "s", "path": str(folder)}],
        "sampling": {"mode": mode},
        "packing": {"masks": True},
    }


@SETTINGS
@given(layout=shards, seq_len=st.integers(3, 12), mode=st.sampled_from(["packed", "padded"]))
def test_every_item_once_and_padding_only_at_the_end(
    tmp_path_factory: Any, layout: list[list[int]], seq_len: int, mode: str
) -> None:
    folder = tmp_path_factory.mktemp("corpus")
    docs = write(folder, layout, seed=seq_len)
    stream = streamload.build_stream(streamload.load_config(config(folder, seq_len, mode)))
    tokens, lengths, starts = epoch_rows(stream)
    assert dict(split_rows(tokens, lengths, starts)) == items_of(docs, seq_len)
    columns = np.arange(seq_len + 1)
    assert np.all(tokens[columns[None, :] >= lengths[:, None]] == PAD)


@pytest.mark.filterwarnings("ignore:each pass of")  # a partial last batch is dropped
@SETTINGS
@given(
    layout=shards,
    seq_len=st.integers(3, 8),
    world=st.integers(1, 3),
    save=st.integers(0, 6),
)
def test_ranks_split_each_batch_and_resume_exactly(
    tmp_path_factory: Any, layout: list[list[int]], seq_len: int, world: int, save: int
) -> None:
    folder = tmp_path_factory.mktemp("corpus")
    write(folder, [[*lengths, seq_len * 2 + 1] for lengths in layout], seed=world)
    cfg = config(folder, seq_len, "packed")
    whole = list(streamload.build_loader(cfg, batch_size=world))
    ranks = [
        list(streamload.build_loader(cfg, batch_size=1, rank=r, world_size=world))
        for r in range(world)
    ]
    for step, batch in enumerate(whole):
        joined = torch.cat([ranks[r][step]["input_ids"] for r in range(world)])
        assert torch.equal(joined, batch["input_ids"])
    assert_resumes_exactly(
        lambda: streamload.build_loader(cfg, batch_size=world),
        save_points=[min(save, len(whole))],
        passes=2,
    )


@pytest.mark.filterwarnings("ignore:each pass of")
@settings(SETTINGS, max_examples=8)
@given(
    layouts=st.lists(shards, min_size=2, max_size=2),
    weight=st.integers(1, 9),
    seq_len=st.integers(3, 8),
    global_batch=st.integers(2, 6),
    workers=st.sampled_from([0, 2]),
    save=st.integers(0, 5),
)
def test_packed_mixtures_allocate_within_one_sample_and_resume_with_workers(
    tmp_path_factory: Any,
    layouts: list[list[list[int]]],
    weight: int,
    seq_len: int,
    global_batch: int,
    workers: int,
    save: int,
) -> None:
    """Each source packs its own items; every global batch gives source ``a`` its share of
    samples to within one (cumulatively), and the run resumes exactly with thread workers."""
    root = tmp_path_factory.mktemp("mix")
    sources = []
    for name, layout in zip("ab", layouts, strict=True):
        write(root / name, [[*lengths, seq_len + 2] for lengths in layout], seed=len(name))
        share = weight / 10 if name == "a" else 1 - weight / 10
        sources.append({"name": name, "path": str(root / name), "weight": share})
    cfg = config(root / "a", seq_len, "packed") | {"global_batch_size": global_batch}
    cfg["sources"], cfg["sampling"]["num_samples"] = sources, 8 * global_batch
    stream = streamload.build_stream(streamload.load_config(cfg))
    src, _ = stream.locate(0, np.arange(8 * global_batch))
    drawn = np.cumsum(src.reshape(8, global_batch) == 0, axis=None)[
        global_batch - 1 :: global_batch
    ]
    wanted = np.arange(1, 9) * global_batch * weight / 10
    assert np.all(np.abs(drawn - wanted) <= 1), (drawn, wanted)
    assert_resumes_exactly(
        lambda: streamload.build_loader(
            cfg, batch_size=global_batch, num_workers=workers, options={"worker_type": "thread"}
        ),
        save_points=[save],
    )
