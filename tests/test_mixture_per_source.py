"""``[mixture] batching = "per_source"`` through the loaders: every optimizer step from one
source, the sources' step counts within one of their shares over every prefix of a phase,
each source along its own sequence, exact and elastic resumption through every entry point
(StreamLoader, StreamDataset under StatefulDataLoader, the node chain), the state checks, the
fingerprint, and the refusals."""

from __future__ import annotations

import copy
import tempfile
import warnings
from fractions import Fraction
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st
from torchdata.stateful_dataloader import StatefulDataLoader

from streamload import (
    ConfigError,
    LoaderOptions,
    RankSpec,
    SampleStream,
    StateError,
    StreamDataset,
    build_loader,
)
from streamload import load_config as load
from streamload.plan._exact import integer_weights
from streamload.testing import assert_batches_equal, assert_resumes_exactly, collect_global_batches
from tests.test_contracts import chain, grain_contract
from tests.test_mixture_loader import (
    SCHEDULE,
    SIZES,
    WEIGHTS,
    Ranks,
    assert_own_sequences,
    decode,
    mixture,
    per_source,
    write_sources,
)
from tests.test_mixture_properties import cases

pytestmark = pytest.mark.filterwarnings("ignore:each pass of", "ignore:the stream ended")
PER_SOURCE = {"batching": "per_source"}
PROPERTY = settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
Batch = dict[str, torch.Tensor]


