"""The loader state envelope (``state.py``): every malformed or edited state is refused by
``load_state_dict`` with a ``StateError`` naming the field, its value and what was expected
— never another exception, never a silently different stream.

Mixture states (issue 22, item 4): the per-source counts and the schedule position are
derivable from the global cursor (``cursor.step`` and the global batch sizes used), so an
edit of any of them is refused like an edit of a single source's cursor.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch
from torchdata.nodes import Loader

from streamload import (
    RankSpec,
    SampleStream,
    StateError,
    StreamDataset,
    StreamLoader,
    build_loader,
    load_config,
)
from streamload.nodes import ListShards, PackMasks, PlanChunks, ReadWindows, SplitBatches
from streamload.testing import assert_batches_equal
from tests.helpers.corpus import write_shards
from tests.test_mixture_loader import SCHEDULE, SIZES, WEIGHTS, mixture, write_sources

pytestmark = pytest.mark.filterwarnings("ignore:each pass of", "ignore:the stream ended")

Change = Callable[[dict[str, Any]], Any]


@pytest.fixture(scope="module")
def single(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    return write_shards(tmp_path_factory.mktemp("state-docs"), [300, 200]).config(8, seed=5)


@pytest.fixture(scope="module")
def mix(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    return mixture(write_sources(tmp_path_factory.mktemp("state-mix"), SIZES), WEIGHTS, SCHEDULE)


def loader_of(cfg: dict[str, Any], b: int) -> StreamLoader:
    return build_loader(cfg, batch_size=b)


def saved_after(cfg: dict[str, Any], b: int, steps: int) -> dict[str, Any]:
    loader = loader_of(cfg, b)
    for step, _ in enumerate(loader, start=1):
        if step == steps:
            break
    return loader.state_dict()


def load(cfg: dict[str, Any]) -> Any:
    return load_config(cfg)


def locate(state: Any, path: str) -> tuple[Any, Any]:
    """The container holding ``path``'s last part, and that part (``drawn.0``: an index)."""
    *parents, last = (int(p) if p.isdigit() else p for p in path.split("."))
    target = state
    for key in parents:
        target = target[key]
    return target, last


def setter(path: str, value: Any) -> Change:
    def change(state: dict[str, Any]) -> None:
        target, last = locate(state, path)
        target[last] = value

    return change


def adder(path: str, delta: Any) -> Change:
    def change(state: dict[str, Any]) -> None:
        target, last = locate(state, path)
        target[last] += delta

    return change


def deleter(path: str) -> Change:
    def change(state: dict[str, Any]) -> None:
        target, last = locate(state, path)
        del target[last]

    return change


def deep(levels: int) -> Any:
    value: Any = 1
    for _ in range(levels):
        value = [value]
    return value


class Replace:
    """A change that replaces the whole state (the other changes edit it in place)."""

    def __init__(self, value: Any) -> None:
        self.value = value

    def __call__(self, state: dict[str, Any]) -> Replace:
        return self


def replaced(value: Any) -> Change:
    return Replace(value)


