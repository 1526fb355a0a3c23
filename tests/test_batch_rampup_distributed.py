"""A batch-size ramp-up over real gloo ranks: save inside a step on 2 ranks of 2, resume on 2
ranks of 1.

The ranks are subprocesses running this file as a module (rank and world size come from the
initialised process group). Two ranks (micro-batches of 4 samples) take SAVE micro-batches,
stopping inside step 3 of the ramp (sizes 4, 4, 8, 12, …), and save rank 0's state; two
ranks of batch size 1 (micro-batches of 2) load it and take RESUME more. Before each batch a
rank records ``micro_batches_in_step``. The parent compares the samples with the
uninterrupted single-process stream and the micro-batch counts with the ramp's step sizes.
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
from streamload import load_config as load
from streamload.config.batch_schedule import step_sizes
from streamload.testing import assert_batches_equal, collect_global_batches
from tests.helpers.gloo import launch
from tests.test_batch_rampup import RAMP, with_schedule
from tests.test_grad_accum import flat, micro_batches
from tests.test_mixture_loader import SCHEDULE, SIZES, WEIGHTS, mixture, write_sources

SAVE, RESUME = 6, 20
BATCH = {"save": 2, "resume": 1}


def worker(phase: str, config: str, out: str) -> None:
    """One rank: ``save`` takes SAVE micro-batches and saves; ``resume`` loads, takes RESUME."""
    warnings.simplefilter("ignore")
    dist.init_process_group("gloo", init_method="env://")
    rank = dist.get_rank()
    loader = build_loader(config, batch_size=BATCH[phase], num_workers=rank % 2)
    folder = Path(out)
    if phase == "resume":
        loader.load_state_dict(json.loads((folder / "state.json").read_text()))
    batches, counts = [], []
    for batch in loader:
        batches.append({key: value.clone() for key, value in batch.items()})
        if len(batches) == (SAVE if phase == "save" else RESUME):
            break
        counts.append(loader.micro_batches_in_step)  # the step of the next batch
    torch.save({"batches": batches, "counts": counts}, folder / f"{phase}_rank{rank}.pt")
    states = [None, None]
    dist.all_gather_object(states, loader.state_dict())
    if states[0] != states[1]:
        raise SystemExit(f"ranks hold different states: {states}")
    if rank == 0 and phase == "save":
        (folder / "state.json").write_text(json.dumps(states[0]))
    loader.close()
    dist.barrier()
    dist.destroy_process_group()


@pytest.mark.slow
def test_a_ramp_saved_inside_a_step_on_two_ranks_resumes_on_two_ranks_of_another_split(
    tmp_path: Path,
) -> None:
    paths = write_sources(tmp_path / "data", SIZES)
    cfg = with_schedule(mixture(paths, WEIGHTS, SCHEDULE), RAMP)
    config = tmp_path / "ramp.json"
    config.write_text(json.dumps(cfg))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        whole = flat(micro_batches(cfg, 1, 2, 60))

    launch(__file__, "save", 2, config, tmp_path)
    state = json.loads((tmp_path / "state.json").read_text())
    assert (state["cursor"]["step"], state["cursor"]["in_step"]) == (3, 8)  # 1 + 1 + 2 + 2
    launch(__file__, "resume", 2, config, tmp_path)

    got, counts = [], {}
    for phase in ("save", "resume"):
        parts = [torch.load(tmp_path / f"{phase}_rank{r}.pt") for r in range(2)]
        got += collect_global_batches([part["batches"] for part in parts])
        counts[phase] = parts[0]["counts"]
        assert all(part["counts"] == counts[phase] for part in parts)
    done = SAVE * 4 + RESUME * 2
    want = {key: value[:done] for key, value in whole.items()}
    assert_batches_equal([want], [flat(got)], "2 ranks of 2, then 2 ranks of 1")

    sizes = step_sizes(load(cfg), 1)
    begins, begin = [], 0
    while begin < done:
        begins.append(begin)
        begin += sizes.size_at(begin)
    for phase, micro, first in (("save", 4, 0), ("resume", 2, SAVE * 4)):
        after = [first + (k + 1) * micro for k in range(len(counts[phase]))]
        step_of = [max(i for i, b in enumerate(begins) if b <= at) for at in after]
        want_counts = [sizes.size_at(begins[k]) // micro for k in step_of]
        assert counts[phase] == want_counts, phase


if __name__ == "__main__":
    worker(*sys.argv[1:4])
