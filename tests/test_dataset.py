"""StreamDataset under torchdata's StatefulDataLoader: same batches, exact resumption."""

from __future__ import annotations

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


@pytest.mark.parametrize("persistent", [False, True])
def test_resumes_exactly_with_two_workers(corpus: Corpus, persistent: bool) -> None:
    cfg = corpus.config(16, seed=4)
    per_pass = len(build_loader(cfg, batch_size=4))
    assert per_pass == 11
    points = [0, 1, 2, 5, per_pass - 1, per_pass, per_pass + 3, 2 * per_pass]
    assert_resumes_exactly(
        lambda: dataloader(cfg, RankSpec(0, 1, 4), 2, persistent), passes=2, save_points=points
    )
