"""Gradient accumulation: ``grad_accum_steps = A`` loader batches (micro-batches) per
optimizer step of ``global_batch_size = A x world_size x batch_size`` samples.

Megatron's layout: micro-batch ``m`` of step ``k`` is the global batch ``k·A + m`` of
``W·b`` samples, so the sample stream is today's at global batch ``W·b``; only the mixture
allocation, the schedule's steps, the drop rule and the state count optimizer steps.
"""

from __future__ import annotations

import copy
import itertools
import json
from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from streamload import (
    ConfigError,
    RankSpec,
    SampleStream,
    StateError,
    StreamDataset,
    build_loader,
)
from streamload import load_config as load
from streamload.nodes.plan_chunks import PlanChunks
from streamload.testing import assert_batches_equal, assert_resumes_exactly, collect_global_batches
from tests.helpers.corpus import write_shards
from tests.test_mixture_loader import (
    SCHEDULE,
    SIZES,
    WEIGHTS,
    counts_per_step,
    decode,
    mixture,
    weights_at,
    write_sources,
)

pytestmark = pytest.mark.filterwarnings("ignore:each pass of", "ignore:the stream ended")

Batch = dict[str, torch.Tensor]


@pytest.fixture(scope="module")
def paths(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    return write_sources(tmp_path_factory.mktemp("accum"), SIZES)


def single(paths: Mapping[str, str], **extra: Any) -> dict[str, Any]:
    source = {"name": "a", "path": paths["a"]}
    return {"seq_len": 8, "seed": 5, "sources": [source], **extra}


def accum(cfg: Mapping[str, Any], steps: int, global_batch: int | None) -> dict[str, Any]:
    out = {**copy.deepcopy(dict(cfg)), "grad_accum_steps": steps}
    if global_batch is None:
        out.pop("global_batch_size", None)
    else:
        out["global_batch_size"] = global_batch
    return out


def micro_batches(cfg: Mapping[str, Any], world: int, b: int, count: int | None = None) -> list:
    """The global micro-batches of one pass (all ranks, in order)."""
    loaders = [build_loader(cfg, batch_size=b, rank=r, world_size=world) for r in range(world)]
    return collect_global_batches(loaders, count)


def flat(batches: list[Batch]) -> Batch:
    """The samples of consecutive batches, in order, as one batch."""
    return {key: torch.cat([b[key] for b in batches]) for key in batches[0]}


# -- (1) one source: the stream is today's at global batch W·b ---------------------------------
@settings(max_examples=12, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.function_scoped_fixture])  # fmt: skip
@given(
    world=st.integers(1, 3),
    b=st.integers(1, 3),
    steps=st.integers(2, 4),
    num_samples=st.sampled_from([None, 23, 40]),
    shuffle=st.booleans(),
)
def test_one_source_stream_is_the_micro_batch_stream_cut_at_whole_steps(
    paths: dict[str, str],
    world: int,
    b: int,
    steps: int,
    num_samples: int | None,
    shuffle: bool,
) -> None:
    sampling = {"shuffle": shuffle, **({"num_samples": num_samples} if num_samples else {})}
    cfg = single(paths, sampling=sampling)
    micro = world * b
    plain = micro_batches(cfg, world, b)
    stepped = micro_batches(accum(cfg, steps, steps * micro), world, b)
    length = SampleStream.from_config(load(cfg)).pass_length
    assert len(stepped) == length // (steps * micro) * steps, "whole optimizer steps only"
    assert_batches_equal(plain[: len(stepped)], stepped, "micro-batches")
    loader = build_loader(accum(cfg, steps, None), batch_size=b, rank=0, world_size=world)
    assert len(loader) == len(stepped)


def test_the_drop_warning_names_the_partial_optimizer_step(paths: dict[str, str]) -> None:
    cfg = accum(single(paths, sampling={"num_samples": 30}), 3, 12)
    with pytest.warns(UserWarning, match="ends with 6 samples that do not fill an optimizer step"):
        build_loader(cfg, batch_size=2, rank=0, world_size=2)


# -- (2) a mixture allocates each optimizer step as one global batch ---------------------------
@pytest.mark.parametrize(("world", "b", "steps"), [(2, 2, 3), (1, 3, 4), (3, 1, 4)])
def test_a_mixture_step_is_allocated_as_one_global_batch_of_B(
    paths: dict[str, str], world: int, b: int, steps: int
) -> None:
    big = world * b * steps
    cfg = mixture(paths, WEIGHTS, SCHEDULE, big=big)
    reference = micro_batches(cfg, 1, big, 14)  # A = 1, global batch B
    stepped = micro_batches(accum(cfg, steps, big), world, b, 14 * steps)
    per_step = [flat(stepped[k : k + steps]) for k in range(0, len(stepped), steps)]
    assert_batches_equal(reference, per_step, "optimizer steps")
    counts = counts_per_step(per_step, 3)
    for step, row in enumerate(counts):
        exact = weights_at(step) * big
        assert (np.floor(exact) <= row).all() and (row <= np.ceil(exact)).all(), step
    assert counts[SCHEDULE[1]["start_step"] :, 0].sum() == 0, "phase 2 starts at its step"
    assert counts[SCHEDULE[1]["start_step"] - 1, 0] > 0, "and not a micro-batch earlier"


