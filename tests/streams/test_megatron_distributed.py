"""Two real gloo ranks share a Megatron index cache: rank 0 builds, rank 1 waits on the barrier."""

from __future__ import annotations

import json
import sys
import warnings
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.distributed as dist

from streamload import build_loader
from tests.helpers import gloo
from tests.streams.test_megatron import GOLDENS, config_of, load

pytestmark = pytest.mark.slow


def worker(config: str, out: str) -> None:
    """One rank: all its batches of the pass, saved as input_ids."""
    warnings.simplefilter("ignore")
    dist.init_process_group("gloo", init_method="env://")
    loader = build_loader(config, batch_size=4)
    batches = [batch["input_ids"].clone() for batch in loader]
    torch.save(batches, Path(out) / f"rank{dist.get_rank()}.pt")
    loader.close()
    dist.barrier()
    dist.destroy_process_group()


def test_ranks_share_one_build(tmp_path: Path) -> None:
    prefixes = GOLDENS.write_datasets(tmp_path)
    cfg = config_of("blend_train", prefixes)
    cfg["sampling"]["cache_dir"] = str(tmp_path / "cache")
    config = tmp_path / "megatron.json"
    config.write_text(json.dumps(cfg))
    gloo.launch(__file__, str(config), 2, tmp_path)
    ranks = [torch.load(tmp_path / f"rank{r}.pt") for r in range(2)]
    merged = np.concatenate([torch.cat([a, b]).numpy() for a, b in zip(*ranks, strict=True)])
    np.testing.assert_array_equal(merged, load("blend_train")[1]["text"][: merged.shape[0], :-1])
    assert len(list((tmp_path / "cache").glob("*description.json"))) == 1
    assert not list((tmp_path / "cache").glob("*.lock"))


if __name__ == "__main__":
    worker(*sys.argv[1:3])
