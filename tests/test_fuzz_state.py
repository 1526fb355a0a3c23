"""Fuzzing loaded states (issue 22, item 13): a randomly edited state either raises
``StateError`` at ``load_state_dict`` or resumes on exactly the samples the stream has at the
position the accepted state denotes — never another exception, never other data.

Real states (a single source with and without ``num_samples``, a mixture with a schedule;
mid-pass and at a pass end; from ``StreamLoader`` and from ``StreamDataset``) get 1–3 random
edits each: values replaced by ints (small, negative, at and over the int64 range), floats,
bools, strings, ``None``, lists, mappings and deeply nested garbage; integers nudged by a few;
keys deleted or added; the whole state replaced. Seeded and bounded: ``CASES`` edits per real
state, a few seconds in all.

The reference is the stream's random access (``SampleStream.read``), which shares no code
with states: batch ``k`` after resuming at ``(pass p, sample s)`` holds samples
``s + k·B … s + (k+1)·B − 1`` of pass ``p`` (then pass ``p + 1`` from 0).
"""

from __future__ import annotations

import copy
import random
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import pytest
import torch

from streamload import RankSpec, SampleStream, StateError, StreamDataset, build_loader
from streamload import load_config as load
from tests.helpers.corpus import write_shards
from tests.test_mixture_loader import SCHEDULE, SIZES, WEIGHTS, mixture, write_sources

pytestmark = pytest.mark.filterwarnings("ignore:each pass of", "ignore:the stream ended")

SEED = 22
CASES = 70
"""Random edits per real state."""
TAKE = 3
"""Batches compared after an accepted state."""

Path = tuple[Any, ...]


@pytest.fixture(scope="module")
def configs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[dict[str, Any], int]]:
    docs = write_shards(tmp_path_factory.mktemp("fuzz-docs"), [150, 110])
    paths = write_sources(tmp_path_factory.mktemp("fuzz-mix"), SIZES)
    return {  # name: (config, global batch)
        "single": (docs.config(8, seed=3), 4),
        "single-num-samples": (docs.config(8, seed=3, sampling={"num_samples": 45}), 4),
        "mixture": (mixture(paths, WEIGHTS, SCHEDULE, sampling={"num_samples": 120}), 12),
    }


# -- the real states -------------------------------------------------------------------------
def loader_states(cfg: dict[str, Any], b: int) -> list[dict[str, Any]]:
    """Mid-pass, after the last batch of the pass, and after that loop ended (pass 1)."""
    loader = build_loader(cfg, batch_size=b)
    states = []
    for step, _ in enumerate(loader, start=1):
        if step in (3, 7):
            states.append(copy.deepcopy(loader.state_dict()))
    states.append(copy.deepcopy(loader.state_dict()))
    next(iter(loader))
    states.append(copy.deepcopy(loader.state_dict()))
    return states


def dataset_states(stream: SampleStream, b: int) -> list[dict[str, Any]]:
    dataset = StreamDataset(stream, RankSpec(0, 1, b))
    states = []
    for step, _ in enumerate(dataset, start=1):
        if step == 2:
            states.append(copy.deepcopy(dataset.state_dict()))
    states.append(copy.deepcopy(dataset.state_dict()))
    return states


# -- random edits ----------------------------------------------------------------------------
def paths_of(state: Any, prefix: Path = ()) -> Iterator[Path]:
    yield prefix
    if len(prefix) > 8:  # not into deeply nested garbage
        return
    if isinstance(state, dict):
        for key, value in state.items():
            yield from paths_of(value, (*prefix, key))
    elif isinstance(state, list):
        for index, value in enumerate(state):
            yield from paths_of(value, (*prefix, index))


def get(state: Any, path: Path) -> Any:
    for key in path:
        state = state[key]
    return state


def garbage(rng: random.Random, old: Any) -> Any:
    number = old if isinstance(old, int) and not isinstance(old, bool) else 1
    nested: Any = 0
    for _ in range(rng.choice([3, 40, 3000])):
        nested = [nested]
    choices: list[Callable[[], Any]] = [
        lambda: number + rng.choice([-3, -2, -1, 1, 2, 3, 4, 12]),
        lambda: rng.randrange(0, 300),
        lambda: rng.choice([-1, -(2**63), 2**62 - 1, 2**62, 2**63 - 1, 2**63, 2**64 + 5]),
        lambda: rng.choice([float(number), 1.5, float("nan"), float("inf")]),
        lambda: rng.choice([True, False]),
        lambda: rng.choice([str(number), "", "web"]),
        lambda: None,
        lambda: rng.choice([[], [number], [[0, 12]], {}, {"samples": number}]),
        lambda: nested,
        lambda: np.int64(number),
        lambda: torch.tensor(number),
    ]
    return rng.choice(choices)()


