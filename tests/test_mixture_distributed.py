"""A mixture with a schedule over real gloo ranks: save on 4, resume on 2, 3, and 4 with 2×B.

The ranks are subprocesses running this file as a script (rank and world size come from the
initialised process group). Four ranks (global batch 12) train SAVE steps and save rank 0's
state; then three groups resume at once: 2 and 3 ranks with the same global batch, and 4
ranks with the config's ``global_batch_size`` doubled to 24. The parent compares with the
uninterrupted stream it computes itself.
"""

from __future__ import annotations

import json
import sys
import warnings
from pathlib import Path
from typing import Any

import pytest
import torch
import torch.distributed as dist

from streamload import build_loader
from streamload.testing import assert_batches_equal, collect_global_batches
from tests.helpers.gloo import start, wait
from tests.test_mixture_loader import (
    SCHEDULE,
    SIZES,
    WEIGHTS,
    Ranks,
    assert_own_sequences,
    mixture,
    per_source,
    write_sources,
)

SAVE, RESUME = 7, 6
RESUMES = {"resume2": (2, "mix12.json"), "resume3": (3, "mix12.json"), "double": (4, "mix24.json")}


def worker(phase: str, config: str, out: str) -> None:
    """One rank: ``save`` takes SAVE batches (micro-batches with ``grad_accum_steps``) and
    saves; the others load and take RESUME batches."""
    warnings.simplefilter("ignore")
    dist.init_process_group("gloo", init_method="env://")
    rank, world = dist.get_rank(), dist.get_world_size()
    cfg = json.loads(Path(config).read_text())
    micro = cfg["global_batch_size"] // cfg.get("grad_accum_steps", 1)  # W·b
    loader = build_loader(config, batch_size=micro // world, num_workers=rank % 2)
    assert (loader.rank.rank, loader.rank.world_size) == (rank, world)
    folder = Path(out)
    if phase != "save":
        loader.load_state_dict(json.loads((folder / "state.json").read_text()))
    batches: list[dict[str, torch.Tensor]] = []
    for batch in loader:
        batches.append({key: value.clone() for key, value in batch.items()})
        if len(batches) == (SAVE if phase == "save" else RESUME):
            break
    torch.save(batches, folder / f"{phase}_rank{rank}.pt")
    state = loader.state_dict()
    states: list[Any] = [None] * world
    dist.all_gather_object(states, state)
    if any(s != states[0] for s in states):
        raise SystemExit(f"ranks hold different states: {states}")
    if rank == 0:
        name = "state.json" if phase == "save" else f"{phase}_state.json"
        (folder / name).write_text(json.dumps(state))
    loader.close()
    dist.barrier()
    dist.destroy_process_group()


def gather(folder: Path, phase: str, world: int) -> list[dict[str, torch.Tensor]]:
    """Global batches from the per-rank batch files of one group."""
    return collect_global_batches(
        [torch.load(folder / f"{phase}_rank{r}.pt") for r in range(world)]
    )


@pytest.mark.slow
def test_mixture_saved_on_four_ranks_resumes_on_two_three_and_four_with_twice_the_batch(
    tmp_path: Path,
) -> None:
    paths = write_sources(tmp_path / "data", SIZES)
    cfg = mixture(paths, WEIGHTS, SCHEDULE)
    (tmp_path / "mix12.json").write_text(json.dumps(cfg))
    (tmp_path / "mix24.json").write_text(json.dumps({**cfg, "global_batch_size": 24}))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        uninterrupted = Ranks(cfg, 1)
        reference = uninterrupted.take(SAVE + RESUME)
    positions = uninterrupted.state_dict()["sources"]

    wait({"save": start(__file__, 4, ["save", tmp_path / "mix12.json", tmp_path])})
    saved = gather(tmp_path, "save", 4)
    assert_batches_equal(reference[:SAVE], saved, "4 ranks before saving")
    state = json.loads((tmp_path / "state.json").read_text())
    assert (state["cursor"]["samples"], state["cursor"]["step"]) == (SAVE * 12, SAVE)

    wait(
        {
            p: start(__file__, world, [p, tmp_path / c, tmp_path])
            for p, (world, c) in RESUMES.items()
        }
    )
    for phase in ("resume2", "resume3"):
        world = RESUMES[phase][0]
        assert_batches_equal(reference[SAVE:], gather(tmp_path, phase, world), phase)
        end = json.loads((tmp_path / f"{phase}_state.json").read_text())
        assert end["cursor"]["step"] == SAVE + RESUME, phase
        assert end["sources"] == positions, phase

    double = gather(tmp_path, "double", 4)
    assert [b["input_ids"].shape[0] for b in double] == [24] * RESUME
    indices = torch.cat([b["sample_index"] for b in double])
    assert torch.equal(indices, torch.arange(SAVE * 12, SAVE * 12 + RESUME * 24))
    assert_own_sequences(paths, per_source(saved + double, list(SIZES)), seed=cfg["seed"])
    end = json.loads((tmp_path / "double_state.json").read_text())
    assert end["global_batch_size"] == 24 and end["cursor"]["step"] == SAVE + RESUME
    drawn = per_source(saved + double, list(SIZES))
    assert {n: p["samples"] for n, p in end["sources"].items()} == {
        n: len(w) for n, w in drawn.items()
    }


if __name__ == "__main__":
    worker(*sys.argv[1:4])
