"""Golden values: a fixed corpus, seed and config give fixed batches.

If one of these fails, the sample order changed: every saved checkpoint of every user would
resume on other data. Change the constants only together with a new permutation algorithm
version (which changes the state fingerprint, so old states are refused).

The corpus: three NPY shards of 300, 200 and 500 ``uint16`` tokens, token = its position in the
concatenated stream (0..999); source name ``web``; seq_len 16 (62 cross-shard windows, 61
within shards); seed 1234; per-rank batch 4.
"""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from streamload import SampleStream, build_loader, load_config

SHUFFLED_FIRST_TOKENS = [336, 368, 704, 528]
SHUFFLED_EPOCH1_FIRST_TOKENS = [48, 736, 224, 192]
SHUFFLED_WINDOW_STARTS = [336, 368, 704, 528, 912, 48, 480, 768, 352, 960, 752, 736]
SHUFFLED_WINDOW_STARTS_WITHIN_SHARDS = [348, 380, 724, 548, 932, 48, 500, 788, 364, 980, 772, 756]


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("golden")
    start = 0
    for index, size in enumerate((300, 200, 500)):
        np.save(out / f"shard_{index:05d}.npy", np.arange(start, start + size, dtype=np.uint16))
        start += size
    return out


def config(folder: Path, **sampling: Any) -> dict[str, Any]:
    return {
        "seq_len": 16,
        "seed": 1234,
        "sources": [{"name": "web", "path": str(folder)}],
        "sampling": sampling,
    }


def first_batch(cfg: dict[str, Any], **kwargs: Any) -> dict[str, torch.Tensor]:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return next(iter(build_loader(cfg, batch_size=4, **kwargs)))


def test_first_batch_shuffled(folder: Path) -> None:
    batch = first_batch(config(folder))
    assert batch["sample_index"].tolist() == [0, 1, 2, 3]
    assert batch["input_ids"][0].tolist() == list(range(336, 352))
    assert batch["labels"][0].tolist() == list(range(337, 353))
    assert batch["input_ids"][:, 0].tolist() == SHUFFLED_FIRST_TOKENS


def test_first_batch_unshuffled(folder: Path) -> None:
    batch = first_batch(config(folder, shuffle=False))
    assert batch["sample_index"].tolist() == [0, 1, 2, 3]
    assert batch["input_ids"][0].tolist() == list(range(0, 16))
    assert batch["labels"][0].tolist() == list(range(1, 17))
    assert batch["input_ids"][:, 0].tolist() == [0, 16, 32, 48]


def test_first_batch_of_rank_one(folder: Path) -> None:
    batch = first_batch(config(folder), rank=1, world_size=2)
    assert batch["sample_index"].tolist() == [4, 5, 6, 7]
    assert batch["input_ids"][:, 0].tolist() == SHUFFLED_WINDOW_STARTS[4:8]


def test_second_epoch_has_its_own_order(folder: Path) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        loader = build_loader(config(folder), batch_size=4)
    for _ in loader:
        pass
    batch = next(iter(loader))
    assert batch["sample_index"].tolist() == [0, 1, 2, 3]
    assert batch["input_ids"][:, 0].tolist() == SHUFFLED_EPOCH1_FIRST_TOKENS


@pytest.mark.parametrize("cross_shard", [True, False])
def test_window_starts(folder: Path, cross_shard: bool) -> None:
    stream = SampleStream.from_config(load_config(config(folder, cross_shard=cross_shard)))
    assert stream.num_windows == (62 if cross_shard else 61)
    want = SHUFFLED_WINDOW_STARTS if cross_shard else SHUFFLED_WINDOW_STARTS_WITHIN_SHARDS
    assert stream.window_starts(0, np.arange(12)).tolist() == want
