"""The checkpoint contracts of peers, held over every entry point (issue 22, item 16).

grain's ``assert_equal_output_after_checkpoint`` and torchdata's ``run_test_save_load_state``
are restated here in our own code (neither is imported):

* grain: a state taken before each element; restoring it into a fresh iterator gives back
  exactly that state (``get_state() == s``) and exactly the remaining elements; the state
  has one structure at every step.
* torchdata: restore mid-pass, then the rest of the pass and the whole next pass; restore
  the initial state into the used loader; restore the state after the pass ended, which is
  an empty pass with ``restart_on_stop_iteration=False`` and the next pass otherwise.

Entry points: ``build_loader``'s StreamLoader, StreamDataset on its own and under
``StatefulDataLoader`` (0 and 2 workers), the node chain in ``torchdata.nodes.Loader``, and
DCP (``tests/test_dcp.py``). The rule they all follow: **a state is normalized once, when it
is loaded, and echoed exactly**; the stream it continues is the one the uninterrupted run
has from the same position.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from torchdata.nodes import BaseNode, Loader
from torchdata.stateful_dataloader import StatefulDataLoader

from streamload import LoaderOptions, RankSpec, SampleStream, StreamDataset, build_loader
from streamload import load_config as load
from streamload.nodes import (
    MapWorkers,
    PackMasks,
    PlanChunks,
    ReadWindows,
    SplitBatches,
    WindowReader,
)
from streamload.testing import assert_batches_equal, assert_resumes_exactly
from tests.helpers.corpus import write_shards
from tests.test_mixture_loader import SCHEDULE, SIZES, WEIGHTS, mixture, write_sources

pytestmark = [
    pytest.mark.filterwarnings("ignore:each pass of"),
    pytest.mark.filterwarnings("ignore:the stream ended"),
    pytest.mark.filterwarnings("ignore:.set_vital. is deprecated"),
]


@pytest.fixture(scope="module")
def configs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[str, Any]]:
    docs = write_shards(tmp_path_factory.mktemp("contract-docs"), [150, 110])
    paths = write_sources(tmp_path_factory.mktemp("contract-mix"), SIZES)
    return {
        "single": docs.config(8, seed=2, packing={"masks": True}),
        "single-num-samples": docs.config(8, seed=2, sampling={"num_samples": 45}),
        "mixture": mixture(paths, WEIGHTS, SCHEDULE, sampling={"num_samples": 120}),
        "packed": docs.config(
            8, seed=2, pad_token_id=1, sampling={"mode": "packed"}, packing={"masks": True}
        ),
        "padded": docs.config(8, seed=2, pad_token_id=1, sampling={"mode": "padded"}),
        "vsl": docs.config(  # global_batch_size: the 2 slots of 8 tokens of 16 per batch
            8,
            seed=2,
            global_batch_size=2,
            sampling={"mode": "vsl", "min_seq_len": 2, "tokens_per_batch": 16},
        ),
    }


def batch_size(cfg: dict[str, Any]) -> int:
    return int(cfg.get("global_batch_size") or 4)


# -- grain's contract, restated ----------------------------------------------------------------
class GrainIterator:
    """A grain-style iterator (``get_state``/``set_state``, one pass) over a stateful loader."""

    def __init__(self, loader: Any) -> None:
        self.loader = loader
        self._it: Iterator[Any] | None = None

    def __iter__(self) -> GrainIterator:
        return self

    def __next__(self) -> Any:
        if self._it is None:
            self._it = iter(self.loader)
        return next(self._it)

    def get_state(self) -> Any:
        return copy.deepcopy(self.loader.state_dict())

    def set_state(self, state: Any) -> None:
        self.loader.load_state_dict(copy.deepcopy(state))


def grain_contract(make: Callable[[], Any]) -> int:
    """grain's algorithm: states before every element, each restored into a fresh iterator."""
    iterator = GrainIterator(make())
    states, values = [], []
    while True:
        state = iterator.get_state()
        try:
            value = next(iterator)
        except StopIteration:
            break
        states.append(state)
        values.append(value)
    assert values, "the pass produced nothing"
    for step, state in enumerate(states):
        fresh = GrainIterator(make())
        fresh.set_state(state)
        assert fresh.get_state() == state, f"step {step}: get_state() after set_state(s) is not s"
        assert_batches_equal(values[step:], list(fresh), f"step {step}")
    return len(states)


@pytest.mark.parametrize(
    "case", ["single", "single-num-samples", "mixture", "packed", "padded", "vsl"]
)
@pytest.mark.parametrize("workers", [0, 2])
def test_grain_contract_on_stream_loader(
    configs: dict[str, dict[str, Any]], case: str, workers: int
) -> None:
    cfg = configs[case]
    options = LoaderOptions(chunk_batches=3)
    steps = grain_contract(
        lambda: build_loader(cfg, batch_size=batch_size(cfg), num_workers=workers, options=options)
    )
    assert steps >= 7


