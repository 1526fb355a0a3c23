"""Evaluation loaders (``build_loader(..., split=...)``): every sample of the split exactly once
over all ranks, the last global batch padded and marked, exact resumption inside a pass.

The ranks of one data-parallel group are simulated by building one loader per rank with
explicit ``rank``/``world_size`` (the split across ranks is a pure function of them);
``test_gloo_ranks_cover_the_split_once`` runs real ``torch.distributed`` gloo processes.
"""

from __future__ import annotations

import json
import math
import sys
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from torchdata.stateful_dataloader import StatefulDataLoader

from streamload import LoaderOptions, RankSpec, SampleStream, StreamDataset, build_loader
from streamload.config import load_config
from streamload.errors import ConfigError, StateError
from streamload.loader import evaluation_stream
from streamload.testing import assert_batches_equal, assert_resumes_exactly, collect_global_batches
from tests.helpers import gloo
from tests.helpers.shards import write_megatron_documents

pytestmark = [
    pytest.mark.filterwarnings("ignore:each pass of"),
    pytest.mark.filterwarnings("ignore:.set_vital. is deprecated"),
]

MODES = ["concat", "packed", "padded"]


def config_of(corpus: Any, mode: str, **sampling: Any) -> dict[str, Any]:
    return corpus.config(
        pad_token_id=1,
        packing={"masks": True},
        sampling={"mode": mode, "split": "70,20,10", **sampling},
    )


def rank_batches(cfg: dict[str, Any], world: int, b: int, **kwargs: Any) -> list[list[dict]]:
    """Every rank's batches of one evaluation pass."""
    return [
        list(build_loader(cfg, batch_size=b, rank=r, world_size=world, **kwargs))
        for r in range(world)
    ]


def reference_tokens(cfg: dict[str, Any], split: str, ids: np.ndarray) -> np.ndarray:
    """Samples ``ids`` of the unshuffled training stream of the same split: the evaluation
    pass is that stream's first epoch, in order."""
    sampling = cfg["sampling"] | {"split_name": split, "shuffle": False}
    stream = SampleStream.from_config(load_config(cfg | {"sampling": sampling}))
    return stream.read(0, ids)[0]


@pytest.fixture(scope="module")
def corpus(make_corpus: Callable) -> Any:
    return make_corpus([700, 500, 900], mean_doc_len=14.0)


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize(("world", "b"), [(1, 3), (2, 4), (3, 2), (4, 5)])
def test_every_sample_of_the_split_once_over_all_ranks(
    corpus: Any, mode: str, world: int, b: int
) -> None:
    cfg = config_of(corpus, mode)
    per_rank = rank_batches(cfg, world, b, split="valid")
    length = build_loader(cfg, batch_size=b, split="valid").stream.pass_length
    assert [len(batches) for batches in per_rank] == [math.ceil(length / (world * b))] * world
    steps = collect_global_batches([iter(batches) for batches in per_rank])
    index = torch.cat([s["sample_index"] for s in steps])
    mask = torch.cat([s["sample_mask"] for s in steps])
    labels = torch.cat([s["labels"] for s in steps])
    inputs = torch.cat([s["input_ids"] for s in steps])
    # in order over the ranks: samples 0 .. P-1, then the padding rows of the last batch
    assert index[:length].tolist() == list(range(length)) and bool(mask[:length].all())
    assert (index[length:] == -1).all() and not mask[length:].any()
    assert (labels[length:] == -100).all() and index.numel() - length < world * b
    want = reference_tokens(cfg, "valid", np.arange(length))
    np.testing.assert_array_equal(inputs[:length].numpy(), want[:, :-1])
    np.testing.assert_array_equal(
        inputs[length:].numpy(), np.repeat(want[-1:, :-1], index.numel() - length, 0)
    )
    assert (torch.cat([s["source_ids"] for s in steps]) == 0).all()


def test_concat_valid_samples_are_the_windows_of_the_valid_tokens(corpus: Any) -> None:
    """Written out from the corpus: window k of the valid split is tokens
    ``[lo + k·L, lo + k·L + L + 1)`` of the source's stream."""
    cfg = config_of(corpus, "concat")
    loader = build_loader(cfg, batch_size=4, split="valid")
    lo, hi = loader.stream.sources[0].split.span
    batches = list(loader)
    rows = torch.cat([b["input_ids"] for b in batches])[
        torch.cat([b["sample_mask"] for b in batches])
    ]
    seq = cfg["seq_len"]
    starts = range(lo, hi - seq, seq)
    want = np.stack([corpus.stream[s : s + seq] for s in starts])
    np.testing.assert_array_equal(rows.numpy(), want)


