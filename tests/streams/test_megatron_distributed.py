"""Two real gloo ranks share a Megatron index cache: rank 0 builds, rank 1 waits on the barrier;
a rank 0 whose build fails still reaches the barrier, so rank 1 fails the same way."""

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
from streamload.errors import ConfigError
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
    assert len(list((tmp_path / "cache").glob("*-streamload-megatron-description.json"))) == 1
    assert not list((tmp_path / "cache").glob("*.lock"))


def failing_worker(config: str, out: str) -> None:
    """One rank of a build that cannot succeed: its ConfigError, written down."""
    warnings.simplefilter("ignore")
    dist.init_process_group("gloo", init_method="env://")
    try:
        build_loader(config, batch_size=4)
    except ConfigError as exc:
        (Path(out) / f"rank{dist.get_rank()}.txt").write_text(str(exc))
    dist.destroy_process_group()


def test_a_failed_build_on_rank_0_fails_every_rank(tmp_path: Path) -> None:
    """Rank 0 refuses indices too large for the machine; rank 1 must not wait for it forever
    on the barrier, but fail with the same error."""
    prefixes = GOLDENS.write_datasets(tmp_path)
    cfg = config_of("gpt_e1_n", prefixes, num_samples=10**13)
    cfg["sampling"]["cache_dir"] = str(tmp_path / "cache")
    config = tmp_path / "megatron.json"
    config.write_text(json.dumps(cfg))
    procs = gloo.start(__file__, 2, ["failing", str(config), tmp_path])
    gloo.wait({"failing build on 2 ranks": procs}, timeout=60)
    messages = [(tmp_path / f"rank{r}.txt").read_text() for r in range(2)]
    assert messages[0] == messages[1] and "num_samples = 10000000000000" in messages[0]


if __name__ == "__main__":
    if sys.argv[1] == "failing":
        failing_worker(*sys.argv[2:4])
    else:
        worker(*sys.argv[1:3])
