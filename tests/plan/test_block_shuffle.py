"""Block-local shuffle: a bijection per epoch whose positions stay inside one block region."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from streamload import ConfigError, StateError, build_loader
from streamload.plan.passes import PassPlan
from streamload.testing import assert_resumes_exactly, collect_global_batches
from tests.helpers.corpus import Corpus, write_shards

SETTINGS = settings(max_examples=40, deadline=None)


def plan(n: int, block: int, seed: int = 0, num_samples: int | None = None) -> PassPlan:
    return PassPlan(
        name="web", num_windows=n, seed=seed, shuffle=True, num_samples=num_samples,
        shuffle_block=block,
    )  # fmt: skip


@SETTINGS
@given(n=st.integers(1, 500), block=st.integers(1, 120), seed=st.integers(0, 2**31))
def test_each_epoch_is_a_permutation_of_block_regions(n: int, block: int, seed: int) -> None:
    for epoch in (0, 1):
        order = plan(n, block, seed).window_ids(epoch, np.arange(n))
        assert sorted(order.tolist()) == list(range(n))
        if block >= n:  # one block: the uniform permutation of the epoch
            np.testing.assert_array_equal(order, plan(n, 0, seed).window_ids(epoch, np.arange(n)))
            continue
        full = n // block
        regions = order[: full * block].reshape(full, block) // block
        assert (regions == regions[:, :1]).all()  # positions of one block read one region
        assert sorted(regions[:, 0].tolist()) == list(range(full))
        assert sorted(order[full * block :].tolist()) == list(range(full * block, n))


@SETTINGS
@given(n=st.integers(2, 300), block=st.integers(1, 60), data=st.data())
def test_any_subset_of_positions_maps_as_the_whole_epoch(n: int, block: int, data: Any) -> None:
    p = plan(n, block, num_samples=3 * n)
    whole = p.window_ids(0, np.arange(3 * n))
    picks = np.array(data.draw(st.lists(st.integers(0, 3 * n - 1), min_size=1, max_size=40)))
    np.testing.assert_array_equal(p.window_ids(0, picks), whole[picks])


def test_epochs_and_seeds_reshuffle() -> None:
    a, b = plan(1000, 50), plan(1000, 50, seed=1)
    ids = np.arange(1000)
    assert a.window_ids(0, ids).tolist() != a.window_ids(1, ids).tolist()
    assert a.window_ids(0, ids).tolist() != b.window_ids(0, ids).tolist()
    assert a.window_ids(0, ids).tolist() != plan(1000, 0).window_ids(0, ids).tolist()


@pytest.fixture(scope="module")
def positions(tmp_path_factory: pytest.TempPathFactory) -> Corpus:
    """Token = position; 2049 tokens: 256 cross-shard windows of 8."""
    return write_shards(tmp_path_factory.mktemp("pos"), [700, 600, 749], kind="positions")


def test_loader_reads_one_region_per_block_and_resumes(positions: Corpus) -> None:
    cfg = positions.config(8, seed=3, sampling={"shuffle_block": 32})
    batches = collect_global_batches([build_loader(cfg, batch_size=16)])
    firsts = np.concatenate([b["input_ids"][:, 0].numpy() for b in batches])
    assert sorted((firsts // 8).tolist()) == list(range(256))  # every window once
    assert all(len(set((firsts[k : k + 32] // 256).tolist())) == 1 for k in range(0, 256, 32))
    split = collect_global_batches(
        [build_loader(cfg, batch_size=4, rank=r, world_size=4, num_workers=2) for r in range(4)]
    )
    for whole, parts in zip(batches, split, strict=True):
        assert whole["input_ids"].tolist() == parts["input_ids"].tolist()
    assert_resumes_exactly(
        lambda: build_loader(cfg, batch_size=8, num_workers=2), passes=2,
        save_points=[0, 1, 5, 16, 31, 32, 33, 50, 64],
    )  # fmt: skip


def test_block_shuffle_changes_the_fingerprint(positions: Corpus) -> None:
    uniform = build_loader(positions.config(8, seed=3), batch_size=8)
    config = positions.config(8, seed=3, sampling={"shuffle_block": 32})
    blocked = build_loader(config, batch_size=8)
    next(iter(blocked))
    with pytest.raises(StateError, match="shuffle_block"):
        uniform.load_state_dict(blocked.state_dict())


@pytest.mark.parametrize(
    ("sampling", "match"),
    [
        ({"shuffle_block": -1}, "shuffle_block = -1 must be >= 0"),
        ({"shuffle_block": 8, "shuffle": False}, "needs shuffle = true"),
        ({"shuffle_block": "8"}, "must be an integer"),
    ],
)
def test_bad_shuffle_block_is_refused(positions: Corpus, sampling: dict, match: str) -> None:
    with pytest.raises(ConfigError, match=match):
        build_loader(positions.config(8, sampling=sampling), batch_size=8)
