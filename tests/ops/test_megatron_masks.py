"""Megatron's ``reset_position_ids`` / ``reset_attention_mask`` / ``eod_mask_loss`` semantics.

Checked against ``GPTDataset.__getitem__`` outputs saved by
``tests/golden/make_megatron_goldens.py`` (``masks_*.npz``), and live against megatron-core's
``_get_ltor_masks_and_position_ids`` when it is importable. Our segments are sparse
(``doc_ids``/``cu_seqlens``); Megatron's dense mask is rebuilt here only to compare.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import torch

from streamload import build_loader
from streamload.ops.masks import starts_from_eos
from streamload.ops.megatron_masks import switched_fields
from tests.streams.test_megatron import GOLDENS, config_of, load

FLAGS = [(a, b, c) for a in (False, True) for b in (False, True) for c in (False, True)]


@pytest.fixture(scope="module")
def prefixes(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    return GOLDENS.write_datasets(tmp_path_factory.mktemp("megatron_mask_data"))


def allowed(doc_ids: np.ndarray) -> np.ndarray:
    """Dense ``[n, L, L]`` "may attend" from segments: causal and inside one segment."""
    length = doc_ids.shape[1]
    causal = np.tril(np.ones((length, length), dtype=bool))
    return causal[None] & (doc_ids[:, :, None] == doc_ids[:, None, :])


def check_against(
    ours: dict[str, np.ndarray], labels: np.ndarray, megatron: dict[str, np.ndarray]
) -> None:
    np.testing.assert_array_equal(ours["position_ids"], megatron["position_ids"])
    loss = megatron["loss_mask"] > 0
    np.testing.assert_array_equal(labels == -100, ~loss)
    np.testing.assert_array_equal(labels[loss], megatron["labels"][loss])
    np.testing.assert_array_equal(allowed(ours["doc_ids"]), ~megatron["attention_mask"][:, 0])
    # cu_seqlens are the segment starts of doc_ids, padded with L
    for row, cu in zip(ours["doc_ids"], ours["cu_seqlens"], strict=True):
        starts = np.flatnonzero(np.diff(row, prepend=-1))
        length = row.shape[0]
        assert cu.tolist() == [*starts.tolist(), *[length] * (length + 1 - starts.size)]


@pytest.mark.parametrize("name", ["masks_all", "masks_positions_only", "masks_attention_loss"])
def test_loader_masks_equal_megatron(name: str, prefixes: dict[str, str]) -> None:
    meta, arrays = load(name)
    position, attention, loss = meta["flags"]
    cfg = config_of(name, prefixes) | {"eos_token_id": meta["eod"]}
    cfg["packing"] = {"masks": True, "reset_position_ids": position,
                      "reset_attention_mask": attention, "eod_mask_loss": loss}  # fmt: skip
    batch = next(iter(build_loader(cfg, batch_size=meta["num_samples"])))
    ours = {k: v.numpy() for k, v in batch.items()}
    np.testing.assert_array_equal(ours["input_ids"], arrays["tokens"])
    assert (arrays["tokens"] == meta["eod"]).sum() > 5  # the samples do hold documents
    check_against(ours, ours["labels"], arrays)


def test_without_switches_there_are_no_mask_outputs(prefixes: dict[str, str]) -> None:
    cfg = config_of("masks_all", prefixes)
    batch = next(iter(build_loader(cfg, batch_size=4)))
    assert sorted(batch) == ["input_ids", "labels", "sample_index", "source_ids"]


def test_live_ltor_masks() -> None:
    pytest.importorskip("megatron.core")
    from megatron.core.datasets.gpt_dataset import _get_ltor_masks_and_position_ids

    rng = np.random.default_rng(5)
    for trial in range(40):
        length, eod = int(rng.integers(2, 40)), 3
        text = rng.integers(0, 3 + int(rng.integers(1, 6)), (4, length + 1))
        flags = FLAGS[trial % len(FLAGS)]
        labels = text[:, 1:].astype(np.int64)
        ours = switched_fields(starts_from_eos(text, eod), labels, flags)
        rows: dict[str, list[Any]] = {"position_ids": [], "loss_mask": [], "attention_mask": []}
        for row in text:
            mask, loss, pos = _get_ltor_masks_and_position_ids(
                torch.from_numpy(row[:-1]), eod, *flags, create_attention_mask=True
            )
            rows["attention_mask"].append(mask.numpy())
            rows["loss_mask"].append(loss.numpy())
            rows["position_ids"].append(pos.numpy())
        megatron = {k: np.stack(v) for k, v in rows.items()} | {"labels": text[:, 1:]}
        check_against(ours, labels, megatron)


def test_switched_fields_trace() -> None:
    """A hand-checked trace: EOD = 0, tokens ``[5, 0, 7, 8, 0, 9, 4]``."""
    text = np.array([[5, 0, 7, 8, 0, 9, 4]])
    starts = starts_from_eos(text, 0)
    labels = text[:, 1:].astype(np.int64)
    out = switched_fields(starts, labels, (True, False, True))
    assert out["position_ids"].tolist() == [[0, 1, 0, 1, 2, 0]]
    assert out["doc_ids"].tolist() == [[0] * 6]
    assert out["cu_seqlens"].tolist() == [[0, 6, 6, 6, 6, 6, 6]]
    assert labels.tolist() == [[0, -100, 8, 0, -100, 4]]
    labels = text[:, 1:].astype(np.int64)
    out = switched_fields(starts, labels, (False, True, False))
    assert out["position_ids"].tolist() == [[0, 1, 2, 3, 4, 5]]
    assert out["cu_seqlens"].tolist() == [[0, 2, 5, 6, 6, 6, 6]]
    assert labels.tolist() == [[0, 7, 8, 0, 9, 4]]
