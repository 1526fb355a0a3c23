"""Real data-parallel ranks over torch.distributed (gloo, 127.0.0.1): save on 4, resume on 2;
the DP rank under device meshes.

The ranks are subprocesses running this file as a script; each takes its rank and world size
from the initialised process group (no explicit arguments), writes its batches to a file,
and checks with ``all_gather_object`` that every rank saved the same state.

One launch of 4 ranks (``mesh_worker``) holds every mesh case: ``mesh["dp"]`` of a 2 x 2
(dp, tp) mesh, the whole mesh (DP dimensions picked by name), ``model_parallel`` sizes, an
HSDP (dp_replicate, dp_shard) mesh, and the refusals of the global group (and of a 1-D mesh
of every rank) while a tp dimension exists. The pure rules (``pick_data_parallel``,
``ModelParallel``) are checked in-process, against each other over 30 seeded layouts.
"""

from __future__ import annotations

import json
import sys
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
import torch.distributed as dist

from streamload import build_loader, distributed
from streamload.distributed import (
    ModelParallel,
    mesh_data_parallel,
    pick_data_parallel,
    resolve_data_parallel,
)
from streamload.errors import ConfigError
from streamload.testing import assert_batches_equal, collect_global_batches
from tests.helpers import gloo
from tests.helpers.corpus import write_shards

GLOBAL_BATCH = 8
SAVE_AFTER = 4


def launch(phase: str, world: int, config: Path, out: Path) -> None:
    """Run ``world`` ranks of this file's ``worker`` and wait for all of them."""
    gloo.launch(__file__, phase, world, config, out)


