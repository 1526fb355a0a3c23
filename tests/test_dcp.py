"""torch.distributed.checkpoint (DCP): StreamLoader is a ``Stateful`` and round-trips as is.

``dcp.save({"model": model, "data": loader})`` calls ``loader.state_dict()``; ``dcp.load`` fills
the state of a fresh loader (its own ``state_dict()`` is the template) and calls
``load_state_dict()``. The resumed loader must continue on exactly the next batch, and report
exactly the saved state (a state is normalized once, when loaded, and echoed; issue 22,
item 16).
"""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any

import pytest
import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint.stateful import Stateful

from streamload import LoaderOptions, StateError, StreamLoader, build_loader
from streamload.testing import assert_batches_equal
from tests.helpers.corpus import write_shards
from tests.helpers.paths import REPO, load_script
from tests.test_mixture_loader import SCHEDULE, SIZES, WEIGHTS, Ranks, mixture, write_sources

pytestmark = pytest.mark.filterwarnings(
    "ignore:each pass of", "ignore:torch.distributed is disabled"
)
EXAMPLE = REPO / "examples" / "dcp_checkpoint.py"


@pytest.fixture(scope="module")
def paths(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    return write_sources(tmp_path_factory.mktemp("dcp-mix"), SIZES)


@pytest.fixture(scope="module")
def single(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """One source of documents; a pass of 92 windows of 8 with num_samples = 60."""
    corpus = write_shards(tmp_path_factory.mktemp("dcp-docs"), [400, 337])
    return corpus.config(8, sampling={"num_samples": 60}, packing={"masks": True})


def loader_of(
    cfg: dict[str, Any], b: int, nw: int = 0, rank: int = 0, world: int = 1
) -> StreamLoader:
    options = LoaderOptions(chunk_batches=2)
    return build_loader(
        cfg, batch_size=b, rank=rank, world_size=world, num_workers=nw, options=options
    )


def take(loader: StreamLoader, steps: int) -> list[dict[str, torch.Tensor]]:
    out = []
    for batch in loader:
        out.append({k: v.clone() for k, v in batch.items()})
        if len(out) == steps:
            break
    return out


def model() -> torch.nn.Module:
    return torch.nn.Sequential(torch.nn.Embedding(50, 4), torch.nn.Linear(4, 3))


def test_the_loader_is_a_dcp_stateful(paths: dict[str, str]) -> None:
    assert isinstance(loader_of(mixture(paths, WEIGHTS, SCHEDULE), 12), Stateful)


CASES = {
    "mixture-schedule": ("mix", 12, 0, 7, 8),
    "mixture-threads": ("mix", 12, 2, 10, 5),
    "single-mid-pass": ("single", 4, 0, 6, 12),
    "single-pass-end": ("single", 4, 2, 15, 6),
}


@pytest.mark.parametrize("case", list(CASES), ids=list(CASES))
def test_dcp_round_trip_continues_exactly(
    case: str, paths: dict[str, str], single: dict[str, Any], tmp_path: Path
) -> None:
    kind, b, nw, saved_after, more = CASES[case]
    cfg = mixture(paths, WEIGHTS, SCHEDULE) if kind == "mix" else single
    reference = loader_of(cfg, b)
    expected = [take(reference, saved_after), take(reference, more), take(reference, more)]

    net, loader = model(), loader_of(cfg, b, nw)
    assert_batches_equal(expected[0], take(loader, saved_after), "before saving")
    dcp.save({"model": net, "data": loader}, checkpoint_id=tmp_path / "ckpt", no_dist=True)
    saved_state = loader.state_dict()
    loader.close()

    fresh_net, fresh = model(), loader_of(cfg, b, nw)
    dcp.load({"model": fresh_net, "data": fresh}, checkpoint_id=tmp_path / "ckpt", no_dist=True)
    assert fresh.state_dict() == saved_state, "after dcp.load, state_dict() is the saved state"
    for name, value in net.state_dict().items():
        assert torch.equal(fresh_net.state_dict()[name], value), name
    assert_batches_equal(expected[1], take(fresh, more), "after dcp.load")
    assert_batches_equal(expected[2], take(fresh, more), "and on")
    fresh.close()


def test_dcp_checkpoint_resumes_on_another_world_size(
    paths: dict[str, str], tmp_path: Path
) -> None:
    cfg = mixture(paths, WEIGHTS, SCHEDULE)
    reference = Ranks(cfg, 1).take(13)
    loader = loader_of(cfg, 12)
    take(loader, 6)
    dcp.save({"data": loader}, checkpoint_id=tmp_path / "ckpt", no_dist=True)
    ranks = Ranks(cfg, 3)
    for rank_loader in ranks.loaders:
        dcp.load({"data": rank_loader}, checkpoint_id=tmp_path / "ckpt", no_dist=True)
    assert_batches_equal(reference[6:], ranks.take(7), "3 ranks from a DCP checkpoint")


@pytest.mark.parametrize("mode", ["packed", "vsl"])
def test_dcp_checkpoint_of_document_modes_resumes_on_another_world_size(
    single: dict[str, Any], tmp_path: Path, mode: str
) -> None:
    if mode == "packed":
        cfg = single | {"pad_token_id": 1, "global_batch_size": 4}
        cfg["sampling"] = {"mode": "packed", "num_samples": 60}
    else:  # inside an optimizer step of two global batches of their own lengths
        cfg = single | {"grad_accum_steps": 2}
        cfg["sampling"] = {"mode": "vsl", "min_seq_len": 2, "tokens_per_batch": 32}
    reference = take(loader_of(cfg, 4), 12)
    loader = loader_of(cfg, 4)
    take(loader, 5)
    dcp.save({"data": loader}, checkpoint_id=tmp_path / "ckpt", no_dist=True)
    halves = [loader_of(cfg, 2, rank=r, world=2) for r in range(2)]
    for half in halves:
        dcp.load({"data": half}, checkpoint_id=tmp_path / "ckpt", no_dist=True)
    got = [take(half, 7) for half in halves]
    joined = [{k: torch.cat([a[k], b[k]]) for k in a} for a, b in zip(*got, strict=True)]
    assert_batches_equal(reference[5:], joined, f"2 ranks from a {mode} DCP checkpoint")


def test_dcp_keeps_source_names_with_dots_and_slashes(tmp_path: Path) -> None:
    """DCP flattens nested dicts into dotted keys; source names may hold dots themselves."""
    names = {"web.en": [100, 61], "code/py": [105], "x.epoch": [57]}
    paths = write_sources(tmp_path / "data", names)
    cfg = mixture(paths, dict(zip(names, (0.5, 0.3, 0.2), strict=True)))
    reference = loader_of(cfg, 12)
    expected = take(reference, 8)[3:]
    loader = loader_of(cfg, 12)
    take(loader, 3)
    dcp.save({"data": loader}, checkpoint_id=tmp_path / "ckpt", no_dist=True)
    fresh = loader_of(cfg, 12)
    dcp.load({"data": fresh}, checkpoint_id=tmp_path / "ckpt", no_dist=True)
    assert fresh.state_dict()["sources"] == loader.state_dict()["sources"]
    assert_batches_equal(expected, take(fresh, 5), "dotted source names")


def test_dcp_load_for_other_data_raises_state_error(paths: dict[str, str], tmp_path: Path) -> None:
    cfg = mixture(paths, WEIGHTS, SCHEDULE)
    loader = loader_of(cfg, 12)
    take(loader, 3)
    dcp.save({"data": loader}, checkpoint_id=tmp_path / "ckpt", no_dist=True)
    other = loader_of({**cfg, "seed": cfg["seed"] + 1}, 12)
    with pytest.raises(StateError, match="seed"):
        dcp.load({"data": other}, checkpoint_id=tmp_path / "ckpt", no_dist=True)


def test_dcp_inside_a_gloo_process_group(paths: dict[str, str], tmp_path: Path) -> None:
    """The usual setting: a process group exists, so DCP runs its collectives (world of 1)."""
    cfg = mixture(paths, WEIGHTS, SCHEDULE)
    expected = take(loader_of(cfg, 12), 9)[4:]
    store = f"file://{tmp_path / 'store'}"
    dist.init_process_group("gloo", init_method=store, rank=0, world_size=1)
    try:
        loader = loader_of(cfg, 12)
        take(loader, 4)
        dcp.save({"model": model(), "data": loader}, checkpoint_id=tmp_path / "ckpt")
        fresh = loader_of(cfg, 12)
        dcp.load({"model": model(), "data": fresh}, checkpoint_id=tmp_path / "ckpt")
        assert_batches_equal(expected, take(fresh, 5), "in a process group")
    finally:
        dist.destroy_process_group()


def load_example() -> Any:
    return load_script(EXAMPLE)


def test_example_training_loop_resumes_model_and_data_exactly(tmp_path: Path) -> None:
    """Uninterrupted 9 steps == 5 steps (checkpoint at 3, steps 4–5 lost) + resume to 9."""
    web = write_shards(tmp_path / "web", [400, 300], seed=1)
    code = write_shards(tmp_path / "code", [500], seed=2)
    cfg = {
        "seq_len": 16,
        "seed": 1,
        "eos_token_id": 0,
        "vocab_size": 500,
        "global_batch_size": 4,
        "packing": {"masks": True},
        "sources": [
            {"name": "web", "path": str(web.folder), "weight": 0.7},
            {"name": "code", "path": str(code.folder), "weight": 0.3},
        ],
        "schedule": [{"start_step": 4, "weights": {"web": 0.2, "code": 0.8}}],
    }
    example = load_example()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        whole = example.train(cfg, steps=9, ckpt=tmp_path / "a", batch_size=4, save_every=3)
        crashed = example.train(cfg, steps=5, ckpt=tmp_path / "b", batch_size=4, save_every=3)
        resumed = example.train(cfg, steps=9, ckpt=tmp_path / "b", batch_size=4, save_every=3)
    assert [r["step"] for r in whole] == list(range(1, 10))
    assert crashed == whole[:5]
    assert [r["step"] for r in resumed] == list(range(4, 10))
    assert resumed == whole[3:], "same samples and bit-identical losses after resuming"