def test_training_loaders_drop_and_never_pad(corpus: Any) -> None:
    cfg = config_of(corpus, "concat")
    train = build_loader(cfg, batch_size=7)
    batches = list(train)
    assert "sample_mask" not in batches[0]
    assert len(batches) == train.stream.pass_length // 7
    assert all((b["sample_index"] >= 0).all() for b in batches)


@pytest.mark.parametrize("mode", MODES)
def test_an_evaluation_pass_resumes_exactly(corpus: Any, mode: str) -> None:
    """Ordered batches from every save point, over two passes, also with workers."""
    cfg = config_of(corpus, mode)
    opts = LoaderOptions(chunk_batches=2)

    def make(workers: int) -> Callable[[], Any]:
        return lambda: build_loader(
            cfg, batch_size=5, rank=1, world_size=2, split="test", num_workers=workers, options=opts
        )

    assert_resumes_exactly(make(0), passes=2, make_resumed=make(2))


def test_a_resumed_evaluation_may_change_the_world(corpus: Any) -> None:
    """A state saved on 2 ranks continues on 3 at the same sample, with the padding of the
    new global batch."""
    cfg = config_of(corpus, "packed")
    two = [build_loader(cfg, batch_size=3, rank=r, world_size=2, split="valid") for r in range(2)]
    first = collect_global_batches(two, steps=2)
    state = two[0].state_dict()
    three = [build_loader(cfg, batch_size=2, rank=r, world_size=3, split="valid") for r in range(3)]
    for loader in three:
        loader.load_state_dict(state)
    rest = collect_global_batches(three)
    index = torch.cat([s["sample_index"] for s in first + rest])
    length = three[0].stream.pass_length
    assert index[:length].tolist() == list(range(length)) and (index[length:] == -1).all()


def test_several_sources_are_evaluated_one_after_another(make_corpus: Callable) -> None:
    """A mixture's weights, schedule and num_samples decide nothing: each source's split
    once, in config order, its samples marked by source_ids."""
    a, b = make_corpus([600], seed=1), make_corpus([400, 300], seed=2)
    cfg = a.config(
        global_batch_size=4,
        sampling={"split": "80,20", "num_samples": 10_000},
        sources=[
            {"name": "a", "path": str(a.folder), "dtype": a.dtype, "weight": 0.9},
            {"name": "b", "path": str(b.folder), "dtype": b.dtype, "weight": 0.1},
        ],
        schedule=[{"start_step": 1, "weights": {"a": 0.5, "b": 0.5}}],
    )
    loader = build_loader(cfg, batch_size=2, world_size=2, rank=0, split="valid")
    counts = [s.num_windows for s in loader.stream.sources]
    steps = collect_global_batches(
        [build_loader(cfg, batch_size=2, world_size=2, rank=r, split="valid") for r in range(2)]
    )
    sources = torch.cat([s["source_ids"] for s in steps])
    mask = torch.cat([s["sample_mask"] for s in steps])
    assert sources[mask].tolist() == [0] * counts[0] + [1] * counts[1]
    state = loader.state_dict()
    assert "schedule" not in state["fingerprint"] and state["fingerprint"]["evaluation"] is True


def test_a_shuffled_evaluation_is_the_first_epochs_order(corpus: Any) -> None:
    cfg = config_of(corpus, "concat")
    shuffled = torch.cat(
        [b["input_ids"] for b in build_loader(cfg, batch_size=4, split="valid", shuffle=True)]
    )
    plain = torch.cat([b["input_ids"] for b in build_loader(cfg, batch_size=4, split="valid")])
    train_cfg = cfg | {"sampling": cfg["sampling"] | {"split_name": "valid"}}
    stream = SampleStream.from_config(load_config(train_cfg))  # shuffled, epoch 0
    length = stream.pass_length
    np.testing.assert_array_equal(
        shuffled[:length].numpy(), stream.read(0, np.arange(length))[0][:, :-1]
    )
    assert not torch.equal(shuffled[:length], plain[:length])


@pytest.mark.parametrize(
    ("kwargs", "sampling", "match"),
    [
        ({"shuffle": True}, {}, r"shuffle = True applies only to an evaluation loader"),
        ({"split": "valid"}, {"split": None}, r"split_name = 'valid' needs sampling\.split"),
        ({"split": "dev"}, {}, r"split = 'dev' is not one of 'train', 'valid', 'test'"),
        ({"split": "test"}, {"split": "9,1"}, r"leaves its test split empty"),
    ],
)
def test_bad_evaluation_arguments(
    corpus: Any, kwargs: dict[str, Any], sampling: dict[str, Any], match: str
) -> None:
    cfg = config_of(corpus, "concat", **sampling)
    if cfg["sampling"]["split"] is None:
        del cfg["sampling"]["split"]
    with pytest.raises(ConfigError, match=match):
        build_loader(cfg, batch_size=2, **kwargs)


