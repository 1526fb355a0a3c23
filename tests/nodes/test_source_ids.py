"""``batch["source_ids"]``: each sample's source, in every mode and on every rank, equal to
the plan's allocation; ``loader.source_names`` names them; per-source losses from them."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torchdata.stateful_dataloader import StatefulDataLoader

import streamload
from streamload.ops.source_losses import mean_loss_by_source, source_loss_sums
from streamload.plan.partition import RankSpec
from tests.helpers.corpus_factory import Corpus
from tests.streams.test_megatron import GOLDENS, config_of
from tests.test_mixture_loader import SCHEDULE, SIZES, WEIGHTS, mixture, write_sources


def expected_sources(loader: Any, batches: list[dict[str, torch.Tensor]]) -> list[np.ndarray]:
    """The plan's source of every delivered sample (pass 0), from the stream alone."""
    out = []
    for batch in batches:
        src, _ = loader.stream.locate(0, batch["sample_index"].numpy())
        out.append(src.astype(np.int64))
    return out


def check(loader: Any, batches: list[dict[str, torch.Tensor]]) -> None:
    assert batches
    for batch, want in zip(batches, expected_sources(loader, batches), strict=True):
        assert batch["source_ids"].dtype == torch.int64
        assert batch["source_ids"].tolist() == want.tolist()


@pytest.mark.parametrize(("world", "workers"), [(1, 0), (2, 2)])
def test_mixture_batches_carry_the_plans_sources(tmp_path: Path, world: int, workers: int) -> None:
    cfg = mixture(write_sources(tmp_path, SIZES), WEIGHTS, SCHEDULE, sampling={"num_samples": 96})
    seen = set()
    for rank in range(world):
        with streamload.build_loader(
            cfg, batch_size=12 // world, rank=rank, world_size=world, num_workers=workers
        ) as loader:
            assert loader.source_names == ("a", "b", "c")
            batches = list(loader)
            check(loader, batches)
            seen |= {int(i) for b in batches for i in b["source_ids"]}
    assert seen == {0, 1, 2}


def test_packed_and_single_source_batches(make_corpus: Callable[..., Corpus]) -> None:
    corpus = make_corpus([300, 200], mean_doc_len=9.0)
    for cfg in (
        corpus.config(seq_len=8),
        corpus.config(seq_len=8, pad_token_id=1, sampling={"mode": "packed"}),
    ):
        with streamload.build_loader(cfg, batch_size=4) as loader:
            batches = list(loader)
        check(loader, batches)
        assert all(not b["source_ids"].any() for b in batches)  # one source: all 0


def test_megatron_blend_batches_carry_the_dataset_index(
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    cfg = config_of("blend_train", GOLDENS.write_datasets(tmp_path_factory.mktemp("blend")))
    with streamload.build_loader(cfg, batch_size=4) as loader:
        batches = list(loader)
    check(loader, batches)
    assert loader.source_names == ("A", "B")
    assert {int(i) for b in batches for i in b["source_ids"]} == {0, 1}


def test_stream_dataset_batches_carry_sources(tmp_path: Path) -> None:
    cfg = mixture(write_sources(tmp_path, SIZES), WEIGHTS, sampling={"num_samples": 48})
    stream = streamload.build_stream(streamload.load_config(cfg))
    dataset = streamload.StreamDataset(stream, RankSpec(0, 1, 12))
    assert dataset.source_names == ("a", "b", "c")
    batches = list(StatefulDataLoader(dataset, batch_size=None, num_workers=2))
    check(dataset, batches)


def test_per_source_losses_of_a_training_step(tmp_path: Path) -> None:
    """The helper's sums equal a per-sample loop over the batch."""
    cfg = mixture(write_sources(tmp_path, SIZES), WEIGHTS, sampling={"num_samples": 24})
    with streamload.build_loader(cfg, batch_size=12) as loader:
        batch = next(iter(loader))
        names = loader.source_names
    labels = batch["labels"].clone()
    labels[::3, :2] = -100  # some untrained labels
    logits = torch.randn(*labels.shape, 17, generator=torch.Generator().manual_seed(0))
    losses = F.cross_entropy(logits.flatten(0, 1), labels.flatten() % 17, reduction="none").view(
        labels.shape
    )
    sums, counts = source_loss_sums(losses, labels, batch["source_ids"], len(names))
    want_sums, want_counts = [0.0] * len(names), [0] * len(names)
    for row, source in enumerate(batch["source_ids"].tolist()):
        keep = labels[row] != -100
        want_sums[source] += float(losses[row][keep].sum())
        want_counts[source] += int(keep.sum())
    assert torch.allclose(sums, torch.tensor(want_sums), rtol=1e-6)
    assert counts.tolist() == [float(c) for c in want_counts]
    means = mean_loss_by_source(sums, counts, names)
    assert set(means) == {n for n, c in zip(names, want_counts, strict=True) if c}


def test_per_source_losses_refuse_mismatched_inputs() -> None:
    losses, labels = torch.zeros(2, 3), torch.zeros(2, 3, dtype=torch.int64)
    with pytest.raises(ValueError, match=r"source_ids \(3,\): expected \[b\] = \[2\]"):
        source_loss_sums(losses, labels, torch.zeros(3, dtype=torch.int64), 1)
    with pytest.raises(ValueError, match=r"source_ids outside \[0, 2\)"):
        source_loss_sums(losses, labels, torch.tensor([0, 2]), 2)
    with pytest.raises(ValueError, match=r"expected the same \[b, L\] shape"):
        source_loss_sums(losses, labels[:, :2], torch.tensor([0, 1]), 2)