def test_state_and_stats_count_optimizer_steps(paths: dict[str, str]) -> None:
    cfg = accum(mixture(paths, WEIGHTS, SCHEDULE, big=12), 3, 12)
    loader = build_loader(cfg, batch_size=2, rank=0, world_size=2)
    for delivered, _ in enumerate(loader, 1):
        state, stats = loader.state_dict(), loader.stats()
        assert state["cursor"]["step"] == stats["steps"] == delivered // 3
        assert stats["in_step"] == delivered % 3 and stats["batches"] == delivered
        assert state["cursor"].get("in_step", 0) == (delivered % 3) * 4
        assert state["global_batch_size"] == 12
        if delivered == 7:
            break
    drawn = decode(flat(micro_batches(cfg, 2, 2, 7)))[0]
    counts = np.bincount(drawn, minlength=3).tolist()
    assert [loader.stats()["sources"][n]["samples"] for n in SIZES] == counts


# -- (3) exact resumption after every micro-batch -----------------------------------------------
def remainder(
    cfg: Mapping[str, Any], world: int, b: int, state: Mapping[str, Any], count: int
) -> Batch:
    loaders = [build_loader(cfg, batch_size=b, rank=r, world_size=world) for r in range(world)]
    for loader in loaders:
        loader.load_state_dict(json.loads(json.dumps(state)))
    return flat(collect_global_batches(loaders, count))