# (case id, change, regex the StateError message must match)
MALFORMED: list[tuple[str, Change, str]] = [
    ("not-a-dict", replaced([1, 2, 3]), r"not a streamload loader state.*\[1, 2, 3\]"),
    ("none", replaced(None), r"not a streamload loader state.*None"),
    ("no-version", deleter("version"), r"version"),
    ("version-0", setter("version", 0), r"version 0 is not a positive integer"),
    ("version-newer", setter("version", 99), r"version 99 is newer"),
    ("version-str", setter("version", "1"), r"version '1' is not a positive integer"),
    ("version-bool", setter("version", True), r"version True is not a positive integer"),
    ("fingerprint-list", setter("fingerprint", [1, 2]), r"fingerprint = \[1, 2\].*mapping"),
    ("fingerprint-str", setter("fingerprint", "x"), r"fingerprint = 'x'.*mapping"),
    ("fingerprint-data-list", setter("fingerprint.data", [1]), r"fingerprint.*data"),
    ("fingerprint-deep", setter("fingerprint.seed", deep(5000)), r"fingerprint\.seed.*nested"),
    ("fingerprint-object", setter("fingerprint.seed", torch.ones(3)), r"fingerprint\.seed.*Tensor"),
    ("fingerprint-seed-float", adder("fingerprint.seed", 0.0), r"seed: saved 5\.0, now 5"),
    ("fingerprint-seed-bool", setter("fingerprint.seed", True), r"seed: saved True, now 5"),
    ("missing-cursor", deleter("cursor"), r"missing.*'cursor'"),
    ("missing-sources", deleter("sources"), r"missing.*'sources'"),
    ("missing-global-batch", deleter("global_batch_size"), r"missing.*'global_batch_size'"),
    ("extra-key", setter("junk", 1), r"unknown key.*'junk'"),
    ("extra-cursor-key", setter("cursor.junk", 1), r"cursor.*unknown key.*'junk'"),
    ("missing-tokens", deleter("cursor.tokens"), r"cursor.*missing.*'tokens'"),
    ("cursor-list", setter("cursor", [12]), r"cursor = \[12\].*mapping"),
    ("samples-float", adder("cursor.samples", 0.0), r"cursor\.samples = 12\.0 must be an integer"),
    ("samples-bool", setter("cursor.samples", True), r"cursor\.samples = True must be an integer"),
    ("samples-str", setter("cursor.samples", "12"), r"cursor\.samples = '12' must be an integer"),
    ("samples-negative", setter("cursor.samples", -4), r"cursor\.samples = -4.*>= 0"),
    (
        "samples-over-int64",
        setter("cursor.samples", 2**64),
        r"cursor\.samples = 18446744073709551616",
    ),
    ("samples-nested", setter("cursor.samples", {"a": deep(10)}), r"cursor\.samples = \{'a'"),
    ("tokens-edited", adder("cursor.tokens", 1), r"cursor\.tokens = 97.*96"),
    ("batches-negative", setter("cursor.batches", -1), r"cursor\.batches = -1.*>= 0"),
    ("batches-str", setter("cursor.batches", "3"), r"cursor\.batches = '3' must be an integer"),
    ("batches-over-samples", setter("cursor.batches", 13), r"cursor\.batches = 13.*12"),
    ("epoch-over-int64", setter("epoch", 2**70), r"epoch = 1180591620717411303424"),
    ("epoch-float", setter("epoch", 0.0), r"epoch = 0\.0 must be an integer"),
    ("epoch-bool", setter("epoch", False), r"epoch = False must be an integer"),
    ("epoch-negative", setter("epoch", -1), r"epoch = -1.*>= 0"),
    ("sources-list", setter("sources", ["web"]), r"sources = \['web'\].*mapping"),
    ("sources-other-name", setter("sources", {"x": {"epoch": 0, "samples": 12}}), r"sources"),
    ("source-float", adder("sources.web.samples", 0.0), r"sources\.web\.samples = 12\.0"),
    ("source-edited", adder("sources.web.samples", 1), r"sources.*disagree"),
    ("source-extra-key", setter("sources.web.junk", 0), r"sources\.web.*unknown key"),
    ("global-batch-str", setter("global_batch_size", "4"), r"global_batch_size = '4'"),
    ("global-batch-zero", setter("global_batch_size", 0), r"global_batch_size = 0.*>= 1"),
]


@pytest.mark.parametrize(("case", "change", "match"), MALFORMED, ids=[c[0] for c in MALFORMED])
def test_malformed_single_source_states_are_refused(
    single: dict[str, Any], case: str, change: Change, match: str
) -> None:
    state = copy.deepcopy(saved_after(single, 4, 3))
    result = change(state)
    edited = result.value if isinstance(result, Replace) else state
    loader = loader_of(single, 4)
    with pytest.raises(StateError, match=match):
        loader.load_state_dict(edited)
    assert len(list(loader)) == len(loader), "a refused state leaves the loader unchanged"


