"""streamload as torchtitan's data loader (``streamload.integrations.torchtitan``).

torchtitan's contract (``tests/helpers/torchtitan_contract.py``): its builder calls, its
``(input_dict, labels)`` batches consumed as its trainer does, and its DCP checkpoint. The
state is one key, equal on every rank, so a DCP checkpoint saved at DP 2 (real gloo ranks, a
2 x 2 dp x tp mesh) resumes at DP 4 and DP 1 on exactly the next global batch, where
torchtitan's own ``ParallelAwareDataloader`` (per-rank keys) fails. With torchtitan
installed, its real ``ParallelAwareDataloader`` and DCP ``CheckpointManager`` are used.
"""

from __future__ import annotations

import inspect
import json
import sys
import warnings
from pathlib import Path
from typing import Any

import pytest
import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint.api import CheckpointException
from torch.distributed.checkpoint.stateful import Stateful

from streamload import RankSpec, StateError, StreamDataset, build_loader, build_stream
from streamload.config import load_config
from streamload.errors import ConfigError
from streamload.integrations.torchtitan import (
    STATE_KEY,
    TorchtitanDataConfig,
    TorchtitanLoader,
    build_torchtitan_dataloader,
)
from streamload.testing import assert_batches_equal, assert_resumes_exactly
from tests.helpers import gloo
from tests.helpers.corpus import write_shards
from tests.helpers.torchtitan_contract import (
    RestatedParallelAwareDataloader,
    parallel_aware_dataloader,
    torchtitan_module,
    train_spec_kwargs,
    train_steps,
    trainer_build_kwargs,
)

pytestmark = pytest.mark.filterwarnings(
    "ignore:each pass of",
    "ignore:torch.distributed is disabled",
    "ignore:.set_vital. is deprecated",
)
SEQ_LEN = 8
GLOBAL_BATCH = 8
SAVE_AFTER = 4
MORE = 5
Fed = list[dict[str, torch.Tensor]]


