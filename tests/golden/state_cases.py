"""The saved-state cases of every entry point and mode, shared by the generator of the
committed states (``make_state_goldens.py``, run against an older streamload) and the test
that loads them (``tests/test_state_goldens.py``).

Each case builds a loader over a corpus made from fixed seeds (so the data fingerprint, which
holds relative paths, sizes and dtypes, is the same in any folder), takes ``AFTER`` batches and
saves ``state_dict()``.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

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
from tests.helpers.corpus import write_shards
from tests.test_mixture_loader import SCHEDULE, SIZES, WEIGHTS, mixture, write_sources

AFTER = (0, 3, 5)
"""Batches taken before each saved state."""


def configs(root: Path) -> dict[str, dict[str, Any]]:
    """The configs of the cases, over corpora written under ``root``."""
    docs = write_shards(root / "docs", [150, 110])
    paths = write_sources(root / "mix", SIZES)
    return {
        "single": docs.config(8, seed=2, packing={"masks": True}),
        "mixture": mixture(paths, WEIGHTS, SCHEDULE, sampling={"num_samples": 120}),
        "mixture-accum": {
            **mixture(paths, WEIGHTS, SCHEDULE, sampling={"num_samples": 120}),
            "grad_accum_steps": 2,
            "global_batch_size": 24,
        },
        "mixture-ramp": {  # steps of 4, 4, 8, 12, 16, then 24 samples
            **mixture(paths, WEIGHTS, SCHEDULE, sampling={"num_samples": 120}),
            "global_batch_size": 24,
            "rampup_batch_size": [4, 4, 40],
        },
        "packed": docs.config(
            8, seed=2, pad_token_id=1, sampling={"mode": "packed"}, packing={"masks": True}
        ),
        "vsl": docs.config(
            8,
            seed=2,
            global_batch_size=2,
            sampling={"mode": "vsl", "min_seq_len": 2, "tokens_per_batch": 16},
        ),
        "evaluation": docs.config(8, seed=2, sampling={"split": "50,50,0"}),
    }


def batch_size(cfg: dict[str, Any]) -> int:
    """Per-rank batch size of a case (one rank; accumulation: a micro-batch; a ramp: its
    first global batch)."""
    if "rampup_batch_size" in cfg:
        return int(cfg["rampup_batch_size"][0])
    return int(cfg.get("global_batch_size") or 4) // int(cfg.get("grad_accum_steps", 1))


def loader(cfg: dict[str, Any], case: str) -> Any:
    """``build_loader`` (an evaluation loader for the evaluation case), 2 thread workers."""
    split = "valid" if case == "evaluation" else None
    options = LoaderOptions(chunk_batches=2)
    return build_loader(
        cfg, batch_size=batch_size(cfg), num_workers=2, options=options, split=split
    )


def dataset(cfg: dict[str, Any], workers: int) -> StatefulDataLoader:
    """``StreamDataset`` under ``StatefulDataLoader``."""
    stream = SampleStream.from_config(load(cfg))
    ds = StreamDataset(stream, RankSpec(0, 1, batch_size(cfg)))
    return StatefulDataLoader(ds, batch_size=None, num_workers=workers)


def chain(cfg: dict[str, Any], workers: int) -> Loader[Any]:
    """The torchdata node chain in a ``torchdata.nodes.Loader``."""
    stream = SampleStream.from_config(load(cfg))
    node: BaseNode[Any] = PlanChunks(stream, RankSpec(0, 1, batch_size(cfg)), chunk_batches=3)
    if workers:
        node = MapWorkers(node, WindowReader(stream), num_workers=workers, method="thread")
    else:
        node = ReadWindows(node, stream)
    return Loader(SplitBatches(PackMasks(node, False, 0)))


ENTRY_POINTS: dict[str, tuple[list[str], Callable[[dict[str, Any], str], Any]]] = {
    "loader": (
        ["single", "mixture", "mixture-accum", "mixture-ramp", "packed", "vsl", "evaluation"],
        loader,
    ),
    "dataset0": (
        ["single", "mixture", "mixture-ramp", "packed", "vsl"],
        lambda cfg, case: dataset(cfg, 0),
    ),
    "dataset2": (["single", "mixture"], lambda cfg, case: dataset(cfg, 2)),
    "chain0": (["single", "mixture", "mixture-ramp", "vsl"], lambda cfg, case: chain(cfg, 0)),
    "chain2": (["single", "mixture"], lambda cfg, case: chain(cfg, 2)),
}
"""Entry point → (its cases, how to build it from a case's config)."""