MIXTURE_EDITS: list[tuple[str, Change, str]] = [
    # item 4: per-source counts and the schedule position follow from cursor.step
    (
        "sample-moved-between-sources",
        lambda s: (adder("sources.a.samples", 1)(s), adder("sources.b.samples", -1)(s)),
        r"sources\.a\.samples = 36.*cursor\.step = 7.*give 35",
    ),
    ("source-plus-one", adder("sources.c.samples", 1), r"sources\.c\.samples = 2[0-9].*give"),
    ("step-plus-one", adder("cursor.step", 1), r"cursor\.step = 8.*"),
    ("step-minus-one", adder("cursor.step", -1), r"cursor\.step = 6.*"),
    ("phase-step", setter("schedule.phase_step", 0), r"schedule\.phase_step = 0.*5"),
    ("phase-drawn", adder("schedule.phase_drawn.b", 1), r"schedule\.phase_drawn\.b = .*give"),
    ("history-edited", setter("schedule.batch_sizes", [[0, 6]]), r"batch_sizes"),
    ("history-garbage", setter("schedule.batch_sizes", "x"), r"schedule\.batch_sizes = 'x'"),
    ("history-unsorted", setter("schedule.batch_sizes", [[3, 12], [0, 12]]), r"batch_sizes"),
    ("schedule-missing", deleter("schedule"), r"missing.*'schedule'"),
    ("step-missing", deleter("cursor.step"), r"cursor.*missing.*'step'"),
    ("step-huge", setter("cursor.step", 2**63), r"cursor\.step = 9223372036854775808"),
    ("phase-drawn-list", setter("schedule.phase_drawn", [1, 2, 3]), r"phase_drawn.*mapping"),
]


@pytest.mark.parametrize(
    ("case", "change", "match"), MIXTURE_EDITS, ids=[c[0] for c in MIXTURE_EDITS]
)
def test_edited_mixture_states_are_refused(
    mix: dict[str, Any], case: str, change: Change, match: str
) -> None:
    state = copy.deepcopy(saved_after(mix, 12, 7))
    change(state)
    loader = loader_of(mix, 12)
    with pytest.raises(StateError, match=match):
        loader.load_state_dict(state)


def test_an_endless_mixture_refuses_a_cursor_beyond_int64(mix: dict[str, Any]) -> None:
    state = saved_after(mix, 12, 2)
    state["cursor"]["samples"] = 2**63
    with pytest.raises(StateError, match=r"cursor\.samples = 9223372036854775808"):
        loader_of(mix, 12).load_state_dict(state)


LONG_MIXTURE_EDITS: list[tuple[str, Change, str]] = [
    ("source-plus-one", adder("sources.c.samples", 1), r"sources.*sum to 25.*allocate 24"),
    (
        "samples-moved-beyond-the-ceilings",
        lambda s: (adder("sources.a.samples", 5)(s), adder("sources.b.samples", -5)(s)),
        r"sources\.a\.samples = 4[0-9] gives 1[0-9] samples drawn since.*between 4 and 6",
    ),
    ("phase-step", setter("schedule.phase_step", 0), r"schedule\.phase_step = 0.*give 5"),
    ("phase-drawn", adder("schedule.phase_drawn.b", 1), r"phase_drawn.*sum to 61.*allocate 60"),
    ("step-plus-one", adder("cursor.step", 1), r"cursor\.step = 8.*"),
]


@pytest.mark.parametrize(
    ("case", "change", "match"), LONG_MIXTURE_EDITS, ids=[c[0] for c in LONG_MIXTURE_EDITS]
)
def test_a_long_mixture_position_is_checked_against_its_bounds(
    mix: dict[str, Any], monkeypatch: pytest.MonkeyPatch, case: str, change: Change, match: str
) -> None:
    """Beyond the replay bound (issue 31 item 5: O(sources) at any step) a state loads
    without the override onto exactly the uninterrupted batches; edits that leave the bounds
    every position of its step satisfies are refused."""
    import streamload.streams.cursor as cursor_module

    state = saved_after(mix, 12, 7)
    monkeypatch.setattr(cursor_module, "MAX_REPLAYED", 0)
    loader = loader_of(mix, 12)
    loader.load_state_dict(copy.deepcopy(state))
    expected = [b for _, b in zip(range(10), loader_of(mix, 12), strict=False)][7:]
    assert_batches_equal(expected, [b for _, b in zip(range(3), loader, strict=False)])
    change(state)
    with pytest.raises(StateError, match=match):
        loader_of(mix, 12).load_state_dict(state)