def mutate(rng: random.Random, state: dict[str, Any]) -> Any:
    edited: Any = copy.deepcopy(state)
    for _ in range(rng.randint(1, 3)):
        paths = list(paths_of(edited))
        op = rng.random()
        if op < 0.03:
            return garbage(rng, None)
        path = rng.choice(paths[1:] or paths)
        parent = get(edited, path[:-1]) if path else None
        if op < 0.65 and path:
            parent[path[-1]] = garbage(rng, parent[path[-1]])
        elif op < 0.8 and path and isinstance(parent, dict):
            del parent[path[-1]]
        else:
            target = get(edited, path)
            if isinstance(target, dict):
                target[rng.choice(["junk", "step", "batch_sizes", "samples", "mixture"])] = garbage(
                    rng, None
                )
    return edited


# -- the check -------------------------------------------------------------------------------
def expected_positions(stream: SampleStream, start: tuple[int, int], b: int) -> list[Any]:
    """(pass, first sample) of the next TAKE batches from a position (a pass ends before the
    first batch it cannot fill; the next pass starts at 0)."""
    (p, s), out, length = start, [], stream.pass_length
    while len(out) < TAKE:
        if length is not None and s + b > length:
            if s == 0:
                break  # a pass without a whole batch
            p, s = p + 1, 0
            continue
        out.append((p, s))
        s += b
    return out


def check_batches(stream: SampleStream, got: list[Any], start: tuple[int, int], b: int) -> None:
    want = expected_positions(stream, start, b)
    assert len(got) == len(want), f"{len(got)} batches from {start}, expected {len(want)}"
    for (p, s), batch in zip(want, got, strict=True):
        tokens, _ = stream.read(p, np.arange(s, s + b))
        expected = torch.from_numpy(tokens[:, :-1].astype(np.int64))
        assert torch.equal(batch["input_ids"], expected), f"batch at pass {p}, sample {s}"
        assert torch.equal(batch["sample_index"], torch.arange(s, s + b)), (p, s)


def take(iterable: Any) -> list[Any]:
    """Up to TAKE batches over at most two ``for`` loops (a pass end in between)."""
    out: list[Any] = []
    for _ in range(2):
        for batch in iterable:
            out.append({k: v.clone() for k, v in batch.items()})
            if len(out) == TAKE:
                return out
    return out


@pytest.mark.parametrize("name", ["single", "single-num-samples", "mixture"])
def test_edited_states_are_refused_or_resume_exactly(
    configs: dict[str, tuple[dict[str, Any], int]],
    name: str,
    record_property: Callable[[str, object], None],
) -> None:
    cfg, b = configs[name]
    stream = SampleStream.from_config(load(cfg))
    rng = random.Random(f"{SEED}/{name}")
    outcomes = {"refused": 0, "accepted": 0}
    originals = [("loader", s) for s in loader_states(cfg, b)]
    originals += [("dataset", s) for s in dataset_states(stream, b)]
    for kind, original in originals:
        for _ in range(CASES):
            edited = mutate(rng, original)
            if kind == "loader":
                loader = build_loader(cfg, batch_size=b)
                try:
                    loader.load_state_dict(edited)
                except StateError:
                    outcomes["refused"] += 1
                    continue
                state = loader.state_dict()
                start = (state["epoch"], state["cursor"]["samples"])
                check_batches(stream, take(loader), start, b)
            else:
                dataset = StreamDataset(stream, RankSpec(0, 1, b))
                try:
                    dataset.load_state_dict(edited)
                except StateError:
                    outcomes["refused"] += 1
                    continue
                state = dataset.state_dict()  # the same envelope as the loader's
                start = (state["epoch"], state["cursor"]["samples"])
                check_batches(stream, take(dataset), start, b)
            outcomes["accepted"] += 1
    total = len(originals) * CASES
    record_property("outcomes", outcomes)
    assert outcomes["refused"] + outcomes["accepted"] == total
    assert outcomes["refused"] > total // 2 and outcomes["accepted"] > 0, outcomes
