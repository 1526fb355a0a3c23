"""A global batch size that grows over the run: ``rampup_batch_size`` (Megatron-LM's) and
``[[batch_schedule]]``.

The sample stream is the plain one; optimizer step ``k`` is the next ``gbs_k`` samples, in
``gbs_k / (W·b)`` micro-batches of ``W·b`` (each rank its contiguous share), and
``StreamLoader.micro_batches_in_step`` says how many. A mixture allocates each step as one
global batch of its size. States resume exactly at any micro-batch, on other splits where
they divide. (``tests/plan/test_step_sizes.py`` checks the sizes against megatron-core.)
"""

from __future__ import annotations

import copy
import json
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st
from torchdata.stateful_dataloader import StatefulDataLoader

from streamload import ConfigError, RankSpec, SampleStream, StateError, StreamDataset, build_loader
from streamload import load_config as load
from streamload.config.batch_schedule import step_sizes
from streamload.nodes.plan_chunks import PlanChunks
from streamload.testing import assert_batches_equal, assert_resumes_exactly, collect_global_batches
from tests.helpers.shards import write_megatron_documents
from tests.test_grad_accum import flat, micro_batches, remainder, single
from tests.test_mixture_loader import (
    SCHEDULE,
    SIZES,
    WEIGHTS,
    counts_per_step,
    mixture,
    weights_at,
    write_sources,
)

pytestmark = pytest.mark.filterwarnings("ignore:each pass of", "ignore:the stream ended")

Batch = dict[str, torch.Tensor]
RAMP = {"global_batch_size": 24, "rampup_batch_size": [4, 4, 40]}  # steps 4, 4, 8, 12, 16, 24…
TABLE = {
    "batch_schedule": [
        {"start_step": 0, "global_batch_size": 6},
        {"start_step": 2, "global_batch_size": 12},
        {"start_step": 5, "global_batch_size": 24},
    ]
}


