"""Real data-parallel ranks over torch.distributed (gloo, 127.0.0.1): save on 4, resume on 2.

The ranks are subprocesses running this file as a script; each takes its rank and world size
from the initialised process group (no explicit arguments), writes its batches to a file,
and checks with ``all_gather_object`` that every rank saved the same state.
"""

from __future__ import annotations

import json
import sys
import warnings
from pathlib import Path

import pytest
import torch
import torch.distributed as dist

from streamload import build_loader
from streamload.testing import assert_batches_equal, collect_global_batches
from tests.helpers import gloo
from tests.helpers.corpus import write_shards

GLOBAL_BATCH = 8
SAVE_AFTER = 4


def launch(phase: str, world: int, config: Path, out: Path) -> None:
    """Run ``world`` ranks of this file's ``worker`` and wait for all of them."""
    gloo.launch(__file__, phase, world, config, out)


def worker(phase: str, config: str, out: str) -> None:
    """One rank: ``save`` iterates SAVE_AFTER steps and saves; ``resume`` finishes the pass."""
    warnings.simplefilter("ignore")
    dist.init_process_group("gloo", init_method="env://")
    rank, world = dist.get_rank(), dist.get_world_size()
    loader = build_loader(config, batch_size=GLOBAL_BATCH // world, num_workers=1)
    assert (loader.rank.rank, loader.rank.world_size) == (rank, world)
    folder = Path(out)
    if phase == "resume":
        loader.load_state_dict(json.loads((folder / "state.json").read_text()))
    batches = []
    for batch in loader:
        batches.append({key: value.clone() for key, value in batch.items()})
        if phase == "save" and len(batches) == SAVE_AFTER:
            break
    torch.save(batches, folder / f"{phase}_rank{rank}.pt")
    if phase == "save":
        state = loader.state_dict()
        states: list[object] = [None] * world
        dist.all_gather_object(states, state)
        if any(s != states[0] for s in states):
            raise SystemExit(f"ranks saved different states: {states}")
        if rank == 0:
            (folder / "state.json").write_text(json.dumps(state))
    loader.close()  # stop workers before the process group and the interpreter go
    dist.barrier()
    dist.destroy_process_group()


def mesh_worker(config: str, out: str) -> None:
    """One rank of a 2 (dp) x 2 (tp) DeviceMesh: the loader gets its DP rank from ``mesh["dp"]``."""
    from torch.distributed.device_mesh import init_device_mesh

    warnings.simplefilter("ignore")
    dist.init_process_group("gloo", init_method="env://")
    mesh = init_device_mesh("cpu", (2, 2), mesh_dim_names=("dp", "tp"))
    loader = build_loader(config, batch_size=GLOBAL_BATCH // 2, mesh=mesh["dp"])
    batches = []
    for batch in loader:
        batches.append({key: value.clone() for key, value in batch.items()})
        if len(batches) == SAVE_AFTER:
            break
    info = {"dp": mesh["dp"].get_local_rank(), "tp": mesh["tp"].get_local_rank()}
    torch.save((info, batches), Path(out) / f"mesh_rank{dist.get_rank()}.pt")
    loader.close()  # stop workers before the process group and the interpreter go
    dist.barrier()
    dist.destroy_process_group()


def gather_files(folder: Path, phase: str, world: int) -> list[dict[str, torch.Tensor]]:
    """Global batches from the per-rank batch files of one phase."""
    per_rank = [torch.load(folder / f"{phase}_rank{r}.pt") for r in range(world)]
    return collect_global_batches(per_rank)


@pytest.mark.slow
def test_save_on_four_ranks_resume_on_two(tmp_path: Path) -> None:
    corpus = write_shards(tmp_path / "data", [300, 200, 260])
    config = tmp_path / "data.json"
    config.write_text(json.dumps(corpus.config(8, seed=99, packing={"masks": True})))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        reference = collect_global_batches([build_loader(config, batch_size=GLOBAL_BATCH)])
    assert len(reference) > 2 * SAVE_AFTER

    launch("save", 4, config, tmp_path)
    state = json.loads((tmp_path / "state.json").read_text())
    assert state["cursor"]["samples"] == SAVE_AFTER * GLOBAL_BATCH
    assert_batches_equal(reference[:SAVE_AFTER], gather_files(tmp_path, "save", 4), "4 ranks")

    launch("resume", 2, config, tmp_path)
    resumed = gather_files(tmp_path, "resume", 2)
    assert_batches_equal(reference[SAVE_AFTER:], resumed, "resumed on 2 ranks")


@pytest.mark.slow
def test_tensor_parallel_peers_get_identical_batches(tmp_path: Path) -> None:
    """A 2x2 (dp, tp) DeviceMesh: tp peers share a DP rank and so get the same batches."""
    corpus = write_shards(tmp_path / "data", [300, 200])
    config = tmp_path / "data.json"
    config.write_text(json.dumps(corpus.config(8, seed=5)))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        reference = collect_global_batches([build_loader(config, batch_size=GLOBAL_BATCH)])
    launch("mesh", 4, config, tmp_path)
    by_dp: dict[int, list] = {}
    for rank in range(4):
        info, batches = torch.load(tmp_path / f"mesh_rank{rank}.pt")
        by_dp.setdefault(info["dp"], []).append(batches)
    assert sorted(by_dp) == [0, 1]
    for dp, (first, second) in by_dp.items():
        assert_batches_equal(first, second, f"tp peers of dp rank {dp}")
    merged = collect_global_batches([by_dp[0][0], by_dp[1][0]])
    assert_batches_equal(reference[:SAVE_AFTER], merged, "dp ranks of the mesh")


if __name__ == "__main__":
    if sys.argv[1] == "mesh":
        mesh_worker(*sys.argv[2:4])
    else:
        worker(*sys.argv[1:4])