def test_a_mixture_state_resumed_with_another_batch_size_is_checked_again(
    mix: dict[str, Any],
) -> None:
    """The global batch sizes used so far travel in the state, so a state saved after a
    change of global batch size is still checked exactly (and resumes exactly)."""
    first = saved_after(mix, 12, 4)
    changed = loader_of({**mix, "global_batch_size": 6}, 6)
    changed.load_state_dict(first)
    for step, _ in enumerate(changed, start=1):
        if step == 3:
            break
    state = changed.state_dict()
    assert state["schedule"]["batch_sizes"] == [[0, 12], [4, 6]]
    expected = [
        {k: v.clone() for k, v in batch.items()}
        for _, batch in zip(range(4), changed, strict=False)
    ]
    again = loader_of({**mix, "global_batch_size": 6}, 6)
    again.load_state_dict(copy.deepcopy(state))
    assert again.state_dict() == state
    assert_batches_equal(expected, [b for _, b in zip(range(4), again, strict=False)])
    edited = copy.deepcopy(state)
    edited["schedule"]["batch_sizes"] = [[0, 12], [5, 6]]
    with pytest.raises(StateError, match="batch_sizes"):
        loader_of({**mix, "global_batch_size": 6}, 6).load_state_dict(edited)


def test_a_state_saved_before_batch_sizes_were_recorded_still_loads(mix: dict[str, Any]) -> None:
    state = saved_after(mix, 12, 7)
    del state["schedule"]["batch_sizes"]
    loader = loader_of(mix, 12)
    loader.load_state_dict(state)
    reference = loader_of(mix, 12)
    expected = [b for _, b in zip(range(10), reference, strict=False)][7:]
    assert_batches_equal(expected, [b for _, b in zip(range(3), loader, strict=False)])


def test_ignoring_the_fingerprint_still_refuses_malformed_fields(
    single: dict[str, Any], tmp_path: Path
) -> None:
    state = saved_after(single, 4, 3)
    state["cursor"]["samples"] = "12"
    with pytest.raises(StateError, match=r"cursor\.samples = '12'"):
        loader_of(single, 4).load_state_dict(state, ignore_fingerprint_mismatch=True)


# -- the other entry points: StreamDataset and the node chain -------------------------------
def dataset_state(cfg: dict[str, Any], b: int, steps: int) -> dict[str, Any]:
    dataset = StreamDataset(SampleStream.from_config(load(cfg)), RankSpec(0, 1, b))
    for step, _ in enumerate(dataset, start=1):
        if step == steps:
            break
    return copy.deepcopy(dataset.state_dict())


DATASET_EDITS: list[tuple[str, str, Change, str]] = [
    ("single", "not-a-dict", replaced("x"), r"not a streamload loader state.*: 'x'"),
    ("single", "missing-batches", deleter("cursor.batches"), r"cursor: missing 'batches'"),
    ("single", "extra-key", setter("junk", 0), r"unknown key.*'junk'"),
    ("single", "epoch-str", setter("epoch", "0"), r"epoch = '0' must be an integer"),
    ("single", "samples-float", setter("cursor.samples", 12.0), r"cursor\.samples = 12\.0"),
    (
        "single",
        "samples-beyond",
        setter("cursor.samples", 10**9),
        r"cursor\.samples = 1000000000",
    ),
    ("single", "batches-bool", setter("cursor.batches", True), r"batches = True must be an int"),
    (
        "single",
        "batches-edited",
        adder("cursor.batches", 1),
        r"cursor\.samples = 12 disagrees with cursor\.batches = 4",
    ),
    ("single", "fingerprint-list", setter("fingerprint", []), r"fingerprint = \[\].*mapping"),
    ("single", "schedule-added", setter("schedule", {}), r"'schedule'.*not a mixture"),
    ("mixture", "sources-edited", adder("sources.a.samples", 1), r"sources\.a\.samples = .*give"),
    ("mixture", "step-edited", adder("cursor.step", 1), r"cursor\.step = 4"),
    ("mixture", "no-schedule", deleter("schedule"), r"missing 'schedule'"),
]


def edit_path(state: dict[str, Any], change: Change) -> Any:
    """Apply a change; list indices in paths (``drawn.0``) are handled by the setters."""
    result = change(state)
    return result.value if isinstance(result, Replace) else state


@pytest.mark.parametrize(
    ("kind", "case", "change", "match"), DATASET_EDITS, ids=[c[1] for c in DATASET_EDITS]
)
def test_malformed_stream_dataset_states_are_refused(
    single: dict[str, Any], mix: dict[str, Any], kind: str, case: str, change: Change, match: str
) -> None:
    cfg, b = (single, 4) if kind == "single" else (mix, 12)
    edited = edit_path(dataset_state(cfg, b, 3), change)
    dataset = StreamDataset(SampleStream.from_config(load(cfg)), RankSpec(0, 1, b))
    with pytest.raises(StateError, match=match):
        dataset.load_state_dict(edited)