@pytest.fixture(scope="module")
def config(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A corpus of 94 windows of 8 tokens: 11 global batches of 8 per pass."""
    folder = tmp_path_factory.mktemp("titan")
    corpus = write_shards(folder / "data", [300, 200, 260])
    path = folder / "data.json"
    path.write_text(json.dumps(corpus.config(SEQ_LEN, seed=99, packing={"masks": True})))
    return path


def reference(config: Path | dict[str, Any], steps: int) -> Fed:
    """The uninterrupted run's global batches, mapped to torchtitan's names independently."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        loader = build_loader(config, batch_size=GLOBAL_BATCH)
    out = []
    for batch in loader:
        fields = {"input": batch["input_ids"], "labels": batch["labels"]}
        if "position_ids" in batch:
            fields["positions"] = batch["position_ids"]
        out.append({key: value.clone() for key, value in fields.items()})
        if len(out) == steps:
            break
    return out


def build(config: Path, dp: int, rank: int, **settings: Any) -> TorchtitanLoader:
    """Rank ``rank`` of DP ``dp``, built as torchtitan 0.3's trainer builds its loader."""
    kwargs = trainer_build_kwargs(dp, rank, SEQ_LEN, GLOBAL_BATCH // dp)
    return TorchtitanDataConfig(data=config, **settings).build(**kwargs)


def merge(per_rank: list[Fed]) -> Fed:
    """Global batches: each step's rank batches concatenated in DP rank order."""
    steps = zip(*per_rank, strict=True)
    return [{key: torch.cat([part[key] for part in parts]) for key in parts[0]} for parts in steps]


def test_builder_calls_of_torchtitan_give_its_batch_shape(config: Path) -> None:
    """0.3's ``config.dataloader.build(...)`` and 0.1-0.2's ``build_dataloader_fn(...)``."""
    data = TorchtitanDataConfig(data=config)
    new = data.build(**trainer_build_kwargs(2, 1, SEQ_LEN, 4))
    old = build_torchtitan_dataloader(data, **train_spec_kwargs(2, 1, SEQ_LEN, 4))
    assert isinstance(new, Stateful)
    assert (new.dp_rank, new.dp_world_size) == (1, 2)
    batches = train_steps(new, 3)
    assert_batches_equal(batches, train_steps(old, 3), "0.3 and 0.2 builders")
    for batch in batches:
        assert sorted(batch) == ["input", "labels", "positions"]
        assert all(v.shape == (4, SEQ_LEN) and v.dtype == torch.int64 for v in batch.values())
    whole = reference(config, 3)
    assert_batches_equal([{k: v[4:] for k, v in b.items()} for b in whole], batches, "rank 1")


def test_without_masks_the_input_dict_holds_only_the_tokens(tmp_path: Path) -> None:
    corpus = write_shards(tmp_path / "data", [200])
    cfg = corpus.config(SEQ_LEN, seed=3)
    (batch,) = train_steps(
        TorchtitanDataConfig(data=cfg).build(**trainer_build_kwargs(1, 0, 8, 2)), 1
    )
    assert sorted(batch) == ["input", "labels"]


def test_a_seq_len_other_than_the_config_s_or_no_batch_size_is_refused(config: Path) -> None:
    data = TorchtitanDataConfig(data=config)
    with pytest.raises(
        ConfigError, match=r"seq_len = 16 but the streamload config has seq_len = 8"
    ):
        data.build(**trainer_build_kwargs(1, 0, 16, 8))
    with pytest.raises(ConfigError, match="no local_batch_size"):
        data.build(dp_world_size=1, dp_rank=0)


def with_global_batch(dp: int, rank: int, local: int, global_batch: int) -> dict[str, Any]:
    """0.1-0.2's builder call with ``training.global_batch_size`` set."""
    kwargs = train_spec_kwargs(dp, rank, SEQ_LEN, local)
    kwargs["job_config"].training.global_batch_size = global_batch
    return kwargs


def test_torchtitans_global_batch_size_sets_the_gradient_accumulation(config: Path) -> None:
    data = TorchtitanDataConfig(data=config)
    loader = build_torchtitan_dataloader(data, **with_global_batch(2, 1, 2, 12))
    assert loader.loader.stream.config.grad_accum_steps == 3
    next(iter(loader))
    state = loader.loader.state_dict()
    assert (state["global_batch_size"], state["cursor"]["in_step"]) == (12, 4)
    default = build_torchtitan_dataloader(data, **with_global_batch(2, 1, 2, -1))
    assert default.loader.stream.config.grad_accum_steps == 1


@pytest.mark.parametrize(
    ("settings", "global_batch", "match"),
    [
        ({"grad_accum_steps": 2}, 12, "torchtitan accumulates 3 .* grad_accum_steps = 2"),
        ({"grad_accum_steps": 2}, -1, "torchtitan accumulates 1 .* grad_accum_steps = 2"),
        ({"global_batch_size": 8}, 12, "global_batch_size = 8; make them agree"),
        ({}, 10, "global_batch_size = 10 is not a multiple of local_batch_size 2 x dp_degree 2"),
        (
            {"global_batch_size": 12, "rampup_batch_size": [4, 4, 40]},
            12,
            r"batch size schedule .* torchtitan's trainer runs every optimizer step",
        ),
    ],
)
def test_gradient_accumulation_other_than_torchtitans_is_refused(
    config: Path, settings: dict[str, Any], global_batch: int, match: str
) -> None:
    data = TorchtitanDataConfig(data={**json.loads(config.read_text()), **settings})
    with pytest.raises(ConfigError, match=match):
        build_torchtitan_dataloader(data, **with_global_batch(2, 0, 2, global_batch))


def test_state_is_one_key_equal_on_every_rank(config: Path) -> None:
    states = []
    for dp in (1, 2, 4):
        for rank in range(dp):
            loader = build(config, dp, rank)
            train_steps(loader, 3)
            states.append(loader.state_dict())
            loader.close()
    assert list(states[0]) == [STATE_KEY]
    assert all(state == states[0] for state in states), "a state that depends on the rank"
    assert json.loads(states[0][STATE_KEY])["cursor"]["samples"] == 3 * GLOBAL_BATCH


def test_resumes_exactly_and_echoes_its_state(config: Path) -> None:
    """The grain/torchdata checks of ``streamload.testing`` over two passes."""
    assert_resumes_exactly(lambda: build(config, 1, 0, infinite=False), passes=2)


def test_infinite_goes_on_with_the_next_pass(config: Path) -> None:
    one_pass = reference(config, 100)
    assert len(one_pass) == 11
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        loader = build_loader(config, batch_size=GLOBAL_BATCH)
        two_passes = [{k: v.clone() for k, v in b.items()} for _ in range(2) for b in loader]
    expected = [
        {"input": b["input_ids"], "labels": b["labels"], "positions": b["position_ids"]}
        for b in two_passes
    ]
    assert_batches_equal(expected, train_steps(build(config, 1, 0), 22), "two passes")


def test_infinite_ends_where_the_stream_ends(config: Path) -> None:
    """A source's ``max_epochs`` ends the stream: the loop ends there, not in a busy loop."""
    cfg = json.loads(config.read_text()) | {"sampling": {"num_samples": 300}}
    cfg["sources"][0]["max_epochs"] = 2
    loader = TorchtitanDataConfig(data=cfg).build(**trainer_build_kwargs(1, 0, SEQ_LEN, 8))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assert sum(1 for _ in loader) == 2 * 94 // GLOBAL_BATCH


def test_infinite_must_be_a_bool(config: Path) -> None:
    with pytest.raises(ConfigError, match=r"infinite = 'yes' must be true/false"):
        build(config, 1, 0, infinite="yes")
    loader = build_loader(config, batch_size=GLOBAL_BATCH)
    with pytest.raises(ConfigError, match=r"infinite = 1 must be true/false"):
        TorchtitanLoader(loader, infinite=1)  # type: ignore[arg-type]


def test_the_builder_function_is_the_config_s_build_method(config: Path) -> None:
    """``build_torchtitan_dataloader(config, ...)`` and ``config.build(...)`` are one call,
    with torchtitan's keyword-only builder signature."""
    assert TorchtitanDataConfig.build is build_torchtitan_dataloader
    data = TorchtitanDataConfig(data=config)
    assert list(inspect.signature(data.build).parameters) == [
        "dp_world_size",
        "dp_rank",
        "tokenizer",
        "seq_len",
        "local_batch_size",
        "job_config",
        "snapshot_every_n_steps",
    ]


@pytest.mark.parametrize(
    ("state", "match"),
    [
        ({"dp_rank_0": b"x", "world_size": 2}, r"ParallelAwareDataloader state \(per-rank keys"),
        ({STATE_KEY: "{not json"}, "is not JSON"),
        ({STATE_KEY: 5}, r"not a streamload loader state \(a mapping .*\): 5"),
        ({STATE_KEY: "[1]"}, r"not a streamload loader state \(a mapping .*\): \[1\]"),
        ({STATE_KEY: '{"cursor": 1}'}, r"no 'version' key"),
        ({STATE_KEY: "{}", "extra": 1}, r"keys \['extra', 'streamload'\]: not a streamload"),
        ([STATE_KEY], "is of type list; expected a mapping"),
    ],
)
def test_a_state_of_another_shape_is_refused(config: Path, state: Any, match: str) -> None:
    loader = build(config, 1, 0)
    with pytest.raises(StateError, match=match):
        loader.load_state_dict(state)


def test_a_state_for_other_data_names_the_difference(config: Path) -> None:
    saved = build(config, 1, 0)
    train_steps(saved, 2)
    cfg = json.loads(config.read_text()) | {"seed": 100}
    other = TorchtitanDataConfig(data=cfg).build(**trainer_build_kwargs(1, 0, SEQ_LEN, 8))
    with pytest.raises(StateError, match="seed"):
        other.load_state_dict(saved.state_dict())


# -- DCP at DP 2 on real gloo ranks, resumed at DP 4 and DP 1 -----------------------------------
def worker(config: str, out: str) -> None:
    """One rank of a 2 (dp) x 2 (tp) mesh: ours and torchtitan's loader, DCP-saved."""
    from torch.distributed.device_mesh import init_device_mesh

    warnings.simplefilter("ignore")
    dist.init_process_group("gloo", init_method="env://")
    mesh = init_device_mesh("cpu", (2, 2), mesh_dim_names=("dp", "tp"))
    dp_rank, dp = mesh["dp"].get_local_rank(), mesh["dp"].size()  # torchtitan's "batch" mesh
    folder = Path(out)
    loader = TorchtitanDataConfig(data=config, num_workers=1).build(
        **trainer_build_kwargs(dp, dp_rank, SEQ_LEN, GLOBAL_BATCH // dp)
    )
    fed = train_steps(loader, SAVE_AFTER)
    dcp.save({"dataloader": loader}, checkpoint_id=folder / "ours")
    states: list[Any] = [None] * dist.get_world_size()
    dist.all_gather_object(states, loader.state_dict())
    loader.close()
    theirs = titan_loader(config, dp, dp_rank)
    for step, _ in enumerate(theirs, 1):
        if step == SAVE_AFTER:
            break
    dcp.save({"dataloader": theirs}, checkpoint_id=folder / "theirs")
    info = {"dp": dp_rank, "tp": mesh["tp"].get_local_rank(), "fed": fed, "states": states}
    torch.save(info, folder / f"rank{dist.get_rank()}.pt")
    dist.barrier()
    dist.destroy_process_group()


def titan_loader(config: str | Path, dp: int, rank: int) -> Any:
    """torchtitan's ``ParallelAwareDataloader`` over this rank's StreamDataset."""
    stream = build_stream(load_config(config))
    dataset = StreamDataset(stream, RankSpec(rank, dp, GLOBAL_BATCH // dp))
    return parallel_aware_dataloader()(dataset, dp_rank=rank, dp_world_size=dp, batch_size=None)


@pytest.fixture(scope="module")
def saved_at_dp2(config: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Both loaders DCP-saved after SAVE_AFTER steps by 4 gloo ranks (DP 2 x TP 2)."""
    out = tmp_path_factory.mktemp("dp2")
    gloo.launch(__file__, "save", 4, config, out)
    return out


@pytest.mark.slow
def test_dcp_checkpoint_saved_at_dp2_resumes_at_dp4_and_dp1(
    config: Path, saved_at_dp2: Path
) -> None:
    expected = reference(config, SAVE_AFTER + MORE)
    runs = [torch.load(saved_at_dp2 / f"rank{rank}.pt") for rank in range(4)]
    states = runs[0]["states"]
    assert all(state == states[0] for state in states), "ranks saved different states"
    by_dp: dict[int, list[Fed]] = {}
    for run in runs:
        by_dp.setdefault(run["dp"], []).append(run["fed"])
    for dp_rank, (first, second) in by_dp.items():
        assert_batches_equal(first, second, f"tp peers of dp rank {dp_rank}")
    assert_batches_equal(expected[:SAVE_AFTER], merge([by_dp[0][0], by_dp[1][0]]), "DP 2")

    for dp in (4, 1):
        loaders = [build(config, dp, rank) for rank in range(dp)]
        for loader in loaders:
            dcp.load({"dataloader": loader}, checkpoint_id=saved_at_dp2 / "ours", no_dist=True)
            assert loader.state_dict() == states[0], "dcp.load gives back the saved state"
        resumed = merge([train_steps(loader, MORE) for loader in loaders])
        assert_batches_equal(expected[SAVE_AFTER:], resumed, f"resumed at DP {dp}")


@pytest.mark.slow
def test_torchtitans_per_rank_keys_fail_at_another_dp_degree(
    config: Path, saved_at_dp2: Path
) -> None:
    """Saved at DP 2: DP 4's rank 3 finds no ``dp_rank_3``; DP 1 stops at the degree check;
    at DP 2 it resumes (the failure is the change of degree)."""
    checkpoint = saved_at_dp2 / "theirs"
    with pytest.raises(
        CheckpointException, match=r"Missing key in checkpoint state_dict: dataloader\.dp_rank_3"
    ):
        dcp.load({"dataloader": titan_loader(config, 4, 3)}, checkpoint_id=checkpoint, no_dist=True)
    with pytest.raises(AssertionError, match="dp_degree is inconsistent"):
        dcp.load({"dataloader": titan_loader(config, 1, 0)}, checkpoint_id=checkpoint, no_dist=True)
    same = titan_loader(config, 2, 1)
    dcp.load({"dataloader": same}, checkpoint_id=checkpoint, no_dist=True)
    got = [
        {"input": b["input_ids"], "labels": b["labels"]}
        for _, b in zip(range(MORE), same, strict=False)
    ]
    want = [
        {"input": b["input"][4:], "labels": b["labels"][4:]}
        for b in reference(config, SAVE_AFTER + MORE)
    ]
    assert_batches_equal(want[SAVE_AFTER:], got, "torchtitan's loader at DP 2")


# -- with torchtitan installed: its own classes ---------------------------------------------------
def test_the_restatement_saves_what_torchtitans_loader_saves(config: Path) -> None:
    module = torchtitan_module("components.dataloader")
    if module is None:
        pytest.skip("torchtitan 0.3 is not installed")
    real = module.ParallelAwareDataloader
    states = []
    for kind in (real, RestatedParallelAwareDataloader):
        stream = build_stream(load_config(config))
        loader = kind(
            StreamDataset(stream, RankSpec(1, 2, 4)), dp_rank=1, dp_world_size=2, batch_size=None
        )
        for step, _ in enumerate(loader, 1):
            if step == 3:
                break
        states.append(loader.state_dict())
    assert sorted(states[0]) == sorted(states[1]) == ["dp_rank_1", "world_size"]
    assert states[0]["world_size"] == states[1]["world_size"] == 2
    assert states[0]["dp_rank_1"] == states[1]["dp_rank_1"]


def checkpoint_manager(folder: Path, loader: TorchtitanLoader) -> Any:
    """torchtitan 0.3's DCP ``CheckpointManager`` holding a real model, optimizer, scheduler."""
    checkpointer = torchtitan_module("components.checkpointer.dcp")
    assert checkpointer is not None
    from torchtitan.components.optimizer import OptimizersContainer
    from torchtitan.components.optimizer.lr_scheduler import LRSchedulersContainer
    from torchtitan.components.optimizer.optimizer import ParamGroupConfig

    model = torch.nn.Linear(2, 2)
    group = ParamGroupConfig(pattern=".*", optimizer_name="AdamW", optimizer_kwargs={"lr": 0.1})
    optimizers = OptimizersContainer.Config(param_groups=[group]).build(model_parts=[model])
    cfg = checkpointer.CheckpointManager.Config(
        enable=True, folder="checkpoint", interval=1, keep_latest_k=0, last_save_model_only=False
    )
    return checkpointer.CheckpointManager(
        cfg,
        dataloader=loader,
        model_parts=[model],
        optimizers=optimizers,
        lr_schedulers=LRSchedulersContainer(optimizers, lambda step: 1.0),
        states={},
        sd_adapter=None,
        base_folder=str(folder),
    )


def test_torchtitans_checkpoint_manager_resumes_at_another_dp_degree(
    config: Path, tmp_path: Path
) -> None:
    if torchtitan_module("components.checkpointer.dcp") is None:
        pytest.skip("torchtitan 0.3 is not installed")
    expected = reference(config, SAVE_AFTER + MORE)
    ranks = [build(config, 2, rank) for rank in range(2)]
    for loader in ranks:
        train_steps(loader, SAVE_AFTER)
    assert ranks[0].state_dict() == ranks[1].state_dict()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        manager = checkpoint_manager(tmp_path, ranks[0])
        manager.save(SAVE_AFTER)
        manager.close()
    for dp in (4, 1):
        loaders = [build(config, dp, rank) for rank in range(dp)]
        for loader in loaders:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                manager = checkpoint_manager(tmp_path, loader)
                assert manager.load(SAVE_AFTER)
                manager.close()
        resumed = merge([train_steps(loader, MORE) for loader in loaders])
        assert_batches_equal(expected[SAVE_AFTER:], resumed, f"torchtitan checkpoint, DP {dp}")


if __name__ == "__main__":
    worker(*sys.argv[2:4])
