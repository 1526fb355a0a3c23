"""Mixtures through StreamLoader: shares, per-source order, schedules, resumption, policies.

Source ``i`` holds tokens ``i * SPREAD + position``, so ``input_ids[:, 0] // SPREAD`` names the
source of every sample and ``(input_ids[:, 0] % SPREAD) // SEQ_LEN`` its window. A source's
*own sequence* is what a one-source loader of the same name delivers epoch after epoch; every
mixture must draw from each source exactly along that sequence, whatever the weights do.

The helpers here are shared with ``test_mixture_properties.py``, ``test_mixture_distributed.py``
and ``test_dcp.py``.
"""

from __future__ import annotations

import copy
import functools
import itertools
import json
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from streamload import ConfigError, LoaderOptions, SampleStream, StateError, build_loader
from streamload import load_config as load
from streamload.testing import assert_batches_equal, assert_resumes_exactly

pytestmark = pytest.mark.filterwarnings("ignore:each pass of", "ignore:the stream ended")

SEQ_LEN = 8
SPREAD = 100_000
SIZES = {"a": [100, 61], "b": [105], "c": [57]}  # 20, 13 and 7 windows of 8 tokens
WEIGHTS = {"a": 0.5, "b": 0.3, "c": 0.2}
SCHEDULE = [
    {"start_step": 5, "weights": {"a": 0.2, "b": 0.2, "c": 0.6}},
    {"start_step": 9, "weights": {"a": 0.0, "b": 0.5, "c": 0.5}},
]
Batch = dict[str, torch.Tensor]


# -- helpers (shared) -------------------------------------------------------------------------
def write_sources(root: Path, sizes: Mapping[str, Sequence[int]]) -> dict[str, str]:
    """One folder of ``uint32`` NPY shards per source; source i's tokens start at i*SPREAD."""
    paths = {}
    for index, (name, shard_sizes) in enumerate(sizes.items()):
        folder = root / name
        folder.mkdir(parents=True)
        tokens = np.arange(sum(shard_sizes), dtype=np.uint32) + index * SPREAD
        bounds = np.cumsum([0, *shard_sizes])
        for k in range(len(shard_sizes)):
            np.save(folder / f"shard_{k:05d}.npy", tokens[bounds[k] : bounds[k + 1]])
        paths[name] = str(folder)
    return paths


def mixture(
    paths: Mapping[str, str],
    weights: Mapping[str, float],
    schedule: Sequence[Mapping[str, Any]] = (),
    big: int = 12,
    seed: int = 3,
    **extra: Any,
) -> dict[str, Any]:
    """A mixture config; ``extra["per_source"]`` adds keys (policy, max_epochs) by name."""
    per_source = extra.pop("per_source", {})
    sources = [
        {"name": n, "path": p, "weight": weights[n], **per_source.get(n, {})}
        for n, p in paths.items()
    ]
    cfg = {"seq_len": SEQ_LEN, "seed": seed, "global_batch_size": big, "sources": sources}
    return {**cfg, "schedule": copy.deepcopy(list(schedule)), **extra}


def decode(batch: Batch) -> tuple[np.ndarray, np.ndarray]:
    """(source index, window id) of every sample; checks each window is contiguous."""
    ids = batch["input_ids"]
    assert torch.equal(ids, ids[:, :1] + torch.arange(ids.shape[1])), "a window is not contiguous"
    first = ids[:, 0].numpy()
    return first // SPREAD, (first % SPREAD) // SEQ_LEN


def per_source(batches: Sequence[Batch], names: Sequence[str]) -> dict[str, list[int]]:
    """Windows drawn from each source, in stream order."""
    out: dict[str, list[int]] = {n: [] for n in names}
    for batch in batches:
        for s, w in zip(*decode(batch), strict=True):
            out[names[int(s)]].append(int(w))
    return out


