"""The schedules of a run together: a batch-size ramp-up with per-source batches and with
packed samples, per-source batches with a sequence-length warm-up, and the pair that is
refused (a ramp-up with a sequence-length warm-up). Each was built and tested alone
(tests/test_batch_rampup.py, test_mixture_per_source.py, test_seq_len_schedule.py); here
they meet."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from streamload import ConfigError, build_loader
from streamload.testing import assert_batches_equal, assert_resumes_exactly
from tests.helpers.shards import write_megatron_documents
from tests.test_batch_rampup import RAMP, optimizer_steps, sizes_by_rule, with_schedule
from tests.test_mixture_loader import SIZES, WEIGHTS, decode, mixture, write_sources

pytestmark = pytest.mark.filterwarnings("ignore:each pass of", "ignore:the stream ended")
PER_SOURCE = {"batching": "per_source"}


@pytest.fixture(scope="module")
def paths(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    return write_sources(tmp_path_factory.mktemp("combined"), SIZES)


def per_source_ramp(paths: dict[str, str]) -> dict[str, Any]:
    cfg = mixture(paths, WEIGHTS, big=24)
    cfg["mixture"] = {**cfg.get("mixture", {}), **PER_SOURCE}
    return with_schedule(cfg, RAMP)


def test_a_ramp_with_per_source_steps_takes_each_step_from_one_source(
    paths: dict[str, str],
) -> None:
    cfg = per_source_ramp(paths)
    reference = optimizer_steps(cfg, 1, 4, 14)
    sizes = [step["input_ids"].shape[0] for step in reference]
    assert sizes == [4, 4, 8, 12, 16, 24, 24, 24, 24, 24, 24, 24, 24, 24]
    chosen = []
    for step in reference:
        sources = np.unique(decode(step)[0])
        assert sources.size == 1, "a per-source step holds one source"
        chosen.append(int(sources[0]))
    assert len(set(chosen)) > 1, "the steps rotate over the sources"
    for world, b in [(2, 2), (4, 1)]:
        assert_batches_equal(reference, optimizer_steps(cfg, world, b, 14), f"{world}x{b}")


def test_a_ramp_with_per_source_steps_resumes_exactly_at_every_micro_batch(
    paths: dict[str, str],
) -> None:
    cfg = per_source_ramp(paths)
    cfg["sampling"] = {**cfg.get("sampling", {}), "num_samples": 240}
    assert_resumes_exactly(
        lambda: build_loader(copy.deepcopy(cfg), batch_size=2, rank=0, world_size=2),
        save_points=range(0, 40, 3),
    )
    assert_resumes_exactly(  # saved on 2 ranks x 2, resumed on 1 rank x 4 (whole steps)
        lambda: build_loader(copy.deepcopy(cfg), batch_size=4, rank=0, world_size=1),
        make_resumed=lambda: build_loader(copy.deepcopy(cfg), batch_size=4, rank=0, world_size=1),
        save_points=[0, 1, 2, 5, 9],
    )


def test_a_ramp_over_packed_samples_follows_the_schedule_and_resumes(tmp_path: Path) -> None:
    rng = np.random.default_rng(7)
    lengths = rng.integers(3, 40, size=400).tolist()
    tokens = rng.integers(1, 500, size=sum(lengths)).astype(np.uint16)
    path = write_megatron_documents(tmp_path / "docs", tokens, lengths)
    base = {
        "seq_len": 32,
        "seed": 1,
        "pad_token_id": 0,
        "sources": [{"name": "docs", "path": str(path)}],
        "sampling": {"mode": "packed"},
    }
    cfg = with_schedule(base, RAMP)
    steps = optimizer_steps(cfg, 2, 2)
    sizes = [step["input_ids"].shape[0] for step in steps]
    loader = build_loader(copy.deepcopy(cfg), batch_size=2, rank=0, world_size=2)
    assert sizes == sizes_by_rule(cfg, loader.stream.pass_length)
    assert_resumes_exactly(
        lambda: build_loader(copy.deepcopy(cfg), batch_size=2, rank=0, world_size=2),
        passes=2,
    )


def test_per_source_steps_with_a_sequence_length_warm_up_resume_exactly(
    paths: dict[str, str],
) -> None:
    cfg = mixture(paths, WEIGHTS, big=12)
    cfg["mixture"] = {**cfg.get("mixture", {}), **PER_SOURCE}
    cfg["seq_len_schedule"] = [{"start_step": 0, "seq_len": cfg["seq_len"] // 2}]
    cfg["seq_len_schedule"].append({"start_step": 3, "seq_len": cfg["seq_len"]})
    cfg["sampling"] = {"num_samples": 120}  # 10 steps: a finite run to compare
    loader = build_loader(copy.deepcopy(cfg), batch_size=6, rank=0, world_size=2)
    for step, batch in zip(range(6), loader, strict=False):
        assert np.unique(decode(batch)[0]).size == 1, f"step {step} holds one source"
    assert_resumes_exactly(
        lambda: build_loader(copy.deepcopy(cfg), batch_size=6, rank=0, world_size=2),
        save_points=range(0, 11),
    )


def test_a_ramp_with_a_sequence_length_warm_up_is_refused(paths: dict[str, str]) -> None:
    cfg = with_schedule(mixture(paths, WEIGHTS, big=24), RAMP)
    cfg["seq_len_warmup"] = {"start_seq_len": cfg["seq_len"] // 2, "steps": 4}
    with pytest.raises(ConfigError, match="seq_len"):
        build_loader(cfg, batch_size=2, rank=0, world_size=2)
