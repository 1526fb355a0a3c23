"""Hypothesis over mixtures: exact ordered resumption and per-source continuity.

Each example writes 2–3 small sources (source i holds tokens ``i * SPREAD + position``), draws
weights with zeros, a schedule of up to two more phases, a per-rank batch size, a world size
to save on and another to resume on (same global batch), an optional ``max_epochs`` policy,
and save points; ``sampling.num_samples`` bounds the pass so every run ends. Properties:
exact ordered resumption (on another world size), every source drawn along its own sequence
with per-batch shares on the weights, and per-source continuity after resuming with another
global batch size.
"""

from __future__ import annotations

import tempfile
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import torch
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from streamload.testing import assert_resumes_exactly
from tests.test_mixture_loader import (
    SEQ_LEN,
    Ranks,
    assert_own_sequences,
    counts_per_step,
    mixture,
    per_source,
    write_sources,
)

NAMES = ("a", "b", "c")
PROPERTY = settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.too_slow])

weight = st.one_of(st.just(0.0), st.sampled_from([0.5, 1.0, 2.0]), st.floats(0.05, 5.0))


@st.composite
def cases(draw: st.DrawFn) -> dict[str, Any]:
    """One mixture scenario (see the module docstring)."""
    count = draw(st.integers(2, 3))
    names = NAMES[:count]
    sizes = {}
    for name in names:
        windows, tail = draw(st.integers(3, 15)), draw(st.integers(0, SEQ_LEN - 1))
        total = windows * SEQ_LEN + 1 + tail
        cut = draw(st.integers(0, total))
        sizes[name] = [s for s in (cut, total - cut) if s] or [total]
    weights = {n: draw(weight) for n in names}
    assume(sum(weights.values()) > 0)
    schedule, start = [], 0
    for _ in range(draw(st.integers(0, 2))):
        start += draw(st.integers(1, 5))
        phase = {n: draw(weight) for n in names}
        assume(sum(phase.values()) > 0)
        schedule.append({"start_step": start, "weights": phase})
    b, world = draw(st.integers(1, 4)), draw(st.integers(1, 3))
    big = b * world
    steps = draw(st.integers(3, 14))
    policy = {}
    if draw(st.booleans()):
        policy = {draw(st.sampled_from(names)): {"max_epochs": draw(st.integers(1, 3))}}
    return {
        "sizes": sizes,
        "weights": weights,
        "schedule": schedule,
        "big": big,
        "world": world,
        "resume_world": draw(st.sampled_from([d for d in range(1, big + 1) if big % d == 0])),
        "num_samples": steps * big + draw(st.integers(0, big - 1)),
        "policy": policy,
        "seed": draw(st.integers(0, 2**16)),
        "points": draw(st.lists(st.integers(0, 2 * steps), min_size=1, max_size=3)),
    }


def build(case: dict[str, Any], root: Path) -> tuple[dict[str, str], dict[str, Any]]:
    paths = write_sources(root, case["sizes"])
    cfg = mixture(
        paths,
        case["weights"],
        case["schedule"],
        big=case["big"],
        seed=case["seed"],
        sampling={"num_samples": case["num_samples"]},
        per_source=case["policy"],
    )
    return paths, cfg


def full_run(cfg: dict[str, Any], world: int) -> list[dict[str, Any]]:
    ranks = Ranks(cfg, world, chunk_batches=2)
    return [{k: v.clone() for k, v in batch.items()} for batch in ranks]


@PROPERTY
@given(cases())
def test_mixtures_resume_exactly_on_another_world_size(case: dict[str, Any]) -> None:
    with tempfile.TemporaryDirectory() as tmp, warnings.catch_warnings():
        warnings.simplefilter("ignore")
        _, cfg = build(case, Path(tmp))
        passes = 1 if case["policy"] else 2
        total = len(full_run(cfg, case["world"])) * passes
        assume(total > 0)
        assert_resumes_exactly(
            lambda: Ranks(cfg, case["world"], chunk_batches=2),
            make_resumed=lambda: Ranks(cfg, case["resume_world"], chunk_batches=3),
            save_points=sorted({min(p, total) for p in case["points"]}),
            passes=passes,
        )


@PROPERTY
@given(cases())
def test_every_source_continues_its_own_sequence(case: dict[str, Any]) -> None:
    with tempfile.TemporaryDirectory() as tmp, warnings.catch_warnings():
        warnings.simplefilter("ignore")
        paths, cfg = build(case, Path(tmp))
        batches = full_run(cfg, case["world"])
        names = list(case["sizes"])
        limit = case["num_samples"] // case["big"]
        assert len(batches) <= limit
        if not case["policy"]:
            assert len(batches) == limit, "without a policy only num_samples ends the pass"
        assert_own_sequences(paths, per_source(batches, names), case["seed"], distinct=False)
        phases = [
            (0, case["weights"]),
            *((p["start_step"], p["weights"]) for p in case["schedule"]),
        ]
        for step, counts in enumerate(counts_per_step(batches, len(names))):
            w = np.array([[ws for s, ws in phases if s <= step][-1][n] for n in names])
            exact = w / w.sum() * case["big"]
            assert (np.floor(exact - 1e-9) <= counts).all(), (step, counts, exact)
            assert (counts <= np.ceil(exact + 1e-9)).all(), (step, counts, exact)


@PROPERTY
@given(cases(), st.integers(1, 3), st.integers(1, 8))
def test_resuming_with_another_global_batch_continues_every_source(
    case: dict[str, Any], world: int, b: int
) -> None:
    """Saved inside the pass; the new global batch takes the rest of the same pass."""
    with tempfile.TemporaryDirectory() as tmp, warnings.catch_warnings():
        warnings.simplefilter("ignore")
        paths, cfg = build(case, Path(tmp))
        saved = Ranks(cfg, case["world"])
        before = saved.take(min(case["points"]) % (case["num_samples"] // case["big"]))
        state = saved.state_dict()
        left = case["num_samples"] - len(before) * case["big"]
        assume(left >= world * b)  # else this pass is over and iter() starts the next one
        resumed = Ranks({**cfg, "global_batch_size": world * b}, world)
        resumed.load_state_dict(state)
        after = [{k: v.clone() for k, v in batch.items()} for batch in resumed]
        if not case["policy"]:
            assert len(after) == left // (world * b)
        if after:
            start = len(before) * case["big"]
            indices = torch.cat([batch["sample_index"] for batch in after])
            assert torch.equal(indices, torch.arange(start, start + indices.numel()))
        names = list(case["sizes"])
        drawn = per_source(before + after, names)
        assert_own_sequences(paths, drawn, case["seed"], distinct=False)