@pytest.mark.parametrize("kind", ["mixture", "single"])
def test_a_state_after_any_micro_batch_resumes_exactly_on_other_world_sizes(
    paths: dict[str, str], kind: str
) -> None:
    if kind == "mixture":
        base = mixture(paths, WEIGHTS, SCHEDULE, big=8)
    else:
        base = single(paths, sampling={"num_samples": 200})
    cfg = accum(base, 2, 8)  # saved at W 2, b 2: micro-batches of 4 samples
    whole = flat(micro_batches(cfg, 2, 2, 24))
    loaders = [build_loader(cfg, batch_size=2, rank=r, world_size=2) for r in range(2)]
    iterators = [iter(loader) for loader in loaders]
    for saved in range(1, 13):
        for it in iterators:
            next(it)
        state = loaders[0].state_dict()
        assert json.dumps(state) == json.dumps(loaders[1].state_dict())
        at = saved * 4
        for world, b, steps in [(2, 2, 2), (4, 1, 2), (1, 2, 4), (2, 1, 4)]:
            got = remainder(accum(base, steps, 8), world, b, state, (96 - at) // (world * b))
            want = {key: value[at:] for key, value in whole.items()}
            assert_batches_equal([want], [got], f"saved after {saved}, resumed at {world}x{b}")


@settings(max_examples=15, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.function_scoped_fixture])  # fmt: skip
@given(
    split=st.sampled_from([(1, 2, 6), (2, 1, 6), (3, 2, 2), (2, 3, 2), (6, 1, 2), (1, 4, 3)]),
    saved=st.integers(1, 17),
    resumed=st.sampled_from([(1, 1), (1, 2), (2, 1), (3, 1), (1, 3), (2, 2), (6, 1), (4, 3)]),
)
def test_any_mid_step_state_resumes_exactly_on_any_split_that_fits(
    paths: dict[str, str], split: tuple[int, int, int], saved: int, resumed: tuple[int, int]
) -> None:
    world, b, steps = split  # every split makes steps of 12 samples
    assume(saved * world * b < 96)
    cfg = accum(mixture(paths, WEIGHTS, SCHEDULE, big=12), steps, 12)
    whole = flat(micro_batches(cfg, world, b, 96 // (world * b)))
    loaders = [build_loader(cfg, batch_size=b, rank=r, world_size=world) for r in range(world)]
    collect_global_batches(loaders, saved)
    state, at = loaders[0].state_dict(), saved * world * b
    new_world, new_b = resumed
    rest = 12 - at % 12
    if rest % (new_world * new_b) or 12 % (new_world * new_b):
        new = accum(cfg, 1, None) if at % 12 == 0 else cfg  # unfit: refused inside a step
        with pytest.raises((StateError, ConfigError)):
            build_loader(new, batch_size=new_b, rank=0, world_size=new_world).load_state_dict(state)
        return
    new_cfg = accum(cfg, 12 // (new_world * new_b), 12)
    got = remainder(new_cfg, new_world, new_b, state, (96 - at) // (new_world * new_b))
    want = {key: value[at:] for key, value in whole.items()}
    assert_batches_equal([want], [got], f"saved after {at} samples, resumed at {resumed}")


def test_one_loader_resumes_exactly_at_every_micro_batch(paths: dict[str, str]) -> None:
    cfg = accum(mixture(paths, WEIGHTS, SCHEDULE, big=6, sampling={"num_samples": 70}), 3, 6)
    assert_resumes_exactly(
        lambda: build_loader(cfg, batch_size=2, options={"chunk_batches": 2}),
        passes=2,
        same_states=True,
    )


def test_a_step_boundary_resumes_with_another_step_size(paths: dict[str, str]) -> None:
    cfg = mixture(paths, WEIGHTS, SCHEDULE, big=8)
    loader = build_loader(accum(cfg, 2, 8), batch_size=4)
    for _ in zip(range(4), loader, strict=False):
        pass
    state = loader.state_dict()
    assert "in_step" not in state["cursor"] and state["cursor"]["step"] == 2
    resumed = build_loader(accum(cfg, 3, 12), batch_size=4)
    resumed.load_state_dict(state)
    first = next(iter(resumed))
    assert first["sample_index"].tolist() == list(range(16, 20))
    assert resumed.state_dict()["schedule"]["batch_sizes"] == [[0, 8]]
    assert resumed.state_dict()["cursor"]["in_step"] == 4


def test_a_state_inside_a_step_refuses_another_step_or_split(paths: dict[str, str]) -> None:
    cfg = mixture(paths, WEIGHTS, SCHEDULE, big=8)
    loader = build_loader(accum(cfg, 2, 8), batch_size=2, rank=0, world_size=2)
    next(iter(loader))
    state = loader.state_dict()
    assert state["cursor"]["in_step"] == 4
    other = build_loader(accum(cfg, 3, 12), batch_size=2, rank=0, world_size=2)
    with pytest.raises(StateError, match=r"4 samples into an optimizer step of 8 .* 12 samples"):
        other.load_state_dict(state)
    wide = build_loader(accum(cfg, 1, 8), batch_size=4, rank=0, world_size=2)
    with pytest.raises(StateError, match=r"remaining 4 samples do not split .* = 8 samples"):
        wide.load_state_dict(state)
    edited = copy.deepcopy(state)
    edited["cursor"]["in_step"] = 8
    with pytest.raises(StateError, match="in_step = 8 must be below global_batch_size = 8"):
        build_loader(accum(cfg, 2, 8), batch_size=2, rank=0, world_size=2).load_state_dict(edited)
    edited = copy.deepcopy(state)
    del edited["schedule"]["step_drawn"]
    with pytest.raises(StateError, match=r"step_drawn .* it is missing"):
        build_loader(accum(cfg, 2, 8), batch_size=2, rank=0, world_size=2).load_state_dict(edited)


# -- (5) config and argument errors -------------------------------------------------------------
@pytest.mark.parametrize(
    ("value", "match"),
    [
        (0, "grad_accum_steps = 0 must be >= 1"),
        (True, "grad_accum_steps"),
        (2.0, "grad_accum_steps"),
        ("2", "grad_accum_steps"),
    ],
)
def test_grad_accum_steps_must_be_a_positive_integer(
    paths: dict[str, str], value: Any, match: str
) -> None:
    with pytest.raises(ConfigError, match=match):
        load({**single(paths), "grad_accum_steps": value})


def test_global_batch_size_must_be_a_multiple_of_grad_accum_steps(paths: dict[str, str]) -> None:
    with pytest.raises(ConfigError, match=r"global_batch_size = 10 .* grad_accum_steps = 4"):
        load(accum(single(paths), 4, 10))


def test_loader_arguments_must_make_the_global_batch(paths: dict[str, str]) -> None:
    cfg = accum(single(paths, sampling={"num_samples": 70}), 4, 32)
    with pytest.raises(
        ConfigError,
        match=r"global_batch_size = 32 in the config, but grad_accum_steps 4 x world_size 2 "
        r"x batch_size 2 = 16",
    ):
        build_loader(cfg, batch_size=2, rank=0, world_size=2)
    assert len(build_loader(cfg, batch_size=4, rank=0, world_size=2)) == 8  # 2 steps of 4


def test_grad_accum_steps_prints_back(paths: dict[str, str], tmp_path: Path) -> None:
    cfg = load(accum(single(paths), 3, 6))
    assert cfg.to_dict()["grad_accum_steps"] == 3
    assert load(cfg.to_dict()) == cfg


# -- the other consumers of a position ----------------------------------------------------------
def test_stream_dataset_resumes_inside_a_step(paths: dict[str, str]) -> None:
    cfg = accum(mixture(paths, WEIGHTS, SCHEDULE, big=8), 2, 8)
    stream = SampleStream.from_config(load(cfg))
    spec = RankSpec(1, 2, 2)
    want = list(itertools.islice(build_loader(cfg, batch_size=2, rank=1, world_size=2), 9))
    dataset = StreamDataset(stream, spec)
    it = iter(dataset)
    got = [next(it) for _ in range(3)]
    state = json.loads(json.dumps(dataset.state_dict()))
    assert (state["cursor"]["in_step"], state["global_batch_size"]) == (4, 8)
    resumed = StreamDataset(stream, spec)
    resumed.load_state_dict(state)
    got += list(itertools.islice(resumed, 6))
    assert_batches_equal(want, got, "StreamDataset")
    state["cursor"]["in_step"] = 2
    with pytest.raises(
        StateError, match=r"cursor\.samples = 12 less 2 of the step in progress = 10"
    ):
        StreamDataset(stream, spec).load_state_dict(state)


def test_plan_chunks_refuses_a_position_inside_a_step_of_another_size(
    paths: dict[str, str],
) -> None:
    cfg = load(accum(mixture(paths, WEIGHTS, SCHEDULE, big=8), 2, 8))
    stream = SampleStream.from_config(cfg)
    planner = PlanChunks(stream, RankSpec(0, 2, 2), chunk_batches=1)
    planner.reset(None)
    next(planner)
    state = planner.get_state()
    assert (state["cursor"]["in_step"], state["global_batch_size"]) == (4, 8)
    narrow = SampleStream.from_config(replace(cfg, grad_accum_steps=4))  # 4 x 1 x 2: B = 8
    PlanChunks(narrow, RankSpec(0, 1, 2), chunk_batches=1).reset(state)  # 2 divides the rest
    other = SampleStream.from_config(replace(cfg, grad_accum_steps=4, global_batch_size=16))
    with pytest.raises(StateError, match=r"optimizer step of 8 samples.* hold 16 samples"):
        PlanChunks(other, RankSpec(0, 2, 2), chunk_batches=1).reset(state)


def test_an_evaluation_loader_keeps_its_padded_global_batches(tmp_path: Path) -> None:
    cfg = write_shards(tmp_path / "data", [300, 200, 260]).config(
        8, global_batch_size=4, sampling={"split": "80,20,0"}
    )
    loaders = [
        build_loader(accum(cfg, 3, 12), batch_size=2, rank=r, world_size=2, split="valid")
        for r in range(2)
    ]
    valid = [build_loader(cfg, batch_size=2, rank=r, world_size=2, split="valid") for r in range(2)]
    got = collect_global_batches(loaders)
    assert got and not bool(got[-1]["sample_mask"].all()), "a padded last global batch"
    assert_batches_equal(collect_global_batches(valid), got, "valid")


def test_stream_dataset_workers_stop_at_the_last_whole_step(paths: dict[str, str]) -> None:
    """A ``StreamDataset`` worker jumps its siblings' batches and may land inside a step that
    ends past the pass: it has nothing left there (no batch from beyond the pass), and the
    state saved with it loads (its position lies within the workers' slack)."""
    cfg = accum(single(paths, sampling={"num_samples": 20}), 2, 8)
    want = list(build_loader(cfg, batch_size=4))
    assert len(want) == 4  # 2 whole steps of 8; the last 4 samples are no whole step
    stream = SampleStream.from_config(load(cfg))
    dataset = StreamDataset(stream, RankSpec(0, 1, 4))
    got = list(torch.utils.data.DataLoader(dataset, batch_size=None, num_workers=3))
    assert_batches_equal(want, got, "StreamDataset with 3 DataLoader workers")
    from torchdata.stateful_dataloader import StatefulDataLoader

    loader = StatefulDataLoader(dataset, batch_size=None, num_workers=3)
    assert_batches_equal(want, list(loader), "StatefulDataLoader")
    state = loader.state_dict()  # every worker past the end, one inside a step beyond it
    resumed = StatefulDataLoader(dataset, batch_size=None, num_workers=3)
    resumed.load_state_dict(state)  # refused before: "that step ends after the pass"
    with build_loader(cfg, batch_size=4) as again:
        assert_batches_equal(want, list(again), "first pass")
        assert_batches_equal(list(again), list(resumed), "the next pass after the state")
