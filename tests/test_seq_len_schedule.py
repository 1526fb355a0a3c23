"""Sequence-length warm-up (issue 34, item 2) through every entry point.

The reference is the plain stream at the maximum length: under any schedule, world size and
save point, step ``k``'s rows are that stream's windows of step ``k`` cut into rows of the
step's length, consecutive and overlapping by one token (nothing skipped or repeated), and a
resumed run delivers exactly the uninterrupted run's batches.
"""

from __future__ import annotations

import functools
import json
import tempfile
import warnings
from pathlib import Path
from typing import Any

import pytest
import torch
from hypothesis import assume, given, settings
from hypothesis import strategies as st
from torchdata.nodes import Loader
from torchdata.stateful_dataloader import StatefulDataLoader

from streamload import (
    LoaderOptions,
    RankSpec,
    SampleStream,
    StreamDataset,
    StreamLoader,
    build_loader,
    load_config,
)
from streamload.nodes import build_chain
from streamload.nodes.materialize import Materialize
from streamload.testing import assert_batches_equal, assert_resumes_exactly, collect_global_batches
from tests.helpers.corpus import Corpus, write_shards
from tests.helpers.elastic import assert_resumes_on_world
from tests.test_distributed import GLOBAL_BATCH, SAVE_AFTER, gather_files, launch
from tests.test_mixture_loader import SCHEDULE, SIZES, WEIGHTS, mixture, write_sources

SETTINGS = settings(max_examples=20, deadline=None)


def expected_length(phases: list[dict[str, int]], step: int, top: int) -> int:
    """The row length of ``step``, written independently of the library."""
    length = top
    for phase in phases:
        if phase["start_step"] <= step:
            length = phase["seq_len"]
    return length


@st.composite
def setups(draw: st.DrawFn) -> dict[str, Any]:
    """A corpus, a maximum length, a schedule and a data-parallel layout with >= 1 step."""
    top = draw(st.sampled_from([4, 6, 8, 12]))
    sizes = draw(st.lists(st.integers(top + 1, 160), min_size=1, max_size=3))
    divisors = [d for d in range(1, top + 1) if top % d == 0]
    starts = sorted(draw(st.sets(st.integers(0, 10), min_size=1, max_size=4)))
    phases = [{"start_step": s, "seq_len": draw(st.sampled_from(divisors))} for s in starts]
    world, b, accum = draw(st.integers(1, 3)), draw(st.integers(1, 3)), draw(st.integers(1, 2))
    mode = draw(st.sampled_from(["concat", "concat", "packed"]))
    windows = (sum(sizes) - 1) // top
    assume(mode == "packed" or windows >= world * b * accum)
    return {
        "sizes": sizes,
        "top": top,
        "phases": phases,
        "world": world,
        "b": b,
        "accum": accum,
        "mode": mode,
        "masks": draw(st.booleans()),
        "compact": draw(st.booleans()),
        "shuffle": draw(st.booleans()),
        "seed": draw(st.integers(0, 2**16)),
    }


def config(corpus: Corpus, s: dict[str, Any], schedule: bool = True) -> dict[str, Any]:
    extra: dict[str, Any] = {"pad_token_id": 1} if s["mode"] == "packed" else {}
    if schedule:
        extra["seq_len_schedule"] = s["phases"]
    return corpus.config(
        s["top"],
        seed=s["seed"],
        global_batch_size=s["world"] * s["b"] * s["accum"],
        grad_accum_steps=s["accum"],
        sampling={"mode": s["mode"], "shuffle": s["shuffle"]},
        packing={"masks": s["masks"], "compact": s["compact"]},
        **extra,
    )


def loaders(cfg: dict[str, Any], world: int, b: int, chunk: int = 3) -> list[StreamLoader]:
    opts = LoaderOptions(chunk_batches=chunk)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the dropped tail of a pass
        return [
            build_loader(cfg, batch_size=b, rank=r, world_size=world, options=opts)
            for r in range(world)
        ]


def assert_cut(plain: dict[str, torch.Tensor], cut: dict[str, torch.Tensor], length: int) -> None:
    """``cut``'s rows are ``plain``'s windows cut into rows of ``length`` inputs."""
    top = (plain["input_ids"] if "input_ids" in plain else plain["tokens"][:, 1:]).shape[1]
    rows = top // length
    assert torch.equal(cut["sample_index"], plain["sample_index"].repeat_interleave(rows))
    assert torch.equal(cut["source_ids"], plain["source_ids"].repeat_interleave(rows))
    if "tokens" in plain:  # compact: rows of length + 1 tokens at stride length
        want = plain["tokens"].unfold(1, length + 1, length)
        assert torch.equal(cut["tokens"].reshape(want.shape), want)
    for key in ("input_ids", "labels", "label_mask"):  # end to end: the window's
        if key in plain:
            assert torch.equal(cut[key].reshape(plain[key].shape), plain[key]), key
    if "position_ids" in plain:
        within = torch.arange(length).repeat(rows)
        want = torch.minimum(plain["position_ids"], within).reshape(-1, length)
        assert torch.equal(cut["position_ids"], want)
        assert_masks_follow_positions(cut)