def chain(cfg: dict[str, Any], b: int) -> Loader[Any]:
    stream = SampleStream.from_config(load(cfg))
    plan = PlanChunks(stream, RankSpec(0, 1, b), chunk_batches=4)
    return Loader(SplitBatches(PackMasks(ReadWindows(plan, stream), False, 0)))


CHAIN_EDITS: list[tuple[str, Change, str]] = [
    ("offset-str", setter("root.offset", "1"), r"SplitBatches\.offset = '1'"),
    ("offset-beyond", setter("root.offset", 10**6), r"SplitBatches\.offset = 1000000 skips past"),
    ("no-source", deleter("root.source"), r"SplitBatches: missing 'source'"),
    (
        "samples-beyond",
        setter("root.source.cursor.samples", 10**6),
        r"cursor\.samples = 1000000 lies",
    ),
    ("epoch-float", setter("root.source.epoch", 0.0), r"epoch = 0\.0 must be an integer"),
]


@pytest.mark.parametrize(("case", "change", "match"), CHAIN_EDITS, ids=[c[0] for c in CHAIN_EDITS])
def test_malformed_node_chain_states_are_refused(
    single: dict[str, Any], case: str, change: Change, match: str
) -> None:
    loader = chain(single, 4)
    for step, _ in enumerate(loader, start=1):
        if step == 2:
            break
    edited = edit_path(copy.deepcopy(loader.state_dict()), change)
    fresh = chain(single, 4)
    fresh.load_state_dict(edited)
    with pytest.raises(StateError, match=match):
        next(iter(fresh))


def test_list_shards_refuses_an_index_beyond_its_shards(single: dict[str, Any]) -> None:
    node = ListShards(load(single).sources[0])
    node.reset({"index": 2})
    with pytest.raises(StateError, match=r"ListShards\.index = 3 lies beyond the 2 shards"):
        node.reset({"index": 3})
    with pytest.raises(StateError, match=r"ListShards\.index = '1' must be an integer"):
        node.reset({"index": "1"})


def legacy_dataset_state(envelope: dict[str, Any]) -> dict[str, Any]:
    """The shape a StreamDataset saved before the shared envelope (one source, no step)."""
    cursor = {"pass": envelope["epoch"], "sample": envelope["cursor"]["samples"], "mixture": None}
    batch = envelope["cursor"]["batches"] or None
    return {"cursor": cursor, "batch": batch, "fingerprint": envelope["fingerprint"]}


def test_states_of_the_shapes_before_the_envelope_load_strictly(single: dict[str, Any]) -> None:
    """StreamDataset's {cursor, batch, fingerprint} and PlanChunks' {pass, sample, mixture}
    (tests/golden/states/v1 holds real ones of every entry point) load into the envelope's
    position and keep their strict checks."""
    stream = SampleStream.from_config(load(single))
    saved = dataset_state(single, 4, 3)
    legacy = legacy_dataset_state(saved)
    dataset = StreamDataset(stream, RankSpec(0, 1, 4))
    dataset.load_state_dict(legacy)
    assert dataset.state_dict() == saved  # read into the same position, saved as the envelope
    legacy["batch"] += 1
    with pytest.raises(StateError, match=r"cursor\.samples = 12 disagrees"):
        StreamDataset(stream, RankSpec(0, 1, 4)).load_state_dict(legacy)
    legacy["batch"], legacy["fingerprint"]["seed"] = 3, 99
    with pytest.raises(StateError, match=r"fingerprint differs.*seed: saved 99"):
        StreamDataset(stream, RankSpec(0, 1, 4)).load_state_dict(legacy)
    plan = PlanChunks(stream, RankSpec(0, 1, 4), chunk_batches=2)
    plan.reset({"pass": 0, "sample": 8, "mixture": None})
    assert plan.get_state()["cursor"] == {"samples": 8, "tokens": 64, "batches": 2}
    with pytest.raises(StateError, match=r"cursor\.sample = '8' must be an integer"):
        plan.reset({"pass": 0, "sample": "8", "mixture": None})
