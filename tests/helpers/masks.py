"""Shared check: a loader over indexed documents delivers masks from those documents."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

import streamload


def expected_fields(stream: np.ndarray, doc_starts: set[int], start: int, length: int):
    """Reference masks of one window from the document starts (t > 0 opens a document)."""
    window = stream[start : start + length + 1].astype(np.int64)
    opens = np.array([t > 0 and start + t in doc_starts for t in range(length + 1)])
    doc_ids = np.cumsum(opens[:length])
    last_open = np.maximum.accumulate(np.where(opens[:length], np.arange(length), 0))
    labels = np.where(opens[1:], -100, window[1:])
    return window[:length], labels, doc_ids, np.arange(length) - last_open


def assert_masks_follow_documents(cfg: dict[str, Any], docs: Sequence[np.ndarray]) -> None:
    """Every delivered row (batch 4) equals the reference built from ``docs`` in order."""
    stream = np.concatenate(docs)
    doc_starts = {int(s) for s in np.cumsum([0, *map(len, docs)])[:-1]}
    length = cfg["seq_len"]
    loader = streamload.build_loader(cfg, batch_size=4)
    starts_of = streamload.SampleStream.from_config(streamload.load_config(cfg)).window_starts
    seen = 0
    for batch in loader:
        for row, start in enumerate(starts_of(0, batch["sample_index"].numpy()).tolist()):
            inputs, labels, doc_ids, positions = expected_fields(stream, doc_starts, start, length)
            assert torch.equal(batch["input_ids"][row], torch.from_numpy(inputs))
            assert torch.equal(batch["labels"][row], torch.from_numpy(labels))
            assert torch.equal(batch["doc_ids"][row], torch.from_numpy(doc_ids))
            assert torch.equal(batch["position_ids"][row], torch.from_numpy(positions))
            seen += 1
    assert seen == len(loader) * 4 > 0