def test_an_evaluation_state_is_not_a_training_state(corpus: Any) -> None:
    cfg = config_of(corpus, "concat", split_name="valid")
    train = build_loader(cfg, batch_size=2)
    evaluation = build_loader(cfg, batch_size=2, split="valid")
    with pytest.raises(StateError, match=r"evaluation: saved None, now True"):
        evaluation.load_state_dict(train.state_dict())


def test_stream_dataset_over_an_evaluation_stream(corpus: Any) -> None:
    """StatefulDataLoader over StreamDataset(evaluation_stream(...)): the loader's batches,
    the padded last one included, and exact resumption from every step."""
    cfg = config_of(corpus, "padded")
    expected = list(build_loader(cfg, batch_size=4, rank=1, world_size=3, split="valid"))

    def make() -> StatefulDataLoader:
        stream = evaluation_stream(cfg, "valid")
        return StatefulDataLoader(StreamDataset(stream, RankSpec(1, 3, 4)), batch_size=None)

    assert_batches_equal(expected, list(make()))
    assert_resumes_exactly(make, passes=2)


@pytest.fixture(scope="module")
def megatron_config(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    rng = np.random.default_rng(3)
    lengths = rng.integers(3, 40, size=120).tolist()
    tokens = rng.integers(1, 500, size=sum(lengths)).astype(np.uint16)
    path = write_megatron_documents(tmp_path_factory.mktemp("meg") / "d", tokens, lengths)
    sampling = {"mode": "megatron", "split": "80,20,0", "num_samples": 23}
    return {"seq_len": 8, "seed": 1, "sources": [{"name": "m", "path": str(path)}],
            "sampling": sampling}  # fmt: skip


def test_megatron_valid_samples_once_in_megatrons_order(megatron_config: dict[str, Any]) -> None:
    steps = collect_global_batches(rank_batches(megatron_config, 2, 3, split="valid"))
    index = torch.cat([s["sample_index"] for s in steps])
    mask = torch.cat([s["sample_mask"] for s in steps])
    valid = megatron_config | {"sampling": megatron_config["sampling"] | {"split_name": "valid"}}
    stream = SampleStream.from_config(load_config(valid))
    length = stream.pass_length
    assert length == 23 and len(steps) == 4  # ceil(23 / 6)
    assert index[mask].tolist() == list(range(length)) and (index[~mask] == -1).all()
    inputs = torch.cat([s["input_ids"] for s in steps])[mask]
    np.testing.assert_array_equal(inputs.numpy(), stream.read(0, np.arange(length))[0][:, :-1])


# -- real ranks ------------------------------------------------------------------------------


def worker(config: str, out: str) -> None:
    """One gloo rank: its batches of an evaluation pass, gathered on rank 0."""
    import torch.distributed as dist

    warnings.simplefilter("ignore")
    dist.init_process_group("gloo", init_method="env://")
    loader = build_loader(config, batch_size=3, split="valid")
    batches = [{k: v.clone() for k, v in batch.items()} for batch in loader]
    gathered: list[Any] = [None] * dist.get_world_size()
    dist.all_gather_object(gathered, batches)
    if dist.get_rank() == 0:
        torch.save(gathered, Path(out) / "gathered.pt")
    dist.barrier()
    dist.destroy_process_group()


def test_gloo_ranks_cover_the_split_once(corpus: Any, tmp_path: Path) -> None:
    """Three real ranks (rank and world from torch.distributed): the same number of batches
    each, every valid sample once with sample_mask true, the rest padding."""
    config = tmp_path / "c.json"
    config.write_text(json.dumps(config_of(corpus, "packed")))
    gloo.launch(__file__, "worker", 3, config, tmp_path)
    per_rank = torch.load(tmp_path / "gathered.pt", weights_only=True)
    assert len({len(batches) for batches in per_rank}) == 1
    steps = collect_global_batches([iter(batches) for batches in per_rank])
    index = torch.cat([s["sample_index"] for s in steps])
    mask = torch.cat([s["sample_mask"] for s in steps])
    length = int(mask.sum())
    assert index[:length].tolist() == list(range(length)) and (index[length:] == -1).all()
    assert length == build_loader(config, batch_size=3, split="valid").stream.pass_length


if __name__ == "__main__":
    phase, *args = sys.argv[1:]
    worker(*args) if phase == "worker" else sys.exit(f"unknown phase {phase}")