def worker(phase: str, config: str, out: str) -> None:
    """One rank: ``save`` iterates SAVE_AFTER steps and saves; ``resume`` finishes the pass."""
    warnings.simplefilter("ignore")
    dist.init_process_group("gloo", init_method="env://")
    rank, world = dist.get_rank(), dist.get_world_size()
    loader = build_loader(config, batch_size=GLOBAL_BATCH // world, num_workers=1)
    assert (loader.rank.rank, loader.rank.world_size) == (rank, world)
    folder = Path(out)
    if phase == "resume":
        loader.load_state_dict(json.loads((folder / "state.json").read_text()))
    batches = []
    for batch in loader:
        batches.append({key: value.clone() for key, value in batch.items()})
        if phase == "save" and len(batches) == SAVE_AFTER:
            break
    torch.save(batches, folder / f"{phase}_rank{rank}.pt")
    if phase == "save":
        state = loader.state_dict()
        states: list[object] = [None] * world
        dist.all_gather_object(states, state)
        if any(s != states[0] for s in states):
            raise SystemExit(f"ranks saved different states: {states}")
        if rank == 0:
            (folder / "state.json").write_text(json.dumps(state))
    loader.close()  # stop workers before the process group and the interpreter go
    dist.barrier()
    dist.destroy_process_group()


def take(loader: Any, steps: int = SAVE_AFTER) -> list[dict[str, torch.Tensor]]:
    """The first ``steps`` batches of a loader (copies), then its workers stopped."""
    batches = []
    for batch in loader:
        batches.append({key: value.clone() for key, value in batch.items()})
        if len(batches) == steps:
            break
    loader.close()
    return batches


def mesh_worker(config: str, out: str) -> None:
    """One rank of a 2 (dp) x 2 (tp) DeviceMesh, then of an HSDP 2 (dp_replicate) x 2
    (dp_shard) one: the loader's DP rank from ``mesh["dp"]``, from the whole mesh (dims picked
    by name), from ``model_parallel`` sizes, from the HSDP mesh; without any of them the
    global group is refused, since the tp dimension makes it not all data-parallel."""
    from torch.distributed.device_mesh import init_device_mesh

    warnings.simplefilter("ignore")
    dist.init_process_group("gloo", init_method="env://")
    init_device_mesh("cpu", (2, 2), mesh_dim_names=("replica", "piece"))  # names unknown
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        unknown = (resolve_data_parallel(None, None), [str(w.message) for w in caught])
    mesh = init_device_mesh("cpu", (2, 2), mesh_dim_names=("dp", "tp"))
    b = GLOBAL_BATCH // 2
    batches = take(build_loader(config, batch_size=b, mesh=mesh["dp"]))
    info = {"dp": mesh["dp"].get_local_rank(), "tp": mesh["tp"].get_local_rank()}
    torch.save((info, batches), Path(out) / f"mesh_rank{dist.get_rank()}.pt")
    layouts: dict[str, Any] = {
        "whole mesh": take(build_loader(config, batch_size=b, mesh=mesh)),
        "unknown names": unknown,
    }
    r, w = resolve_data_parallel(None, None, model_parallel={"tp": 2})
    layouts["model_parallel"] = take(build_loader(config, batch_size=b, rank=r, world_size=w))
    world = init_device_mesh("cpu", (4,), mesh_dim_names=("world",))
    for key, mesh_arg in (("refused", None), ("refused world mesh", world)):
        try:
            build_loader(config, batch_size=b, mesh=mesh_arg)
        except ConfigError as exc:
            layouts[key] = str(exc)
    hsdp = init_device_mesh("cpu", (2, 2), mesh_dim_names=("dp_replicate", "dp_shard"))
    layouts["hsdp"] = take(build_loader(config, batch_size=GLOBAL_BATCH // 4, mesh=hsdp))
    layouts["hsdp rank"] = (
        hsdp["dp_replicate"].get_local_rank() * 2 + hsdp["dp_shard"].get_local_rank()
    )
    torch.save(layouts, Path(out) / f"layouts_rank{dist.get_rank()}.pt")
    dist.barrier()
    dist.destroy_process_group()


def gather_files(folder: Path, phase: str, world: int) -> list[dict[str, torch.Tensor]]:
    """Global batches from the per-rank batch files of one phase."""
    per_rank = [torch.load(folder / f"{phase}_rank{r}.pt") for r in range(world)]
    return collect_global_batches(per_rank)


@pytest.mark.slow
def test_save_on_four_ranks_resume_on_two(tmp_path: Path) -> None:
    corpus = write_shards(tmp_path / "data", [300, 200, 260])
    config = tmp_path / "data.json"
    config.write_text(json.dumps(corpus.config(8, seed=99, packing={"masks": True})))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        reference = collect_global_batches([build_loader(config, batch_size=GLOBAL_BATCH)])
    assert len(reference) > 2 * SAVE_AFTER

    launch("save", 4, config, tmp_path)
    state = json.loads((tmp_path / "state.json").read_text())
    assert state["cursor"]["samples"] == SAVE_AFTER * GLOBAL_BATCH
    assert_batches_equal(reference[:SAVE_AFTER], gather_files(tmp_path, "save", 4), "4 ranks")

    launch("resume", 2, config, tmp_path)
    resumed = gather_files(tmp_path, "resume", 2)
    assert_batches_equal(reference[SAVE_AFTER:], resumed, "resumed on 2 ranks")


@pytest.fixture(scope="module")
def mesh_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[dict[str, Any]]]:
    """4 gloo ranks of ``mesh_worker`` (one launch for every mesh test) and the reference."""
    folder = tmp_path_factory.mktemp("mesh")
    corpus = write_shards(folder / "data", [300, 200])
    config = folder / "data.json"
    config.write_text(json.dumps(corpus.config(8, seed=5)))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        reference = collect_global_batches([build_loader(config, batch_size=GLOBAL_BATCH)])
    launch("mesh", 4, config, folder)
    return folder, reference


@pytest.mark.slow
def test_tensor_parallel_peers_get_identical_batches(
    mesh_run: tuple[Path, list[dict[str, Any]]],
) -> None:
    """A 2x2 (dp, tp) DeviceMesh: tp peers share a DP rank and so get the same batches."""
    tmp_path, reference = mesh_run
    by_dp: dict[int, list] = {}
    for rank in range(4):
        info, batches = torch.load(tmp_path / f"mesh_rank{rank}.pt")
        by_dp.setdefault(info["dp"], []).append(batches)
    assert sorted(by_dp) == [0, 1]
    for dp, (first, second) in by_dp.items():
        assert_batches_equal(first, second, f"tp peers of dp rank {dp}")
    merged = collect_global_batches([by_dp[0][0], by_dp[1][0]])
    assert_batches_equal(reference[:SAVE_AFTER], merged, "dp ranks of the mesh")


@pytest.mark.slow
def test_whole_mesh_and_model_parallel_sizes_give_the_dp_rank_of_mesh_dp(
    mesh_run: tuple[Path, list[dict[str, Any]]],
) -> None:
    """The whole (dp, tp) mesh (dp picked by name) and ``model_parallel={"tp": 2}`` (ranks
    laid out tp fastest) give every rank exactly the batches ``mesh["dp"]`` gives it."""
    folder, _ = mesh_run
    for rank in range(4):
        _, by_dp_mesh = torch.load(folder / f"mesh_rank{rank}.pt")
        layouts = torch.load(folder / f"layouts_rank{rank}.pt")
        for how in ("whole mesh", "model_parallel"):
            assert_batches_equal(by_dp_mesh, layouts[how], f"rank {rank}, {how}")


@pytest.mark.slow
def test_hsdp_mesh_gives_four_dp_ranks_in_replicate_shard_order(
    mesh_run: tuple[Path, list[dict[str, Any]]],
) -> None:
    folder, reference = mesh_run
    layouts = [torch.load(folder / f"layouts_rank{rank}.pt") for rank in range(4)]
    by_dp = {layout["hsdp rank"]: layout["hsdp"] for layout in layouts}
    assert sorted(by_dp) == [0, 1, 2, 3]
    merged = collect_global_batches([by_dp[r] for r in range(4)])
    assert_batches_equal(reference[:SAVE_AFTER], merged, "HSDP dp_replicate x dp_shard")


@pytest.mark.slow
def test_global_group_with_a_tp_mesh_is_refused_with_what_to_pass(
    mesh_run: tuple[Path, list[dict[str, Any]]],
) -> None:
    folder, _ = mesh_run
    for rank in range(4):
        layouts = torch.load(folder / f"layouts_rank{rank}.pt")
        for key in ("refused", "refused world mesh"):  # no mesh; a 1-D mesh of all 4 ranks
            message = layouts.get(key)
            assert message is not None, f"rank {rank}: {key}: all 4 ranks taken as DP at tp=2"
            assert "model-parallel dimensions (tp=2)" in message
            for hint in ("mesh=", "model_parallel=ModelParallel(tp=2)", "rank= and world_size="):
                assert hint in message, hint


@pytest.mark.slow
def test_global_group_with_unknown_mesh_names_is_taken_with_a_warning(
    mesh_run: tuple[Path, list[dict[str, Any]]],
) -> None:
    folder, _ = mesh_run
    for rank in range(4):
        (got, messages) = torch.load(folder / f"layouts_rank{rank}.pt")["unknown names"]
        assert got == (rank, 4)
        assert len(messages) == 1 and "dimensions ['piece', 'replica']" in messages[0]


# -- the DP position from a mesh's names or from model-parallel sizes (pure, in-process) ---------
LAYOUTS = {
    "1-D unnamed": (None, (4,), (3,), (3, 4)),
    "mesh['dp']": (("dp",), (4,), (2,), (2, 4)),
    "1-D of another name": (("fsdp",), (4,), (1,), (1, 4)),
    "dp x tp": (("dp", "tp"), (2, 2), (1, 0), (1, 2)),
    "tp x dp": (("tp", "dp"), (2, 2), (1, 0), (0, 2)),
    "hsdp": (("dp_replicate", "dp_shard"), (2, 4), (1, 3), (7, 8)),
    "hsdp x tp": (("dp_replicate", "dp_shard", "tp"), (2, 2, 2), (1, 0, 1), (2, 4)),
    "torchtitan dense": (
        ("pp", "dp_replicate", "dp_shard", "cp", "tp"),
        (2, 2, 2, 2, 2),
        (1, 1, 0, 1, 1),
        (2, 4),
    ),
    "torchtitan batch": (("pp", "batch", "cp", "tp"), (2, 3, 2, 2), (1, 2, 1, 0), (2, 3)),
    "fsdp2 hsdp": (("replicate", "shard"), (3, 2), (2, 1), (5, 6)),
    "model-parallel only": (("pp", "tp"), (2, 2), (1, 1), (0, 1)),
}


@pytest.mark.parametrize("case", list(LAYOUTS))
def test_dp_dimensions_are_picked_by_name_row_major(case: str) -> None:
    names, shape, coordinate, expected = LAYOUTS[case]
    assert pick_data_parallel(names, shape, coordinate) == expected


REFUSED = {
    "unnamed 2-D": (None, (2, 2), "2 unnamed dimensions"),
    "1-D tp": (("tp",), (2,), r"mesh\['tp'\] is a model-parallel dimension"),
    "1-D dp_shard_cp": (("dp_shard_cp",), (4,), r"\['dp_shard_cp'\] include context-parallel"),
    "fsdp with others": (
        ("dp_replicate", "fsdp", "tp"),
        (2, 2, 2),
        r"\['fsdp'\] may mix data- and model-parallel ranks",
    ),
    "unknown name": (("dp", "model"), (2, 2), r"\['model'\] are neither data- nor model-parallel"),
    "loss": (("batch", "loss"), (2, 2), r"\['loss'\] include context-parallel ranks"),
}


@pytest.mark.parametrize("case", list(REFUSED))
def test_ambiguous_meshes_are_refused_saying_what_to_pass(case: str) -> None:
    names, shape, match = REFUSED[case]
    with pytest.raises(ConfigError, match=match) as caught:
        pick_data_parallel(names, shape, (0,) * len(shape))
    assert "mesh['dp']" in str(caught.value) or "rank=/world_size=" in str(caught.value)


def test_model_parallel_sizes_agree_with_the_torchtitan_mesh_layout() -> None:
    """``ModelParallel(tp, cp, pp)`` over global ranks == the (pp, batch, cp, tp) mesh, for
    30 seeded shapes and every rank of each; each DP rank holds tp * cp * pp ranks."""
    rng = np.random.default_rng(17)
    for _ in range(30):
        pp, dp, cp, tp = (int(x) for x in rng.integers(1, 4, size=4))
        shape, world = (pp, dp, cp, tp), pp * dp * cp * tp
        sizes = ModelParallel(tp=tp, cp=cp, pp=pp)
        seen = [0] * dp
        for rank in range(world):
            coordinate = tuple(int(i) for i in np.unravel_index(rank, shape))
            got = sizes.data_parallel(rank, world)
            assert got == pick_data_parallel(("pp", "batch", "cp", "tp"), shape, coordinate)
            seen[got[0]] += 1
        assert seen == [sizes.size] * dp


@pytest.mark.parametrize(
    ("value", "match"),
    [
        ({"tp": 0}, r"model_parallel\.tp = 0 must be >= 1"),
        ({"cp": True}, r"model_parallel\.cp = True must be an integer"),
        ({"pp": 1.5}, r"model_parallel\.pp = 1\.5 must be an integer"),
        ({"tp": 2, "ep": 2}, r"model_parallel: unknown key\(s\) ep; allowed: cp, pp, tp"),
        ({1: 2}, r"model_parallel: key 1 \(int\) must be a string"),
        (2, r"model_parallel = 2: expected ModelParallel"),
    ],
)
def test_bad_model_parallel_sizes_are_refused(value: Any, match: str) -> None:
    with pytest.raises(ConfigError, match=match):
        ModelParallel.coerce(value)


def test_model_parallel_sizes_take_numpy_integers() -> None:
    assert ModelParallel.coerce({"tp": np.int64(2), "pp": 3}).size == 6


class StubMesh:
    """What ``mesh_data_parallel`` reads of a ``DeviceMesh``: names, shape, coordinate, size."""

    def __init__(self, names: tuple[str, ...], shape: tuple[int, ...], at: tuple[int, ...]):
        self.mesh_dim_names, self.shape, self._at = names, shape, at

    def get_coordinate(self) -> tuple[int, ...]:
        return self._at

    def size(self) -> int:
        return int(np.prod(self.shape))


@pytest.mark.parametrize(
    ("names", "shape", "at", "expected"),
    [
        (("dp", "tp"), (1, 4), (0, 3), (0, 1)),  # a DP dimension of size 1 is still named
        (("dp", "tp"), (2, 2), (1, 0), (1, 2)),
        (("dp_replicate", "dp_shard", "tp"), (1, 1, 4), (0, 0, 2), (0, 1)),
    ],
)
def test_a_submesh_naming_a_dp_dimension_is_taken_at_any_dp_size(
    monkeypatch: pytest.MonkeyPatch,
    names: tuple[str, ...],
    shape: tuple[int, ...],
    at: tuple[int, ...],
    expected: tuple[int, int],
) -> None:
    """A mesh over 4 of 8 ranks (e.g. one pipeline stage's): its DP rank and size come from
    its named DP dimensions, even when their size is 1."""
    monkeypatch.setattr(distributed, "_world_size", lambda: 8)
    assert mesh_data_parallel(StubMesh(names, shape, at)) == expected


def test_a_submesh_naming_no_dp_dimension_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(distributed, "_world_size", lambda: 8)
    with pytest.raises(ConfigError, match=r"\('pp', 'tp'\) name no data-parallel dimension"):
        mesh_data_parallel(StubMesh(("pp", "tp"), (2, 2), (0, 1)))


def test_model_parallel_needs_a_world_it_divides_and_an_initialised_group() -> None:
    with pytest.raises(ConfigError, match=r"6 ranks, not a multiple of tp \* cp \* pp"):
        ModelParallel(tp=2, pp=2).data_parallel(0, 6)
    assert not dist.is_initialized()
    with pytest.raises(ConfigError, match=r"needs an initialised torch\.distributed"):
        resolve_data_parallel(None, None, model_parallel={"tp": 2})


@pytest.mark.parametrize(
    ("args", "match"),
    [
        ((0, None, None, None), "give both rank and world_size"),
        ((0, 2, object(), None), r"not \['rank/world_size', 'mesh'\]"),
        ((None, None, object(), {"tp": 2}), r"not \['mesh', 'model_parallel'\]"),
    ],
)
def test_conflicting_sources_of_the_dp_rank_are_refused(args: tuple[Any, ...], match: str) -> None:
    with pytest.raises(ConfigError, match=match):
        resolve_data_parallel(*args)


if __name__ == "__main__":
    if sys.argv[1] == "mesh":
        mesh_worker(*sys.argv[2:4])
    else:
        worker(*sys.argv[1:4])
