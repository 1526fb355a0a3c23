"""Per-source steps over real gloo ranks: save on 2 ranks inside an optimizer step
(``grad_accum_steps = 2``), resume on 3 and on 1; every step from one source, and the
resumed micro-batches equal the uninterrupted run's.

The ranks are subprocesses running this file as a module (tests/helpers/gloo.py); the parent
computes the uninterrupted stream itself.
"""

from __future__ import annotations

import json
import sys
import warnings
from pathlib import Path

import pytest

from streamload import build_loader
from streamload.testing import assert_batches_equal, collect_global_batches
from tests.helpers.gloo import start, wait
from tests.test_mixture_distributed import RESUME, SAVE, gather, worker
from tests.test_mixture_loader import SCHEDULE, SIZES, WEIGHTS, mixture, write_sources
from tests.test_mixture_per_source import step_sources

MICRO = 6  # W·b: SAVE (odd) micro-batches of 2-micro-batch steps: the state is inside a step


@pytest.mark.slow
def test_per_source_saved_on_two_ranks_inside_a_step_resumes_on_three_and_one(
    tmp_path: Path,
) -> None:
    paths = write_sources(tmp_path / "data", SIZES)
    cfg = mixture(
        paths, WEIGHTS, SCHEDULE, big=12, grad_accum_steps=2, mixture={"batching": "per_source"}
    )
    config = tmp_path / "mix.json"
    config.write_text(json.dumps(cfg))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        reference = collect_global_batches([build_loader(cfg, batch_size=MICRO)], SAVE + RESUME)
    step_sources(reference[: (SAVE + RESUME) // 2 * 2], 2)

    wait({"save": start(__file__, 2, ["save", config, tmp_path])})
    assert_batches_equal(reference[:SAVE], gather(tmp_path, "save", 2), "2 ranks before saving")
    state = json.loads((tmp_path / "state.json").read_text())
    assert state["cursor"]["in_step"] == MICRO  # one micro-batch of the step delivered

    wait({f"resume{w}": start(__file__, w, [f"resume{w}", config, tmp_path]) for w in (3, 1)})
    for world in (3, 1):
        resumed = gather(tmp_path, f"resume{world}", world)
        assert_batches_equal(reference[SAVE:], resumed, f"resumed on {world}")


if __name__ == "__main__":
    worker(*sys.argv[1:4])