@pytest.fixture(scope="module")
def paths(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    return write_sources(tmp_path_factory.mktemp("per-source"), SIZES)


def config(paths: dict[str, str], **extra: Any) -> dict[str, Any]:
    return mixture(paths, WEIGHTS, SCHEDULE, mixture=PER_SOURCE, **extra)


def step_sources(batches: list[Batch], accum: int = 1) -> list[int]:
    """The one source of each optimizer step (``accum`` consecutive global batches)."""
    out = []
    for first in range(0, len(batches) - len(batches) % accum, accum):
        sources = np.concatenate([decode(b)[0] for b in batches[first : first + accum]])
        assert (sources == sources[0]).all(), f"step {first // accum} mixes sources {sources}"
        out.append(int(sources[0]))
    return out


def assert_within_one_step(
    chosen: list[int], phases: list[tuple[int, dict[str, float]]], names: list[str]
) -> None:
    """Over every prefix of every phase, a source's steps are within one of weight × steps."""
    starts = [s for s, _ in phases] + [len(chosen)]
    for (start, weights), end in zip(phases, starts[1:], strict=False):
        nums, total = integer_weights([weights[n] / sum(weights.values()) for n in names])
        counts = [0] * len(names)
        for n, source in enumerate(chosen[start:end], start=1):
            counts[source] += 1
            for i, c in enumerate(counts):
                assert abs(Fraction(nums[i] * n, total) - c) < 1, (start, n, names[i], c)


# -- properties over any weights, schedule, world size and save point -------------------------
@PROPERTY
@given(cases(), st.sampled_from([1, 2]))
def test_per_source_steps_resume_exactly_on_another_world_size(
    case: dict[str, Any], accum: int
) -> None:
    with tempfile.TemporaryDirectory() as tmp, warnings.catch_warnings():
        warnings.simplefilter("ignore")
        paths = write_sources(Path(tmp), case["sizes"])
        cfg = mixture(
            paths,
            case["weights"],
            case["schedule"],
            big=case["big"] * accum,
            seed=case["seed"],
            sampling={"num_samples": case["num_samples"] * accum},
            per_source=case["policy"],
            mixture=PER_SOURCE,
            grad_accum_steps=accum,
        )

        def ranks(world: int, chunk: int) -> Any:
            b = case["big"] // world
            return RanksOf(cfg, world, b, chunk)

        full = list(ranks(case["world"], 2))
        names = list(case["sizes"])
        chosen = step_sources(full, accum)
        phases = [
            (0, case["weights"]),
            *((p["start_step"], p["weights"]) for p in case["schedule"]),
        ]
        if not case["policy"]:
            assert_within_one_step(chosen, phases, names)
        assert_own_sequences(paths, per_source(full, names), case["seed"], distinct=False)
        passes = 1 if case["policy"] else 2
        total = len(full) * passes
        assume(total > 0)
        assert_resumes_exactly(
            lambda: ranks(case["world"], 2),
            make_resumed=lambda: ranks(case["resume_world"], 3),
            save_points=sorted({min(p, total) for p in case["points"]}),
            passes=passes,
        )


class RanksOf(Ranks):
    """:class:`Ranks` with an explicit per-rank batch size (gradient accumulation)."""

    def __init__(self, cfg: dict[str, Any], world: int, b: int, chunk: int) -> None:
        options = LoaderOptions(chunk_batches=chunk)
        self.loaders = [
            build_loader(cfg, batch_size=b, rank=r, world_size=world, options=options)
            for r in range(world)
        ]


# -- the loader -------------------------------------------------------------------------------
def test_every_step_comes_from_one_source_on_the_schedule(paths: dict[str, str]) -> None:
    batches = list(Ranks(config(paths, sampling={"num_samples": 12 * 30}), 3))
    chosen = step_sources(batches)
    assert len(chosen) == 30
    phases = [(0, WEIGHTS), *((p["start_step"], p["weights"]) for p in SCHEDULE)]
    assert_within_one_step(chosen, phases, list(SIZES))
    assert_own_sequences(paths, per_source(batches, list(SIZES)), seed=3)


def test_the_first_steps_are_golden(paths: dict[str, str]) -> None:
    """A fixed config gives fixed steps: an accidental change of the rule fails here."""
    batches = Ranks(config(paths), 1).take(12)
    assert step_sources(batches) == [0, 1, 0, 2, 0, 2, 2, 0, 1, 1, 2, 1]


def test_with_accumulation_a_whole_optimizer_step_is_one_source(paths: dict[str, str]) -> None:
    """Mosaic's ``per_stream`` fills a device batch (an optimizer step) from one stream: every
    micro-batch of a step is from the same source, and the steps equal those of a run without
    accumulation whose global batch is the step."""
    cfg = config(paths, big=12, grad_accum_steps=3)
    micro = collect_global_batches(
        [build_loader(cfg, batch_size=2, rank=r, world_size=2) for r in range(2)], 30
    )
    whole = Ranks(config(paths, big=12), 1).take(10)
    assert step_sources(micro, 3) == step_sources(whole)
    flat = torch.cat([b["input_ids"] for b in micro])
    assert torch.equal(flat, torch.cat([b["input_ids"] for b in whole]))


def test_resuming_inside_a_step_on_another_world_size_is_exact(paths: dict[str, str]) -> None:
    cfg = config(paths, big=12, grad_accum_steps=2, sampling={"num_samples": 12 * 8})

    def make(world: int) -> Any:
        return RanksOf(cfg, world, 6 // world, 2)

    assert_resumes_exactly(lambda: make(2), make_resumed=lambda: make(3), passes=2)


def test_another_global_batch_size_continues_every_source(paths: dict[str, str]) -> None:
    cfg = config(paths)
    first = Ranks(cfg, 1)
    before = first.take(5)
    state = first.state_dict()
    resumed = Ranks({**cfg, "global_batch_size": 8}, 2)
    resumed.load_state_dict(state)
    after = resumed.take(9)
    step_sources(after)
    assert_own_sequences(paths, per_source(before + after, list(SIZES)), seed=3, distinct=False)
    assert resumed.state_dict()["schedule"]["batch_sizes"] == [[0, 12], [5, 8]]


@pytest.mark.parametrize("workers", [0, 2])
def test_stream_dataset_under_stateful_dataloader(paths: dict[str, str], workers: int) -> None:
    cfg = config(paths, sampling={"num_samples": 12 * 9})
    stream = SampleStream.from_config(load(cfg))
    rank = RankSpec(0, 1, 12)

    def make() -> StatefulDataLoader:
        return StatefulDataLoader(StreamDataset(stream, rank), batch_size=None, num_workers=workers)

    per_pass = len(list(make()))
    points = [0, 1, 4, per_pass, per_pass + 2] if workers else None
    assert_resumes_exactly(make, passes=2, save_points=points, restore_twice=not workers)
    grain_contract(lambda: StreamDataset(stream, rank))


def test_node_chain_resumes_exactly(paths: dict[str, str]) -> None:
    cfg = config(paths, sampling={"num_samples": 12 * 9})
    assert_resumes_exactly(lambda: chain(cfg, 4), passes=2, same_structure=True)


# -- the state: checks, fingerprint -----------------------------------------------------------
def saved(cfg: dict[str, Any], steps: int) -> dict[str, Any]:
    ranks = Ranks(cfg, 1)
    ranks.take(steps)
    return copy.deepcopy(ranks.state_dict())


@pytest.mark.parametrize("replayed", [True, False])
def test_the_state_checks_hold_for_the_new_rule(
    paths: dict[str, str], monkeypatch: pytest.MonkeyPatch, replayed: bool
) -> None:
    """Replayed (short) and bounded (long, O(sources)) checks accept the rule's own states
    and refuse edited counts."""
    import streamload.streams.cursor as cursor_module

    cfg = config(paths)
    state = saved(cfg, 9)
    monkeypatch.setattr(cursor_module, "MAX_REPLAYED", 1 << 40 if replayed else 0)
    loader = build_loader(cfg, batch_size=12)
    loader.load_state_dict(copy.deepcopy(state))
    expected = Ranks(cfg, 1).take(12)[9:]
    assert_batches_equal(expected, [b for _, b in zip(range(3), loader, strict=False)])
    edited = copy.deepcopy(state)
    edited["sources"]["a"]["samples"] += 12  # a whole step moved from c to a
    edited["sources"]["c"]["samples"] -= 12
    bounded = r"sources\.a\.samples.*its share of the steps, to within the rule's bound"
    with pytest.raises(StateError, match=r"sources\.a\.samples" if replayed else bounded):
        build_loader(cfg, batch_size=12).load_state_dict(edited)


def test_the_fingerprint_names_per_source_only_when_set(paths: dict[str, str]) -> None:
    mixed = mixture(paths, WEIGHTS, SCHEDULE)
    assert "batching" not in saved(mixed, 2)["fingerprint"]
    explicit = mixture(paths, WEIGHTS, SCHEDULE, mixture={"batching": "mixed"})
    assert saved(explicit, 2)["fingerprint"] == saved(mixed, 2)["fingerprint"]
    state = saved(config(paths), 2)
    assert state["fingerprint"]["batching"] == "per_source"
    with pytest.raises(StateError, match=r"batching: saved 'per_source', now None"):
        build_loader(mixed, batch_size=12).load_state_dict(state)


# -- refusals and no-ops ----------------------------------------------------------------------
def test_one_source_is_a_no_op(paths: dict[str, str]) -> None:
    plain = {"seq_len": 8, "seed": 3, "sources": [{"name": "a", "path": paths["a"]}]}
    per = {**plain, "mixture": PER_SOURCE}
    a, b = build_loader(plain, batch_size=4), build_loader(per, batch_size=4)
    assert_batches_equal(list(a), list(b))
    assert a.state_dict() == b.state_dict()


@pytest.mark.parametrize(
    ("extra", "match"),
    [
        ({"mixture": {"batching": "per_stream"}}, r"mixture\.batching = 'per_stream' is not one"),
        (
            {
                "mixture": PER_SOURCE,
                "sampling": {"mode": "vsl", "tokens_per_batch": 16, "min_seq_len": 2},
                "pad_token_id": 0,
            },
            r"mixture\.batching = 'per_source' is not built for mode = 'vsl'",
        ),
        (
            {"mixture": PER_SOURCE, "sampling": {"mode": "megatron", "num_samples": 8}},
            r"\[mixture\] options have no meaning",
        ),
    ],
)
def test_refused_configs_name_the_key(
    paths: dict[str, str], extra: dict[str, Any], match: str
) -> None:
    cfg = mixture(paths, WEIGHTS, **extra)
    if extra.get("sampling", {}).get("mode") == "vsl":
        cfg.pop("global_batch_size")
    with pytest.raises(ConfigError, match=match):
        load(cfg)


def test_the_config_prints_back(paths: dict[str, str]) -> None:
    cfg = load(config(paths))
    assert cfg.to_dict()["mixture"]["batching"] == "per_source"
    assert type(cfg).from_dict(cfg.to_dict()) == cfg


def test_a_sequence_length_warm_up_keeps_each_step_one_source(paths: dict[str, str]) -> None:
    """Rows of a shorter length are cut from the step's windows: still one source a step,
    and the run resumes exactly on another world size."""
    warm = [{"start_step": 0, "seq_len": 4}, {"start_step": 3, "seq_len": 8}]
    cfg = config(paths, big=4, seq_len_schedule=warm, sampling={"num_samples": 40})
    batches = Ranks(cfg, 2).take(8)
    assert [b["input_ids"].shape for b in batches[2:4]] == [(8, 4), (4, 8)]
    step_sources(batches)
    assert_resumes_exactly(lambda: Ranks(cfg, 2), make_resumed=lambda: Ranks(cfg, 1), passes=2)