def own_sequence(path: str, name: str, seed: int, count: int) -> tuple[list[int], int]:
    """The first ``count`` windows of a source's own sequence (one-source stream, epoch = pass),
    and the source's windows per epoch."""
    cfg = {"seq_len": SEQ_LEN, "seed": seed, "sources": [{"name": name, "path": path}]}
    stream = SampleStream.from_config(load(cfg))
    n, out = stream.num_windows, []
    for epoch in range(-(-count // n)):
        tokens, _ = stream.read(epoch, np.arange(n))
        out += ((tokens[:, 0].astype(np.int64) % SPREAD) // SEQ_LEN).tolist()
    return out[:count], n


class Ranks:
    """``world`` simulated ranks in this process, iterated in lockstep as one loader of global
    batches (rank batches concatenated); all ranks must save the same state."""

    def __init__(self, cfg: Mapping[str, Any], world: int, nw: int = 0, **opts: Any) -> None:
        b, options = cfg["global_batch_size"] // world, LoaderOptions(**opts)
        make = functools.partial(build_loader, cfg, batch_size=b, world_size=world)
        self.loaders = [make(rank=r, num_workers=nw, options=options) for r in range(world)]

    def __iter__(self) -> Iterator[Batch]:
        iterators = [iter(loader) for loader in self.loaders]
        while True:
            parts = [next(it, None) for it in iterators]
            done = [p for p in parts if p is not None]
            if not done:
                return
            assert len(done) == len(parts), "ranks ended at different steps"
            yield {k: torch.cat([p[k] for p in done]) for k in done[0]}

    def take(self, steps: int) -> list[Batch]:
        """The next ``steps`` global batches (fewer if the stream ends)."""
        out: list[Batch] = []
        for batch in self if steps > 0 else ():
            out.append({k: v.clone() for k, v in batch.items()})
            if len(out) == steps:
                break
        return out

    def state_dict(self) -> dict[str, Any]:
        states = [json.dumps(loader.state_dict(), sort_keys=True) for loader in self.loaders]
        assert len(set(states)) == 1, f"ranks hold different states: {states}"
        return self.loaders[0].state_dict()

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        for loader in self.loaders:
            loader.load_state_dict(state)


def counts_per_step(batches: Sequence[Batch], num_sources: int) -> np.ndarray:
    rows = [np.bincount(decode(b)[0], minlength=num_sources) for b in batches]
    return np.stack(rows) if rows else np.zeros((0, num_sources), dtype=np.int64)


# -- fixtures ---------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def paths(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    return write_sources(tmp_path_factory.mktemp("mix"), SIZES)


def windows_of(name: str) -> int:
    return (sum(SIZES[name]) - 1) // SEQ_LEN


def weights_at(step: int, schedule: Sequence[Mapping[str, Any]] = SCHEDULE) -> np.ndarray:
    current = WEIGHTS
    for phase in schedule:
        if phase["start_step"] <= step:
            current = phase["weights"]
    w = np.array([current[n] for n in SIZES], dtype=np.float64)
    return w / w.sum()


def assert_own_sequences(
    paths: Mapping[str, str], drawn: Mapping[str, list[int]], seed: int, distinct: bool = True
) -> None:
    """Each source's drawn windows are its own sequence; each epoch a permutation of its
    windows, and (``distinct``: for sources large enough not to repeat one by chance) a new one.
    """
    for name, windows in drawn.items():
        own, n = own_sequence(paths[name], name, seed, len(windows))
        assert windows == own, name
        epochs = [windows[k : k + n] for k in range(0, len(windows) - n + 1, n)]
        for epoch in epochs:
            assert sorted(epoch) == list(range(n)), f"{name}: an epoch is not a permutation"
        assert not distinct or all(x != y for x, y in itertools.pairwise(epochs)), name


# -- shares and per-source order --------------------------------------------------------------
def test_shares_per_global_batch_follow_the_schedule(paths: dict[str, str]) -> None:
    cfg = mixture(paths, WEIGHTS, SCHEDULE)
    batches = Ranks(cfg, 4).take(14)
    stream = SampleStream.from_config(load(cfg))
    for step, (batch, counts) in enumerate(zip(batches, counts_per_step(batches, 3), strict=True)):
        exact = weights_at(step) * 12
        assert (np.floor(exact) <= counts).all() and (counts <= np.ceil(exact)).all(), step
        assert torch.equal(batch["sample_index"], torch.arange(step * 12, (step + 1) * 12))
        tokens, _ = stream.read(0, batch["sample_index"].numpy())
        assert torch.equal(batch["input_ids"], torch.from_numpy(tokens[:, :-1].astype(np.int64)))
    assert counts_per_step(batches[9:], 3)[:, 0].sum() == 0, "weight 0: source a never draws"


def test_each_source_follows_its_own_permutation_epoch_after_epoch(paths: dict[str, str]) -> None:
    cfg = mixture(paths, WEIGHTS, SCHEDULE)
    drawn = per_source(Ranks(cfg, 4, chunk_batches=3).take(20), list(SIZES))
    assert len(drawn["c"]) >= 5 * windows_of("c"), "c must run through several epochs"
    assert len(drawn["b"]) >= 2 * windows_of("b")
    assert_own_sequences(paths, drawn, seed=3)


def test_a_weight_change_mid_epoch_neither_skips_nor_repeats(paths: dict[str, str]) -> None:
    schedule = [{"start_step": 2, "weights": {"a": 0.1, "b": 0.1, "c": 0.8}}]
    ranks = Ranks(mixture(paths, WEIGHTS, schedule, seed=5), 2)
    before = ranks.take(2)
    positions = ranks.state_dict()["sources"]
    assert all(positions[n]["samples"] % windows_of(n) for n in SIZES), "all sources mid-epoch"
    after = ranks.take(6)
    assert counts_per_step(after, 3)[0].tolist() == [1, 1, 10]
    assert_own_sequences(paths, per_source(before + after, list(SIZES)), seed=5)


# -- exact resumption -------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("nw", "extra"),
    [
        (0, {"sampling": {"num_samples": 12 * 14}}),
        (2, {"sampling": {"num_samples": 12 * 14 + 5}}),
        (0, {"per_source": {"b": {"max_epochs": 4}}}),
    ],
    ids=["inline-num-samples", "threads-num-samples", "inline-max-epochs"],
)
def test_resumes_exactly_across_phases_and_epochs(
    paths: dict[str, str], nw: int, extra: dict[str, Any]
) -> None:
    cfg = mixture(paths, WEIGHTS, SCHEDULE, **extra)
    points = [0, 1, 4, 5, 6, 9, 10, 13, 14, 15, 19, 23, 27, 28] if nw else None
    assert_resumes_exactly(
        lambda: Ranks(cfg, 1, nw=nw, chunk_batches=2),
        make_resumed=lambda: Ranks(cfg, 4, nw=nw, chunk_batches=3),
        passes=1 if "per_source" in extra else 2,
        save_points=points,
    )


@pytest.mark.parametrize(("world", "nw"), [(2, 0), (3, 0), (3, 2)])
def test_resume_on_another_world_size_gives_the_identical_stream(
    paths: dict[str, str], world: int, nw: int
) -> None:
    cfg = mixture(paths, WEIGHTS, SCHEDULE)
    reference = Ranks(cfg, 1).take(17)
    saved = Ranks(cfg, 4, chunk_batches=2)
    assert_batches_equal(reference[:7], saved.take(7), "4 ranks before saving")
    resumed = Ranks(cfg, world, nw=nw, chunk_batches=3)
    resumed.load_state_dict(json.loads(json.dumps(saved.state_dict())))
    assert_batches_equal(reference[7:], resumed.take(10), f"resumed on {world} ranks")


def test_resume_with_twice_the_global_batch_continues_every_source(paths: dict[str, str]) -> None:
    cfg = mixture(paths, WEIGHTS, SCHEDULE)
    saved = Ranks(cfg, 4)
    before = saved.take(7)
    resumed = Ranks({**cfg, "global_batch_size": 24}, 4)
    resumed.load_state_dict(saved.state_dict())
    after = resumed.take(6)
    assert [b["input_ids"].shape[0] for b in after] == [24] * 6
    start = torch.arange(84, 84 + 6 * 24)
    assert torch.equal(torch.cat([b["sample_index"] for b in after]), start)
    for step, counts in enumerate(counts_per_step(after, 3), start=7):
        exact = weights_at(step) * 24
        assert (np.floor(exact) <= counts).all() and (counts <= np.ceil(exact)).all(), step
    assert_own_sequences(paths, per_source(before + after, list(SIZES)), seed=3)


def test_shares_since_the_phase_start_stay_within_one_after_a_global_batch_change(
    paths: dict[str, str],
) -> None:
    """The deficit rule must count the phase's real samples, not steps x the new batch size."""
    schedule = [{"start_step": 5, "weights": {"a": 0.2, "b": 0.2, "c": 0.6}}]
    cfg = mixture(paths, WEIGHTS, schedule)
    saved = Ranks(cfg, 4)
    saved.take(7)
    state = saved.state_dict()
    resumed = Ranks({**cfg, "global_batch_size": 24}, 4)
    resumed.load_state_dict(state)
    names = list(SIZES)
    since = np.array([state["sources"][n]["samples"] - state["schedule"]["phase_drawn"][n]
                      for n in names])  # fmt: skip
    weights = weights_at(5, schedule)
    for step, counts in enumerate(counts_per_step(resumed.take(8), 3), start=7):
        since += counts
        error = since - weights * since.sum()
        assert np.abs(error).max() <= 1 + 1e-9, f"step {step}: drawn - w*samples = {error}"


@pytest.mark.parametrize(
    "change",
    [
        [{"start_step": 11, "weights": {"a": 1, "b": 0, "c": 1}}],
        [{"start_step": 7, "weights": {"a": 1, "b": 0, "c": 1}}],
        [{"start_step": 6, "weights": {"a": 1, "b": 0, "c": 1}}],
    ],
    ids=["new-phase-later", "new-phase-next-step", "new-phase-at-the-save-step"],
)
def test_adding_a_future_phase_after_saving_equals_that_schedule_from_the_start(
    paths: dict[str, str], change: list[dict[str, Any]]
) -> None:
    """Saved after 6 batches (steps 0..5); a phase starting at step >= 6 changes nothing
    delivered, so the resumed stream equals a run that had that schedule from the start."""
    schedule = sorted(SCHEDULE + change, key=lambda p: p["start_step"])
    saved = Ranks(mixture(paths, WEIGHTS, SCHEDULE), 4)
    saved.take(6)
    new_cfg = mixture(paths, WEIGHTS, schedule)
    resumed = Ranks(new_cfg, 3)
    resumed.load_state_dict(saved.state_dict())
    assert_batches_equal(Ranks(new_cfg, 1).take(16)[6:], resumed.take(10), "new schedule")


def test_changing_a_not_yet_started_phase_is_allowed(paths: dict[str, str]) -> None:
    saved = Ranks(mixture(paths, WEIGHTS, SCHEDULE), 2)
    saved.take(6)
    schedule = [SCHEDULE[0], {"start_step": 10, "weights": {"a": 1, "b": 1, "c": 0}}]
    new_cfg = mixture(paths, WEIGHTS, schedule)
    resumed = Ranks(new_cfg, 2)
    resumed.load_state_dict(saved.state_dict())
    assert_batches_equal(Ranks(new_cfg, 1).take(14)[6:], resumed.take(8), "changed future phase")


@pytest.mark.parametrize(
    ("weights", "schedule"),
    [
        (WEIGHTS, [{"start_step": 5, "weights": {"a": 0.3, "b": 0.1, "c": 0.6}}, SCHEDULE[1]]),
        (WEIGHTS, [{"start_step": 4, "weights": SCHEDULE[0]["weights"]}, SCHEDULE[1]]),
        (WEIGHTS, [{"start_step": 7, "weights": SCHEDULE[0]["weights"]}, SCHEDULE[1]]),
        (WEIGHTS, [SCHEDULE[1]]),
        ({"a": 0.4, "b": 0.4, "c": 0.2}, SCHEDULE),
    ],
    ids=["weights-of-started-phase", "earlier-start", "later-start", "removed", "base-weights"],
)
def test_changing_a_started_phase_is_refused(
    paths: dict[str, str], weights: dict[str, float], schedule: list[dict[str, Any]]
) -> None:
    saved = Ranks(mixture(paths, WEIGHTS, SCHEDULE), 1)
    saved.take(6)
    resumed = Ranks(mixture(paths, weights, schedule), 1)
    with pytest.raises(StateError, match="schedule"):
        resumed.load_state_dict(saved.state_dict())


# -- policies and stats -----------------------------------------------------------------------
@pytest.mark.parametrize(
    ("source", "policy", "limit"),
    [("c", {"policy": "stop"}, 7), ("c", {"max_epochs": 3}, 21), ("b", {"max_epochs": 2}, 26)],
    ids=["stop", "max-epochs-3", "max-epochs-2"],
)
def test_policies_end_the_stream_before_the_batch_that_would_exceed_them(
    paths: dict[str, str], source: str, policy: dict[str, Any], limit: int
) -> None:
    weights = {"a": 0.6, "b": 0.3, "c": 0.1}
    endless = Ranks(mixture(paths, weights), 1).take(40)
    drawn = np.cumsum(counts_per_step(endless, 3)[:, list(SIZES).index(source)])
    expected = int(np.argmax(drawn > limit))  # the first batch that needs one sample too many
    assert 0 < expected < 40
    ranks = Ranks(mixture(paths, weights, per_source={source: policy}), 4)
    with pytest.warns(UserWarning, match=f"stream ended: source '{source}'"):
        got = [b for b in ranks]
    assert_batches_equal(endless[:expected], got, "a prefix of the endless stream")
    for loader in ranks.loaders:
        stats = loader.stats()
        assert f"'{source}'" in stats["ended_by"]
        assert stats["sources"][source]["samples"] == drawn[expected - 1] <= limit
    assert list(ranks) == [], "a further iter() yields nothing"


def test_stats_count_what_was_delivered(paths: dict[str, str]) -> None:
    ranks = Ranks(mixture(paths, WEIGHTS, SCHEDULE), 4)
    batches = ranks.take(9)
    counts = counts_per_step(batches, 3).sum(axis=0)
    for loader in ranks.loaders:
        stats = loader.stats()
        assert stats["batches"] == 9 and stats["ended_by"] is None
        for index, name in enumerate(SIZES):
            n, samples = windows_of(name), int(counts[index])
            assert stats["sources"][name] == {
                "samples": samples,
                "tokens": samples * SEQ_LEN,
                "epochs": samples // n,
                "repetition": samples / n,
            }


def test_a_schedule_phase_at_step_zero_replaces_the_base_weights(paths: dict[str, str]) -> None:
    weights = {"a": 0.2, "b": 0.2, "c": 0.6}
    first = {"start_step": 0, "weights": weights}
    with_phase = Ranks(mixture(paths, WEIGHTS, [first, SCHEDULE[1]]), 1).take(12)
    as_base = Ranks(mixture(paths, weights, [SCHEDULE[1]]), 1).take(12)
    assert_batches_equal(as_base, with_phase)


def test_temperature_flattens_the_shares(paths: dict[str, str]) -> None:
    cfg = mixture(paths, {"a": 16, "b": 4, "c": 1}, mixture={"temperature": 2.0}, big=7)
    counts = counts_per_step(Ranks(cfg, 1).take(10), 3)
    assert counts.tolist() == [[4, 2, 1]] * 10, "weights 16:4:1 at T = 2 are 4:2:1"


def test_reading_no_samples_of_a_mixture_gives_an_empty_block(paths: dict[str, str]) -> None:
    stream = SampleStream.from_config(load(mixture(paths, WEIGHTS, SCHEDULE)))
    tokens, starts = stream.read(0, np.array([], dtype=np.int64))
    assert tokens.shape == (0, SEQ_LEN + 1) and starts.shape == (0,)


# -- validation -------------------------------------------------------------------------------
def _missing(cfg: dict[str, Any]) -> None:
    del cfg["sources"][1]["weight"]


INVALID = {
    "unknown-source-in-schedule": (
        lambda c: c["schedule"][0]["weights"].update(zz=1.0), "schedule.*unknown.*zz"),
    "phase-missing-a-source": (
        lambda c: c["schedule"][1]["weights"].pop("c"), "schedule.*no weight for c"),
    "negative-weight": (lambda c: c["sources"][0].update(weight=-1.0), "'a'.*weight"),
    "negative-phase-weight": (
        lambda c: c["schedule"][0]["weights"].update(b=-0.5), "schedule.*weight of 'b'"),
    "all-zero-weights": (
        lambda c: [s.update(weight=0.0) for s in c["sources"]], "weights are 0"),
    "all-zero-phase": (
        lambda c: c["schedule"][0].update(weights={"a": 0, "b": 0, "c": 0}), "schedule.*are 0"),
    "missing-weight": (_missing, "'?b'?.*no weight"),
    "no-global-batch-size": (lambda c: c.pop("global_batch_size"), "global_batch_size"),
    "steps-not-increasing": (
        lambda c: c["schedule"][1].update(start_step=5), "start_step"),
    "bad-policy": (lambda c: c["sources"][2].update(policy="loop"), "policy"),
    "zero-max-epochs": (lambda c: c["sources"][2].update(max_epochs=0), "max_epochs"),
    "zero-temperature": (lambda c: c.update(mixture={"temperature": 0}), "temperature"),
}  # fmt: skip


@pytest.mark.parametrize("case", list(INVALID), ids=list(INVALID))
def test_invalid_mixture_configs_fail_before_reading_data(case: str) -> None:
    """The paths do not exist: the error must come from the config check, not the listing."""
    cfg = mixture({n: f"/nonexistent/{n}" for n in SIZES}, WEIGHTS, SCHEDULE)
    mutate, pattern = INVALID[case]
    mutate(cfg)
    with pytest.raises(ConfigError, match=pattern):
        build_loader(cfg, batch_size=12)


def test_world_times_batch_must_equal_global_batch_before_reading_data() -> None:
    cfg = mixture({n: f"/nonexistent/{n}" for n in SIZES}, WEIGHTS, SCHEDULE)
    with pytest.raises(ConfigError, match="global_batch_size = 12"):
        build_loader(cfg, batch_size=5, rank=0, world_size=2)


def test_world_times_batch_must_equal_global_batch(paths: dict[str, str]) -> None:
    with pytest.raises(ConfigError, match=r"global_batch_size = 12.*2 x batch_size 5"):
        build_loader(mixture(paths, WEIGHTS), batch_size=5, rank=1, world_size=2)