@pytest.fixture(scope="module")
def paths(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    return write_sources(tmp_path_factory.mktemp("ramp"), SIZES)


def with_schedule(cfg: Mapping[str, Any], schedule: Mapping[str, Any]) -> dict[str, Any]:
    out = {**copy.deepcopy(dict(cfg)), **copy.deepcopy(dict(schedule))}
    if "batch_schedule" in schedule:
        out.pop("global_batch_size", None)  # the last table's
    return out


def sizes_by_rule(cfg: Mapping[str, Any], length: int) -> list[int]:
    """Step sizes of a pass by the plain rule (step k + 1 begins at s_k + gbs(s_k))."""
    sizes, begin = step_sizes(load(cfg), 1), 0
    out = []
    while begin + sizes.size_at(begin) <= length:
        out.append(sizes.size_at(begin))
        begin += out[-1]
    return out


def optimizer_steps(cfg: Mapping[str, Any], world: int, b: int, count: int | None = None) -> list:
    """Whole optimizer steps (all ranks, micro-batches concatenated), counted by
    ``micro_batches_in_step`` before each."""
    loaders = [build_loader(cfg, batch_size=b, rank=r, world_size=world) for r in range(world)]
    iterators: list[Iterator[Batch]] = [iter(loader) for loader in loaders]
    steps: list[Batch] = []
    while count is None or len(steps) < count:
        micro = {loader.micro_batches_in_step for loader in loaders}
        assert len(micro) == 1, "every rank agrees on the step's micro-batches"
        batches = collect_global_batches(iterators, micro.pop())
        if not batches:
            break
        steps.append(flat(batches))
    return steps


# -- the stream and its steps -----------------------------------------------------------------
@pytest.mark.parametrize("schedule", [RAMP, TABLE], ids=["ramp", "table"])
@pytest.mark.parametrize(("world", "b"), [(1, 2), (2, 1), (1, 1)])
def test_steps_follow_the_schedule_and_concatenate_to_the_plain_stream(
    paths: dict[str, str], schedule: dict[str, Any], world: int, b: int
) -> None:
    base = single(paths, sampling={"num_samples": 200})
    cfg = with_schedule(base, schedule)
    steps = optimizer_steps(cfg, world, b)
    sizes = [step["input_ids"].shape[0] for step in steps]
    assert sizes == sizes_by_rule(cfg, 200) and len(set(sizes)) > 2
    plain = flat(micro_batches(base, world, b))
    got = flat(steps)
    want = {key: value[: got["input_ids"].shape[0]] for key, value in plain.items()}
    assert_batches_equal([want], [got], "the plain stream, cut at whole steps")
    assert len(build_loader(cfg, batch_size=b, rank=0, world_size=world)) * world * b == sum(sizes)


def test_a_mixture_allocates_each_step_by_its_size(paths: dict[str, str]) -> None:
    cfg = with_schedule(mixture(paths, WEIGHTS, SCHEDULE, big=24), RAMP)
    reference = optimizer_steps(cfg, 1, 4, 12)
    for world, b in [(2, 2), (4, 1)]:
        assert_batches_equal(reference, optimizer_steps(cfg, world, b, 12), f"{world}x{b}")
    sizes = [step["input_ids"].shape[0] for step in reference]
    assert sizes == [4, 4, 8, 12, 16, 24, 24, 24, 24, 24, 24, 24]
    for step, (row, size) in enumerate(zip(counts_per_step(reference, 3), sizes, strict=True)):
        exact = weights_at(step) * size
        assert (np.floor(exact) <= row).all() and (row <= np.ceil(exact)).all(), step
    loader = build_loader(cfg, batch_size=2, rank=0, world_size=2)
    for _ in zip(range(9), loader, strict=False):  # steps 0-3 (1+1+2+3) and 2 of step 4's 4
        pass
    state = loader.state_dict()
    assert state["schedule"]["batch_sizes"] == [[0, 4], [2, 8], [3, 12]]
    assert (state["cursor"]["step"], state["cursor"]["in_step"], state["global_batch_size"]) == (
        4,
        8,
        16,
    )
    assert state["fingerprint"]["batch_schedule"] == RAMP
    assert (loader.micro_batches_in_step, loader.stats()["steps"]) == (4, 4)


def test_megatron_mode_steps_and_an_evaluation_loader_beside_them(tmp_path: Path) -> None:
    rng = np.random.default_rng(3)
    lengths = rng.integers(3, 40, size=120).tolist()
    tokens = rng.integers(1, 500, size=sum(lengths)).astype(np.uint16)
    path = write_megatron_documents(tmp_path / "d", tokens, lengths)
    sampling = {"mode": "megatron", "split": "80,20,0", "num_samples": 60}
    cfg = {"seq_len": 8, "seed": 1, "sources": [{"name": "m", "path": str(path)}], **RAMP}
    cfg["sampling"] = sampling
    steps = optimizer_steps(cfg, 2, 2)
    assert [s["input_ids"].shape[0] for s in steps] == [4, 4, 8, 12, 16]  # 44 + 24 > 60
    assert flat(steps)["sample_index"].tolist() == list(range(44))
    valid = [build_loader(cfg, batch_size=2, rank=r, world_size=2, split="valid") for r in range(2)]
    index = torch.cat([b["sample_index"] for b in collect_global_batches(valid)])
    length = valid[0].stream.pass_length
    assert index[index >= 0].tolist() == list(range(length)), "an evaluation pass counts no steps"
    assert index.shape[0] == 4 * -(-length // 4)


# -- exact resumption -------------------------------------------------------------------------
@st.composite
def schedules(draw: st.DrawFn) -> dict[str, Any]:
    """Any schedule whose sizes are multiples of 4 (so 1, 2 and 4 samples per micro-batch
    divide them), as a ramp or a table by step or by sample."""
    if draw(st.booleans()):
        start, increment = draw(st.sampled_from([4, 8])), draw(st.sampled_from([4, 8]))
        final = start + increment * draw(st.integers(1, 4))
        samples = draw(st.integers(1, 60))
        return {"global_batch_size": final, "rampup_batch_size": [start, increment, samples]}
    key = draw(st.sampled_from(["start_step", "start_sample"]))
    gaps = draw(st.lists(st.integers(1, 8 if key == "start_step" else 40), max_size=3))
    starts = [0] + [sum(gaps[: i + 1]) for i in range(len(gaps))]
    sizes = [4 * draw(st.integers(1, 6)) for _ in starts]
    table = [{key: s, "global_batch_size": g} for s, g in zip(starts, sizes, strict=True)]
    return {"batch_schedule": table}


SLOW_OK = [HealthCheck.function_scoped_fixture, HealthCheck.too_slow]


@settings(max_examples=15, deadline=None, derandomize=True, suppress_health_check=SLOW_OK)
@given(schedule=schedules(), split=st.sampled_from([(1, 2), (2, 1), (2, 2), (4, 1)]))
def test_any_schedules_steps_concatenate_to_the_plain_stream(
    paths: dict[str, str], schedule: dict[str, Any], split: tuple[int, int]
) -> None:
    base = single(paths, sampling={"num_samples": 160})
    cfg = with_schedule(base, schedule)
    sizes = step_sizes(load(cfg), 1)
    assume(sizes.whole_end(0, 160) >= sizes.runs()[-1].first_sample)  # it ends in the pass
    steps = optimizer_steps(cfg, *split)
    assert [step["input_ids"].shape[0] for step in steps] == sizes_by_rule(cfg, 160)
    got = flat(steps)
    plain = flat(micro_batches(base, *split))
    want = {key: value[: got["input_ids"].shape[0]] for key, value in plain.items()}
    assert_batches_equal([want], [got], f"{schedule} at {split}")


@settings(max_examples=40, deadline=None, derandomize=True, suppress_health_check=SLOW_OK)
@given(
    kind=st.sampled_from(["single", "mixture"]),
    schedule=schedules(),
    split=st.sampled_from([(1, 1), (1, 2), (2, 1), (2, 2), (1, 4), (4, 1)]),
    saved=st.integers(1, 40),
    resumed=st.sampled_from([(1, 1), (2, 1), (1, 2), (2, 2), (4, 1), (1, 4), (3, 1)]),
)
def test_any_state_resumes_exactly_on_any_split_that_divides(
    paths: dict[str, str],
    kind: str,
    schedule: dict[str, Any],
    split: tuple[int, int],
    saved: int,
    resumed: tuple[int, int],
) -> None:
    sampling = {"num_samples": 160}
    base = mixture(paths, WEIGHTS, SCHEDULE, sampling=sampling) if kind == "mixture" else None
    cfg = with_schedule(base or single(paths, sampling=sampling), schedule)
    sizes = step_sizes(load(cfg), 1)
    assume(sizes.whole_end(0, 160) >= sizes.runs()[-1].first_sample)  # it ends in the pass
    world, b = split
    whole = flat(micro_batches(cfg, world, b))
    total = whole["input_ids"].shape[0]
    saved = min(saved, total // (world * b) - 1)
    loaders = [build_loader(cfg, batch_size=b, rank=r, world_size=world) for r in range(world)]
    collect_global_batches(loaders, saved)
    state, at = json.loads(json.dumps(loaders[0].state_dict())), saved * world * b
    new_world, new_b = resumed
    micro = new_world * new_b
    if any(run.size % micro for run in sizes.runs()):
        with pytest.raises(ConfigError, match="is not a multiple of world_size"):
            build_loader(cfg, batch_size=new_b, rank=0, world_size=new_world)
        return
    if state["cursor"].get("in_step", 0) % micro:
        with pytest.raises(StateError, match="do not split into global batches"):
            build_loader(cfg, batch_size=new_b, rank=0, world_size=new_world).load_state_dict(state)
        return
    got = remainder(cfg, new_world, new_b, state, (total - at) // micro)
    want = {key: value[at:] for key, value in whole.items()}
    assert_batches_equal([want], [got], f"saved after {at} samples, resumed at {resumed}")


@pytest.mark.parametrize("workers", [0, 2])
def test_one_loader_resumes_exactly_at_every_micro_batch_over_passes(
    paths: dict[str, str], workers: int
) -> None:
    cfg = with_schedule(mixture(paths, WEIGHTS, SCHEDULE, sampling={"num_samples": 70}), RAMP)
    assert_resumes_exactly(
        lambda: build_loader(cfg, batch_size=2, num_workers=workers, options={"chunk_batches": 2}),
        passes=2,  # pass 1 runs at the final size
        same_states=True,
    )


def test_stream_dataset_under_stateful_dataloader_resumes_exactly(paths: dict[str, str]) -> None:
    cfg = with_schedule(single(paths, sampling={"num_samples": 90}), TABLE)
    stream = SampleStream.from_config(load(cfg))
    want = list(build_loader(cfg, batch_size=3, rank=1, world_size=2))
    dataset = StreamDataset(stream, RankSpec(1, 2, 3))
    got = list(StatefulDataLoader(dataset, batch_size=None, num_workers=2))
    assert_batches_equal(want, got, "StreamDataset")
    assert_resumes_exactly(
        lambda: StatefulDataLoader(
            StreamDataset(stream, RankSpec(1, 2, 3)), batch_size=None, num_workers=2
        ),
        save_points=[1, 2, 3, 5, 8, len(want) - 1],
    )


def test_the_node_chain_resumes_inside_a_step(paths: dict[str, str]) -> None:
    cfg = load(with_schedule(mixture(paths, WEIGHTS, SCHEDULE), RAMP))
    stream = SampleStream.from_config(cfg)
    planner = PlanChunks(stream, RankSpec(0, 2, 2), chunk_batches=1)
    planner.reset(None)
    plans = [next(planner).sample_ids for _ in range(12)]
    planner = PlanChunks(stream, RankSpec(0, 2, 2), chunk_batches=1)
    planner.reset(None)
    for _ in range(5):  # steps 0, 1 (one micro-batch each), 2 (two), and 1 of step 3's 3
        next(planner)
    state = json.loads(json.dumps(planner.get_state()))
    assert (state["cursor"]["in_step"], state["global_batch_size"]) == (4, 12)
    resumed = PlanChunks(stream, RankSpec(0, 2, 2), chunk_batches=1)
    resumed.reset(state)
    assert resumed.get_state() == state
    assert all((next(resumed).sample_ids == want).all() for want in plans[5:])


# -- refusals ---------------------------------------------------------------------------------
def test_a_split_that_cannot_divide_a_step_is_refused_naming_it(paths: dict[str, str]) -> None:
    cfg = with_schedule(single(paths), TABLE)
    with pytest.raises(ConfigError, match=r"optimizer step 0 \(from sample 0\) holds 6 samples.*"
                       r"world_size 2 x batch_size 2 = 4"):  # fmt: skip
        build_loader(cfg, batch_size=2, rank=0, world_size=2)


def test_a_schedule_longer_than_the_first_pass_is_refused(paths: dict[str, str]) -> None:
    cfg = with_schedule(single(paths, sampling={"num_samples": 40}), RAMP)
    with pytest.raises(ConfigError, match=r"final global batch size 24 at optimizer step 5 "
                       r"\(sample 44\), but a pass holds 40 samples"):  # fmt: skip
        build_loader(cfg, batch_size=4)
    with pytest.raises(ConfigError, match="must end inside the first pass"):
        StreamDataset(SampleStream.from_config(load(cfg)), RankSpec(0, 1, 4))


def test_states_without_the_schedule_and_edited_ones_are_refused(paths: dict[str, str]) -> None:
    base = single(paths, sampling={"num_samples": 200})
    plain = build_loader(base, batch_size=4)
    next(iter(plain))
    ramped = build_loader(with_schedule(base, RAMP), batch_size=4)
    with pytest.raises(StateError, match="batch_schedule"):
        ramped.load_state_dict(plain.state_dict())
    plain = build_loader(base, batch_size=2)
    for _ in zip(range(3), plain, strict=False):
        pass
    state = plain.state_dict()  # at sample 6: inside step 1 (samples 4 to 8) of the ramp
    state["fingerprint"] = ramped.state_dict()["fingerprint"]
    with pytest.raises(StateError, match=r"step at sample 6, but .* begins at sample 4"):
        build_loader(with_schedule(base, RAMP), batch_size=2).load_state_dict(state)