@pytest.mark.parametrize("case", ["single", "mixture", "packed", "vsl"])
def test_grain_contract_on_stream_dataset(configs: dict[str, dict[str, Any]], case: str) -> None:
    cfg = configs[case]
    stream = SampleStream.from_config(load(cfg))
    grain_contract(lambda: StreamDataset(stream, RankSpec(0, 1, batch_size(cfg))))


# -- every entry point through the shared helper ------------------------------------------------
@pytest.mark.parametrize(
    "case", ["single", "single-num-samples", "mixture", "packed", "padded", "vsl"]
)
@pytest.mark.parametrize("workers", [0, 2])
def test_stream_loader_states_are_echoed_and_positional(
    configs: dict[str, dict[str, Any]], case: str, workers: int
) -> None:
    """StreamLoader's state is a pure function of the position: after a restore, every later
    state equals the uninterrupted run's, and the structure never changes."""
    cfg = configs[case]
    options = LoaderOptions(chunk_batches=2)
    assert_resumes_exactly(
        lambda: build_loader(cfg, batch_size=batch_size(cfg), num_workers=workers, options=options),
        passes=2,
        same_structure=True,
        same_states=True,
    )


@pytest.mark.parametrize("case", ["single", "mixture", "packed", "vsl"])
@pytest.mark.parametrize("workers", [0, pytest.param(2, marks=pytest.mark.slow)])
def test_stream_dataset_under_stateful_dataloader(
    configs: dict[str, dict[str, Any]], case: str, workers: int
) -> None:
    cfg = configs[case]
    stream = SampleStream.from_config(load(cfg))
    rank = RankSpec(0, 1, batch_size(cfg))

    def make() -> StatefulDataLoader:
        return StatefulDataLoader(StreamDataset(stream, rank), batch_size=None, num_workers=workers)

    per_pass = len(list(make()))
    points = [0, 1, 3, per_pass, per_pass + 1, 2 * per_pass] if workers else None
    assert_resumes_exactly(make, passes=2, save_points=points, restore_twice=not workers)


def chain(cfg: dict[str, Any], chunk: int, restart: bool = True, workers: int = 0) -> Loader[Any]:
    """``PlanChunks → ReadWindows → PackMasks → SplitBatches`` in a torchdata Loader (with
    ``workers``, ``MapWorkers`` threads read the windows)."""
    stream = SampleStream.from_config(load(cfg))
    node: BaseNode[Any] = PlanChunks(stream, RankSpec(0, 1, batch_size(cfg)), chunk_batches=chunk)
    if workers:
        node = MapWorkers(node, WindowReader(stream), num_workers=workers, method="thread")
    else:
        node = ReadWindows(node, stream)
    return Loader(SplitBatches(PackMasks(node, False, 0)), restart_on_stop_iteration=restart)


@pytest.mark.parametrize(
    ("case", "workers"), [("single", 0), ("mixture", 0), ("single", 2), ("vsl", 2)]
)
def test_node_chain_echoes_its_states(
    configs: dict[str, dict[str, Any]], case: str, workers: int
) -> None:
    """The reported case: ``{sample 8, offset 1}`` (a chunk of 2 with one batch delivered)
    was reported back as ``{sample 16, offset 0}`` after a restore."""
    cfg = configs[case]
    assert_resumes_exactly(lambda: chain(cfg, 4, workers=workers), passes=2, same_structure=True)


def test_node_chain_state_after_the_pass(configs: dict[str, dict[str, Any]]) -> None:
    """torchdata's end-of-pass rules: ``restart_on_stop_iteration=False`` resumes into an empty
    pass; the default restarts into the next pass."""
    cfg = configs["single"]
    loader = chain(cfg, 3)
    first, mid_state = [], None
    for step, batch in enumerate(loader, start=1):
        first.append(batch)
        if step == 2:
            mid_state = copy.deepcopy(loader.state_dict())
    end_state = copy.deepcopy(loader.state_dict())
    second = list(loader)
    assert mid_state is not None and first and second
    resumed = chain(cfg, 3)
    resumed.load_state_dict(mid_state)
    assert_batches_equal(first[2:], list(resumed), "rest of pass 0")
    assert_batches_equal(second, list(resumed), "pass 1 after the resumed pass")
    resumed.load_state_dict(resumed_initial := chain(cfg, 3).state_dict())
    assert resumed_initial["num_yielded"] == 0
    assert_batches_equal(first, list(resumed), "the initial state restored into a used loader")
    stopped = chain(cfg, 3, restart=False)
    stopped.load_state_dict(end_state)
    assert list(stopped) == []
    restarted = chain(cfg, 3)
    restarted.load_state_dict(end_state)
    assert_batches_equal(second, list(restarted), "end state, restart_on_stop_iteration")
