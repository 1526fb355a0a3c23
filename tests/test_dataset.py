"""StreamDataset under torchdata's StatefulDataLoader: same batches, exact resumption."""

from __future__ import annotations

import re
from typing import Any

import pytest
from torchdata.stateful_dataloader import StatefulDataLoader

from streamload import (
    LoaderOptions,
    RankSpec,
    SampleStream,
    StreamDataset,
    build_loader,
    load_config,
)
from streamload.testing import assert_batches_equal, assert_resumes_exactly
from tests.helpers.corpus import Corpus, write_shards

pytestmark = [
    pytest.mark.filterwarnings("ignore:each pass of"),
    pytest.mark.filterwarnings("ignore:.set_vital. is deprecated"),
]


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> Corpus:
    return write_shards(tmp_path_factory.mktemp("docs"), [300, 200, 260])


def dataloader(
    cfg: dict[str, Any], rank: RankSpec, num_workers: int, persistent: bool = False
) -> StatefulDataLoader:
    stream = SampleStream.from_config(load_config(cfg))
    return StatefulDataLoader(
        StreamDataset(stream, rank),
        batch_size=None,
        num_workers=num_workers,
        persistent_workers=persistent,
    )


@pytest.mark.parametrize(
    ("num_workers", "persistent"), [(0, False), (2, False), (2, True)], ids=str
)
@pytest.mark.parametrize(("rank", "world", "b"), [(0, 1, 4), (1, 2, 3)])
def test_batches_equal_stream_loader(
    corpus: Corpus, num_workers: int, persistent: bool, rank: int, world: int, b: int
) -> None:
    """Two passes (two epochs of the DataLoader) in the same order as StreamLoader's."""
    cfg = corpus.config(8, seed=4, packing={"masks": True})
    loader = build_loader(
        cfg, batch_size=b, rank=rank, world_size=world, options=LoaderOptions(chunk_batches=3)
    )
    expected = [batch for _ in range(2) for batch in loader]
    dl = dataloader(cfg, RankSpec(rank, world, b), num_workers, persistent)
    got = []
    for epoch in range(2):
        if num_workers and not persistent:  # worker copies cannot advance the pass themselves
            dl.dataset.set_epoch(epoch)  # type: ignore[attr-defined]
        got += list(dl)
    assert_batches_equal(expected, got, f"{num_workers} workers, rank {rank} of {world}")


def test_resumes_exactly_without_workers(corpus: Corpus) -> None:
    cfg = corpus.config(8, seed=4, packing={"masks": True})
    assert_resumes_exactly(lambda: dataloader(cfg, RankSpec(0, 1, 4), 0), passes=2)


@pytest.mark.parametrize("persistent", [pytest.param(False, marks=pytest.mark.slow), True])
def test_resumes_exactly_with_two_workers(corpus: Corpus, persistent: bool) -> None:
    cfg = corpus.config(16, seed=4)
    per_pass = len(build_loader(cfg, batch_size=4))
    assert per_pass == 11
    points = [0, 1, 2, 5, per_pass - 1, per_pass, per_pass + 3, 2 * per_pass]
    assert_resumes_exactly(
        lambda: dataloader(cfg, RankSpec(0, 1, 4), 2, persistent), passes=2, save_points=points
    )


# -- issue 22, item 2: epoch boundaries and the default pass ---------------------------------
SMALL = [100, 70]  # 21 windows of 8: 5 batches of 4 per pass (the 21st window is dropped)
WORKER_CASES = [(0, False), (1, False), (1, True), (2, False), (2, True)]
WORKER_IDS = [f"{nw}w-{'persistent' if p else 'fresh'}" for nw, p in WORKER_CASES]


@pytest.fixture(scope="module")
def small(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    return write_shards(tmp_path_factory.mktemp("small"), SMALL).config(8, seed=7)


def passes_of_stream_loader(cfg: dict[str, Any], passes: int) -> list[list[Any]]:
    loader = build_loader(cfg, batch_size=4)
    return [list(loader) for _ in range(passes)]


@pytest.mark.parametrize(("num_workers", "persistent"), WORKER_CASES, ids=WORKER_IDS)
def test_each_epoch_starts_the_next_pass_without_set_epoch(
    small: dict[str, Any], num_workers: int, persistent: bool
) -> None:
    """``for epoch in range(3): for batch in dl`` walks passes 0, 1, 2 (as StreamLoader)."""
    expected = passes_of_stream_loader(small, 3)
    dl = dataloader(small, RankSpec(0, 1, 4), num_workers, persistent)
    for epoch, want in enumerate(expected):
        assert_batches_equal(want, list(dl), f"epoch {epoch}")


@pytest.mark.slow
@pytest.mark.parametrize(("num_workers", "persistent"), WORKER_CASES, ids=WORKER_IDS)
def test_every_epoch_boundary_resumes_exactly(
    small: dict[str, Any], num_workers: int, persistent: bool
) -> None:
    """Saved after the last batch of epoch 0 (inside and after the loop), at the first batch
    of epoch 1, mid-epoch 1 and after two epochs: the exact batches of the uninterrupted run,
    with no epoch skipped or repeated."""
    per_pass = len(build_loader(small, batch_size=4))
    assert per_pass == 5
    points = [per_pass, per_pass + 1, per_pass + 3, 2 * per_pass]
    if num_workers == 0:
        points = [0, 1, per_pass - 1, *points, 2 * per_pass + 1]
    assert_resumes_exactly(
        lambda: dataloader(small, RankSpec(0, 1, 4), num_workers, persistent),
        passes=3,
        save_points=points,
        restore_twice=False,
    )


@pytest.mark.parametrize(("num_workers", "persistent"), [(0, False), (2, False), (2, True)])
def test_set_epoch_is_honoured_then_epochs_follow_it(
    small: dict[str, Any], num_workers: int, persistent: bool
) -> None:
    expected = passes_of_stream_loader(small, 6)
    dl = dataloader(small, RankSpec(0, 1, 4), num_workers, persistent)
    assert_batches_equal(expected[0], list(dl), "epoch 0")
    dl.dataset.set_epoch(4)  # type: ignore[attr-defined]
    assert_batches_equal(expected[4], list(dl), "after set_epoch(4)")
    assert_batches_equal(expected[5], list(dl), "the epoch after")


def test_state_section_lists_the_state_keys(small: dict[str, Any]) -> None:
    doc = StreamDataset.__doc__ or ""
    section = doc.split("State:", 1)[1]
    documented = set(re.findall(r"``(\w+)``\s*:", section))
    dataset = StreamDataset(SampleStream.from_config(load_config(small)), RankSpec(0, 1, 4))
    envelope = {"version", "fingerprint", "epoch", "cursor", "sources", "global_batch_size"}
    assert documented == set(dataset.state_dict()) == envelope
