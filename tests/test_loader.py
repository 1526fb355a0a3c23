"""StreamLoader: exact resumption, world-size independence, coverage, masks, state checks."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from streamload import LoaderOptions, SampleStream, StateError, StreamLoader, build_loader
from streamload import load_config as load
from streamload.testing import (
    assert_batches_equal,
    assert_resumes_exactly,
    collect_global_batches,
)
from tests.helpers.corpus import Corpus, write_shards

pytestmark = pytest.mark.filterwarnings("ignore:each pass of")


@pytest.fixture(scope="module")
def docs(tmp_path_factory: pytest.TempPathFactory) -> Corpus:
    """EOS-separated documents, 1200 tokens in 3 shards."""
    return write_shards(tmp_path_factory.mktemp("docs"), [400, 300, 500])


@pytest.fixture(scope="module")
def positions(tmp_path_factory: pytest.TempPathFactory) -> Corpus:
    """Token = position; 769 tokens, so 96 cross-shard windows of 8 (12 global batches of 8)."""
    return write_shards(tmp_path_factory.mktemp("pos"), [250, 130, 389], kind="positions")


def make(cfg: dict[str, Any], b: int, rank: int = 0, world: int = 1, nw: int = 0, **opts: Any):
    """A loader with explicit rank/world and options."""
    options = LoaderOptions(**opts)
    return build_loader(
        cfg, batch_size=b, rank=rank, world_size=world, num_workers=nw, options=options
    )


def ranks(cfg: dict[str, Any], world: int, b: int, nw: int = 0, **opts: Any) -> list[StreamLoader]:
    """One loader per simulated rank, all in this process."""
    return [make(cfg, b, r, world, nw, **opts) for r in range(world)]


RESUME_CASES = {
    "inline-masks-cross-3passes": dict(nw=0, masks=True, cross=True, chunk=3, passes=3),
    "inline-noncross-default-chunks": dict(nw=0, masks=False, cross=False, chunk=None, passes=2),
    "inline-num-samples": dict(nw=0, masks=True, cross=True, chunk=4, passes=2, num_samples=200),
    "thread-prefetch0-masks": dict(nw=2, masks=True, cross=False, chunk=2, passes=2, prefetch=0),
    "thread-prefetch2-num-samples": dict(nw=2, masks=False, chunk=3, passes=2, num_samples=90),
}


@pytest.mark.parametrize("case", list(RESUME_CASES), ids=list(RESUME_CASES))
def test_resumes_exactly(docs: Corpus, case: str) -> None:
    c = RESUME_CASES[case]
    sampling = {"cross_shard": c.get("cross", True), "num_samples": c.get("num_samples")}
    cfg = docs.config(16, seed=7, sampling=sampling, packing={"masks": c["masks"]}, vocab_size=500)
    opts = dict(chunk_batches=c["chunk"], prefetch=c.get("prefetch", 2))
    points = None
    if c["nw"]:  # each worker pool takes ~0.1 s to stop: check every 4th step and pass ends
        per_pass = len(make(cfg, 4))
        ends = {p * per_pass + d for p in range(1, c["passes"] + 1) for d in (-1, 0, 1)}
        points = sorted(
            p
            for p in set(range(0, c["passes"] * per_pass, 4)) | ends
            if p <= c["passes"] * per_pass
        )
    assert_resumes_exactly(
        lambda: make(cfg, 4, nw=c["nw"], **opts), passes=c["passes"], save_points=points
    )


def test_resumes_exactly_with_process_workers(docs: Corpus) -> None:
    cfg = docs.config(16, packing={"masks": True})
    loader = make(cfg, 4)
    n = len(loader)
    opts = dict(worker_type="process", chunk_batches=2, prefetch=1)
    assert_resumes_exactly(
        lambda: make(cfg, 4, nw=2, **opts), save_points=[0, 3, n, n + 1], passes=2
    )


def test_resumes_with_other_workers_and_prefetch(docs: Corpus) -> None:
    cfg = docs.config(8, packing={"masks": True})
    assert_resumes_exactly(
        lambda: make(cfg, 4, chunk_batches=5),
        make_resumed=lambda: make(cfg, 4, nw=2, chunk_batches=2, prefetch=0),
        save_points=[0, 1, 7, 29, 30, 37, 40],
        passes=2,
    )


def global_stream(cfg: dict[str, Any], world: int, b: int, passes: int = 1, **kw: Any) -> list:
    """Global batches of ``passes`` passes of ``world`` simulated ranks."""
    loaders = ranks(cfg, world, b, **kw)
    return [g for _ in range(passes) for g in collect_global_batches(loaders)]


@pytest.mark.parametrize(("world", "b", "nw"), [(2, 4, 0), (4, 2, 0), (4, 2, 2), (8, 1, 0)])
def test_stream_is_identical_for_any_world_size(positions: Corpus, world: int, b: int, nw: int):
    cfg = positions.config(8, seed=3)
    reference = global_stream(cfg, 1, 8, passes=2)
    assert len(reference) == 2 * 12
    got = global_stream(cfg, world, b, passes=2, nw=nw, chunk_batches=2)
    assert_batches_equal(reference, got, f"world {world} x {b}")


@pytest.mark.parametrize(
    ("world", "b", "nw"), [(4, 2, 0), (2, 4, 0), (1, 8, 0), (2, 4, 2)], ids=str
)
def test_resume_after_world_size_change(positions: Corpus, world: int, b: int, nw: int) -> None:
    cfg = positions.config(8, seed=5)
    reference = global_stream(cfg, 1, 8)
    saved = ranks(cfg, 4, 2, chunk_batches=2)
    first = collect_global_batches(saved, steps=5)
    assert_batches_equal(reference[:5], first, "before saving")
    states = [loader.state_dict() for loader in saved]
    assert all(
        json.dumps(s, sort_keys=True) == json.dumps(states[0], sort_keys=True) for s in states
    )
    resumed = ranks(cfg, world, b, nw=nw, chunk_batches=3)
    for loader in resumed:
        loader.load_state_dict(states[0])
    assert_batches_equal(reference[5:], collect_global_batches(resumed), f"resumed {world}x{b}")


@pytest.mark.parametrize(("world", "b"), [(2, 3), (1, 5), (3, 1)])
def test_resume_with_another_global_batch_size(positions: Corpus, world: int, b: int) -> None:
    cfg = positions.config(8, seed=5)
    flat = torch.cat([g["input_ids"] for g in global_stream(cfg, 1, 1)])
    indices = torch.cat([g["sample_index"] for g in global_stream(cfg, 1, 1)])
    saved = ranks(cfg, 4, 2)
    collect_global_batches(saved, steps=3)
    state = saved[0].state_dict()
    assert state["cursor"]["samples"] == 24
    resumed = ranks(cfg, world, b)
    for loader in resumed:
        loader.load_state_dict(state)
    got = collect_global_batches(resumed)
    big = world * b
    assert len(got) == (96 - 24) // big
    for j, batch in enumerate(got):
        lo = 24 + j * big
        assert torch.equal(batch["sample_index"], indices[lo : lo + big])
        assert torch.equal(batch["input_ids"], flat[lo : lo + big])


@pytest.mark.parametrize("cross_shard", [True, False])
def test_every_window_once_per_epoch_over_all_ranks(positions: Corpus, cross_shard: bool):
    seq_len, big = 8, 8
    cfg = positions.config(seq_len, seed=11, sampling={"cross_shard": cross_shard})
    stream = SampleStream.from_config(load(cfg))
    starts = positions.window_starts(seq_len, cross_shard)
    assert stream.num_windows == len(starts)
    loaders = ranks(cfg, 4, 2, chunk_batches=2)
    orders = []
    for epoch in range(2):
        batches = collect_global_batches(loaders)
        assert len(batches) == len(starts) // big
        for k, batch in enumerate(batches):
            assert torch.equal(batch["sample_index"], torch.arange(k * big, (k + 1) * big))
            tokens, _ = stream.read(epoch, batch["sample_index"].numpy())
            assert torch.equal(
                batch["input_ids"], torch.from_numpy(tokens[:, :-1].astype(np.int64))
            )
        ids = torch.cat([b["input_ids"] for b in batches])
        first = ids[:, 0].tolist()
        assert len(set(first)) == len(first), f"a window repeats in epoch {epoch}"
        assert set(first) <= set(starts)
        assert torch.equal(ids, ids[:, :1] + torch.arange(seq_len)), "windows must be contiguous"
        orders.append(first)
    assert orders[0] != orders[1], "each epoch must have its own permutation"


def test_num_samples_spans_epochs_reshuffled(positions: Corpus) -> None:
    n = 96
    cfg = positions.config(8, seed=2, sampling={"num_samples": 2 * n + 40})
    loader = make(cfg, 8)
    first_pass = [b for b in loader]
    second_pass = [b for b in loader]
    assert len(loader) == len(first_pass) == (2 * n + 40) // 8
    assert_batches_equal(first_pass, second_pass, "with num_samples, every pass is the same")
    starts = torch.cat([b["input_ids"][:, 0] for b in first_pass]).tolist()
    epochs = [starts[:n], starts[n : 2 * n], starts[2 * n :]]
    assert sorted(epochs[0]) == sorted(epochs[1]) == list(range(0, 8 * n, 8))
    assert len(set(epochs[2])) == len(epochs[2])
    assert epochs[0] != epochs[1]


@pytest.mark.parametrize(
    ("policy", "limit"), [({"max_epochs": 2}, 2 * 96), ({"policy": "stop"}, 96)], ids=str
)
def test_single_source_policy_caps_num_samples(
    positions: Corpus, policy: dict[str, Any], limit: int
) -> None:
    """A single source's ``max_epochs``/``policy = "stop"`` holds when ``num_samples`` spans
    more epochs: the pass ends before the first batch needing more, with a warning."""
    cfg = positions.config(8, seed=2, sampling={"num_samples": 3 * 96 + 40})
    uncapped = [b for b in make(cfg, 8)]
    cfg["sources"][0].update(policy)
    capped = make(cfg, 8)
    assert len(capped) == limit // 8
    with pytest.warns(UserWarning, match=r"stream ended: source 'web' .*policy"):
        got = [b for b in capped]
    assert_batches_equal(uncapped[: limit // 8], got, "a prefix of the uncapped pass")
    assert "'web'" in capped.stats()["ended_by"]
    saved = make(cfg, 8)
    iterator = iter(saved)
    for _ in range(5):
        next(iterator)
    resumed = make(cfg, 8)
    resumed.load_state_dict(saved.state_dict())
    with pytest.warns(UserWarning, match="stream ended"):
        rest = [b for b in resumed]
    assert_batches_equal(got[5:], rest, "the resumed capped pass")


@pytest.mark.parametrize("masks", [False, True])
def test_labels_are_inputs_shifted_by_one(docs: Corpus, masks: bool) -> None:
    cfg = docs.config(16, packing={"masks": masks})
    stream = SampleStream.from_config(load(cfg))
    for batch in make(cfg, 4, chunk_batches=3):
        tokens, _ = stream.read(0, batch["sample_index"].numpy())
        tokens = torch.from_numpy(tokens.astype(np.int64))
        assert torch.equal(batch["input_ids"], tokens[:, :-1])
        keep = batch["labels"] != -100
        assert torch.equal(batch["labels"][keep], tokens[:, 1:][keep])
        assert bool(keep.all()) is not masks or not (tokens[:, :-1] == docs.eos_token_id).any()


def expected_masks(inputs: list[int], eos: int) -> dict[str, list[int]]:
    """Masks of one window written the slow way (a loop over positions)."""
    length = len(inputs)
    doc, pos, seg_start, cu = 0, 0, 0, [0]
    doc_ids, position_ids, lengths = [], [], []
    for t in range(length):
        if t > 0 and inputs[t - 1] == eos:
            doc, pos = doc + 1, 0
            cu.append(t)
            lengths.append(t - seg_start)
            seg_start = t
        doc_ids.append(doc)
        position_ids.append(pos)
        pos += 1
    lengths.append(length - seg_start)
    cu += [length] * (length + 1 - len(cu))
    return {"doc_ids": doc_ids, "position_ids": position_ids, "cu": cu, "max": [max(lengths)]}


def test_masks_follow_eos_positions(docs: Corpus) -> None:
    eos = docs.eos_token_id
    cfg = docs.config(16, packing={"masks": True})
    plain = [b for b in make(docs.config(16), 4)]
    masked = [b for b in make(cfg, 4, chunk_batches=3)]
    assert len(plain) == len(masked)
    seen_boundary = False
    for without, batch in zip(plain, masked, strict=True):
        assert torch.equal(without["input_ids"], batch["input_ids"])
        assert batch["cu_seqlens"].dtype == batch["max_seqlen"].dtype == torch.int32
        for row in range(batch["input_ids"].shape[0]):
            inputs = batch["input_ids"][row].tolist()
            want = expected_masks(inputs, eos)
            assert batch["doc_ids"][row].tolist() == want["doc_ids"]
            assert batch["position_ids"][row].tolist() == want["position_ids"]
            assert batch["cu_seqlens"][row].tolist() == want["cu"]
            assert batch["max_seqlen"][row].tolist() == want["max"][0]
            masked_at = [t for t, v in enumerate(batch["labels"][row].tolist()) if v == -100]
            assert masked_at == [t for t, v in enumerate(inputs) if v == eos]
            seen_boundary |= bool(masked_at)
    assert seen_boundary


def test_state_is_small_json_and_counts_samples(docs: Corpus) -> None:
    cfg = docs.config(8, seed=9)
    loader = make(cfg, 3, rank=1, world=2)
    for step, _ in enumerate(loader, start=1):
        if step == 5:
            break
    state = loader.state_dict()
    text = json.dumps(state)
    assert len(text) < 2048
    assert state["cursor"]["samples"] == 5 * 6 and state["epoch"] == 0
    resumed = make(cfg, 3, rank=1, world=2)
    resumed.load_state_dict(json.loads(text))
    assert resumed.state_dict()["cursor"]["samples"] == 30, "a loaded position is reported"
    assert torch.equal(next(iter(resumed))["sample_index"], torch.arange(33, 36))


def test_a_cursor_beyond_the_pass_is_refused(docs: Corpus) -> None:
    cfg = docs.config(8)
    state = make(cfg, 4).state_dict()
    state["cursor"] = {**state["cursor"], "samples": 10**6}
    with pytest.raises(StateError, match="cursor"):
        make(cfg, 4).load_state_dict(state)


@pytest.mark.parametrize(
    ("change", "field"),
    [({"seed": 1}, "seed"), ({"seq_len": 16}, "seq_len"), ({"data": True}, "data")],
    ids=["seed", "seq_len", "data"],
)
def test_fingerprint_mismatch_names_the_field(
    docs: Corpus, tmp_path: Path, change: dict[str, Any], field: str
) -> None:
    cfg = docs.config(8)
    loader = make(cfg, 4)
    for step, _ in enumerate(loader, start=1):
        if step == 3:
            break
    state = loader.state_dict()
    if "data" in change:
        other = write_shards(tmp_path / "other", [400, 300, 501])
        new_cfg = other.config(8)
    else:
        new_cfg = {**cfg, **change}
    resumed = make(new_cfg, 4)
    with pytest.raises(StateError, match=field):
        resumed.load_state_dict(state)
    resumed.load_state_dict(state, ignore_fingerprint_mismatch=True)
    assert torch.equal(next(iter(resumed))["sample_index"], torch.arange(12, 16))


@pytest.mark.parametrize("nw", [0, 2])
def test_break_and_iter_again_continues_at_next_batch(docs: Corpus, nw: int) -> None:
    cfg = docs.config(8, packing={"masks": True})
    uninterrupted = make(cfg, 4)
    reference = [b for _ in range(2) for b in uninterrupted]
    per_pass = len(reference) // 2
    loader = make(cfg, 4, nw=nw, chunk_batches=4)
    got: list[dict[str, torch.Tensor]] = []
    for stop in (3, 4, per_pass, per_pass + 5, None):  # per_pass: break on the pass's last batch
        for batch in loader:
            got.append({k: v.clone() for k, v in batch.items()})
            if len(got) == stop:
                break
    assert_batches_equal(reference, got)


@pytest.mark.parametrize(
    ("world", "b", "num_samples"), [(1, 4, None), (2, 3, None), (4, 2, 50), (3, 1, 7)]
)
def test_len_is_batches_per_pass(positions: Corpus, world: int, b: int, num_samples: Any):
    cfg = positions.config(8, sampling={"num_samples": num_samples})
    pass_length = num_samples or 96
    for loader in ranks(cfg, world, b):
        assert len(loader) == pass_length // (world * b)
        assert sum(1 for _ in loader) == len(loader)
        assert sum(1 for _ in loader) == len(loader)


@pytest.mark.parametrize("masks", [False, True])
def test_process_worker_batches_own_their_memory(docs: Corpus, masks: bool) -> None:
    """Chunks come back as views of reused shared slots; kept batches must not change later
    (a slot is reused only once nothing views it, so keeping every batch makes the later
    chunks come pickled)."""
    cfg = docs.config(8, seed=5, packing={"masks": masks})
    expected = list(make(cfg, 3))
    loader = make(cfg, 3, nw=2, worker_type="process", chunk_batches=2, prefetch=0)
    kept = list(loader)  # many chunks through 4 slots: all of them stay leased
    assert_batches_equal(expected, kept, "process workers")
    assert loader._workers is not None
    slots = [(t.data_ptr(), t.numel()) for t in loader._workers._slots]
    in_slot = [any(0 <= b["input_ids"].data_ptr() - p < n for p, n in slots) for b in kept]
    assert in_slot[:4] == [True] * 4 and not all(in_slot)


@pytest.mark.parametrize("worker_type", ["thread", "process"])
@pytest.mark.parametrize("how", ["iter", "close", "load"])
def test_a_superseded_iterator_ends_instead_of_hanging(docs: Corpus, worker_type: str, how: str):
    cfg = docs.config(8, seed=1)
    loader = make(cfg, 2, nw=1, worker_type=worker_type, chunk_batches=1, prefetch=0)
    old = iter(loader)
    next(old)
    if how == "iter":
        iter(loader)
    elif how == "close":
        loader.close()
    else:
        loader.load_state_dict(loader.state_dict())
    assert list(old) == []  # the old iterator stops; it never waits on stopped workers
    loader.close()


@pytest.mark.slow
def test_garbage_collecting_a_loader_in_a_cycle_does_not_hang(docs: Corpus) -> None:
    import gc

    class Trainer:
        def __init__(self) -> None:
            self.loader = make(docs.config(8), 2, nw=2, worker_type="process")
            self.me = self

    trainer = Trainer()
    next(iter(trainer.loader))
    del trainer
    gc.collect()  # must return: __del__ never waits for workers