def assert_masks_follow_positions(batch: dict[str, torch.Tensor]) -> None:
    """``doc_ids``, ``cu_seqlens`` and ``max_seqlen`` of each row follow its positions."""
    positions = batch["position_ids"]
    length = positions.shape[1]
    assert torch.equal(batch["doc_ids"], (positions == 0).cumsum(1) - 1)
    for row, pos in enumerate(positions):
        starts = torch.nonzero(pos == 0).flatten().tolist()
        bounds = starts + [length] * (length + 1 - len(starts))
        assert batch["cu_seqlens"][row].tolist() == bounds
        assert int(batch["max_seqlen"][row]) == max(
            b - a for a, b in zip(starts, [*starts[1:], length], strict=True)
        )


@SETTINGS
@given(s=setups())
def test_rows_are_the_plain_windows_cut(s: dict[str, Any]) -> None:
    """Two passes: nothing skipped or repeated across a switch or a pass, on every rank."""
    with tempfile.TemporaryDirectory() as tmp:
        corpus = write_shards(Path(tmp), s["sizes"])
        plain = loaders(config(corpus, s, schedule=False), s["world"], s["b"])
        cut = loaders(config(corpus, s), s["world"], s["b"])
        step = 0
        for _ in range(2):
            want, got = collect_global_batches(plain), collect_global_batches(cut)
            assert len(want) == len(got)
            for k, (w, g) in enumerate(zip(want, got, strict=True)):
                length = expected_length(s["phases"], step + k // s["accum"], s["top"])
                assert_cut(w, g, length)
            step += len(want) // s["accum"]


@SETTINGS
@given(s=setups(), data=st.data())
def test_resumes_exactly_at_a_random_save_point(s: dict[str, Any], data: st.DataObject) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        corpus = write_shards(Path(tmp), s["sizes"])
        cfg = config(corpus, s)
        rank = data.draw(st.integers(0, s["world"] - 1), label="rank")
        chunk = data.draw(st.integers(1, 4), label="chunk")

        def make() -> StreamLoader:
            return loaders(cfg, s["world"], s["b"], chunk)[rank]

        per_pass = len(list(make()))
        assume(per_pass > 0)  # a packed corpus may hold less than one step
        point = data.draw(st.integers(0, 2 * per_pass), label="save point")
        assert_resumes_exactly(make, save_points=[point], passes=2)


@SETTINGS
@given(s=setups(), data=st.data())
def test_resumes_on_another_world_size(s: dict[str, Any], data: st.DataObject) -> None:
    big = s["world"] * s["b"]
    other = data.draw(st.sampled_from([w for w in range(1, 5) if big % w == 0]), label="world")
    accum = s["accum"]  # a state inside an optimizer step resumes at the same step size only

    def pick(batches: int) -> int:
        return accum * data.draw(st.integers(0, batches // accum), label="step")

    with tempfile.TemporaryDirectory() as tmp:
        cfg = config(write_shards(Path(tmp), s["sizes"]), s)
        saved, resumed = (s["world"], s["b"], 3), (other, big // other, 1 + s["b"] % 3)
        assert_resumes_on_world(functools.partial(loaders, cfg), saved, resumed, pick)


@pytest.fixture(scope="module")
def warm(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """Concat, masks on, 4 windows of 8 per step: lengths 2, 4, 8 from steps 0, 3, 5."""
    docs = write_shards(tmp_path_factory.mktemp("seqwarm"), [150, 110])
    return docs.config(
        8,
        seed=2,
        global_batch_size=4,
        packing={"masks": True},
        seq_len_schedule=[
            {"start_step": 0, "seq_len": 2},
            {"start_step": 3, "seq_len": 4},
            {"start_step": 5, "seq_len": 8},
        ],
    )


@pytest.mark.parametrize("accum", [1, 2])
def test_stream_loader_resumes_at_every_batch(warm: dict[str, Any], accum: int) -> None:
    """Every save point of two passes, before, at and after each switch, inside steps too."""
    cfg = {**warm, "grad_accum_steps": accum}
    assert_resumes_exactly(lambda: loaders(cfg, 2, 2 // accum, 4)[1], passes=2)


def test_stream_dataset_under_stateful_dataloader_resumes_exactly(warm: dict[str, Any]) -> None:
    stream = SampleStream.from_config(load_config(warm))

    def make() -> StatefulDataLoader:
        return StatefulDataLoader(StreamDataset(stream, RankSpec(0, 1, 4)), batch_size=None)

    batches = list(make())
    assert [b["input_ids"].shape[1] for b in batches[:6]] == [2, 2, 2, 4, 4, 8]
    assert [b["input_ids"].shape[0] for b in batches[:6]] == [16, 16, 16, 8, 8, 4]
    assert_resumes_exactly(make, passes=2)


def test_node_chain_resumes_exactly(warm: dict[str, Any]) -> None:
    stream = SampleStream.from_config(load_config(warm))

    def make() -> Loader[Any]:
        return Loader(build_chain(stream, RankSpec(0, 1, 4)).root)

    assert_resumes_exactly(make, passes=2, same_structure=True)


def test_loader_with_thread_workers_equals_the_loader_without(warm: dict[str, Any]) -> None:
    plain = list(build_loader(warm, batch_size=2, world_size=2, rank=1))
    threads = LoaderOptions(worker_type="thread", chunk_batches=4)
    got = list(
        build_loader(warm, batch_size=2, world_size=2, rank=1, num_workers=2, options=threads)
    )
    assert_batches_equal(plain, got)


@pytest.mark.parametrize("options", [{"masks": True}, {"masks": False, "compact": True}])
def test_a_cut_chunk_fits_the_workers_slot(tmp_path: Path, options: dict[str, Any]) -> None:
    """Process workers hand a chunk through a shared-memory slot sized per batch: the
    shortest rows (16 per window) still fit, so no chunk falls back to pickling."""
    corpus = write_shards(tmp_path, [1200])
    phases = [{"start_step": 0, "seq_len": 1}, {"start_step": 3, "seq_len": 16}]
    cfg = corpus.config(16, global_batch_size=16, packing=options, seq_len_schedule=phases)
    stream = SampleStream.from_config(load_config(cfg))
    opts = LoaderOptions(worker_type="process", chunk_batches=3)  # steps 0-2: length 1
    chain = build_chain(stream, RankSpec(0, 1, 16), num_workers=1, options=opts)
    assert chain.workers is not None
    planned = stream.plan_chunk(stream.start(), 3, 16, 1, 0)
    assert planned is not None and planned[0].row_length == 1
    out = Materialize(stream, count_skipped=True)(planned[0])
    used = sum(-(-t.numel() * t.element_size() // 64) * 64 for t in out.values())
    assert used <= chain.workers.slot_bytes


def other_modes(root: Path) -> dict[str, dict[str, Any]]:
    """A weighted mixture with a weight schedule (num_samples: passes of 96 windows), and a
    packed config with masks, each with a warm-up of 2, 4, 8 over 4 steps of 4 windows."""
    paths = write_sources(root / "mix", SIZES)
    docs = write_shards(root / "docs", [300, 200])
    warmup = {"start_seq_len": 2, "steps": 4}
    return {
        "mixture": mixture(
            paths, WEIGHTS, SCHEDULE, big=4, sampling={"num_samples": 96}, seq_len_warmup=warmup
        ),
        "packed": docs.config(
            8,
            seed=1,
            pad_token_id=1,
            global_batch_size=4,
            sampling={"mode": "packed"},
            packing={"masks": True},
            seq_len_warmup=warmup,
        ),
    }


@pytest.mark.parametrize("case", ["mixture", "packed"])
def test_mixtures_and_packed_samples_are_cut_and_resume(tmp_path: Path, case: str) -> None:
    cfg = other_modes(tmp_path)[case]
    plain = {k: v for k, v in cfg.items() if k != "seq_len_warmup"}
    lengths = [2, 2, 4, 4, 8]  # OLMo-core's rule over 4 steps: doubles at steps 2 and 4
    plain_loaders, cut_loaders = loaders(plain, 2, 2), loaders(cfg, 2, 2)
    for pass_index in range(2):  # the warm-up is once per run: the second pass runs at 8
        want = collect_global_batches(plain_loaders)
        got = collect_global_batches(cut_loaders)
        assert len(got) == len(want) >= 5
        for k, (w, g) in enumerate(zip(want, got, strict=True)):
            assert_cut(w, g, lengths[k] if pass_index == 0 and k < len(lengths) else 8)
    assert_resumes_exactly(lambda: loaders(cfg, 2, 2, 2)[1], passes=2)


@pytest.mark.slow
def test_real_ranks_save_on_four_across_a_switch_and_resume_on_two(tmp_path: Path) -> None:
    """torch.distributed (gloo) ranks of ``tests/test_distributed.py``'s worker: 4 save after
    4 steps (lengths 2, 2, 2, 4), 2 finish the pass (4, 4, then 8)."""
    corpus = write_shards(tmp_path / "data", [300, 200, 260])
    phases = [{"start_step": 0, "seq_len": 2}, {"start_step": 3, "seq_len": 4}]
    cfg = corpus.config(8, seed=99, global_batch_size=GLOBAL_BATCH, packing={"masks": True})
    config = tmp_path / "data.json"
    config.write_text(
        json.dumps({**cfg, "seq_len_schedule": [*phases, {"start_step": 6, "seq_len": 8}]})
    )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        reference = collect_global_batches([build_loader(config, batch_size=GLOBAL_BATCH)])
    assert [b["input_ids"].shape[1] for b in reference[:7]] == [2, 2, 2, 4, 4, 4, 8]
    launch("save", 4, config, tmp_path)
    assert_batches_equal(reference[:SAVE_AFTER], gather_files(tmp_path, "save", 4), "4 ranks")
    launch("resume", 2, config, tmp_path)
    assert_batches_equal(reference[SAVE_AFTER:], gather_files(tmp_path, "resume", 2), "2 ranks")
