"""Every format as a loader source, mixed in one config: masks from each format's own truth."""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from streamload import build_loader
from streamload.testing import assert_resumes_exactly
from streamload.tools.convert import open_writer

SEQ_LEN = 8
OFFSET = 1000
"""Source ``i`` holds token ids in ``[i * OFFSET + 1, (i + 1) * OFFSET)``, so ids name it."""

FORMATS = {
    "megatron": "data",
    "modalities": "data.pbin",
    "dolma": "part-0-00000.npy",
    "datatrove": "data_00000_unshuffled.ds",
}


def documents(index: int, count: int, seed: int) -> list[np.ndarray]:
    """Random documents of source ``index`` (no EOS: indexed formats know their boundaries)."""
    rng = np.random.default_rng(seed)
    lengths = rng.integers(1, 20, size=count)
    return [rng.integers(index * OFFSET + 1, (index + 1) * OFFSET, size=n) for n in lengths]


def write_sources(root: Path) -> tuple[dict[str, Any], dict[str, list[np.ndarray]]]:
    """One source per indexed format plus an EOS-delimited NPY source; a mixture config."""
    written: dict[str, list[np.ndarray]] = {}
    sources = []
    for index, (fmt, name) in enumerate(FORMATS.items(), start=1):
        folder = root / fmt
        folder.mkdir()
        docs = documents(index, 60, seed=index)
        with open_writer(fmt, str(folder / name), np.dtype(np.uint16)) as writer:
            for doc in docs:
                writer.add_document(doc)
        written[fmt] = docs
        sources.append({"name": fmt, "path": str(folder), "weight": 1.0, "dtype": "uint16"})
    eos_docs = [np.append(d, 0) for d in documents(5, 60, seed=5)]
    (root / "npy").mkdir()
    np.save(root / "npy" / "shard_00000.npy", np.concatenate(eos_docs).astype(np.uint16))
    written["npy"] = eos_docs
    sources.append({"name": "npy", "path": str(root / "npy"), "weight": 1.0})
    config = {
        "seq_len": SEQ_LEN, "seed": 7, "eos_token_id": 0, "global_batch_size": 10,
        "sources": sources, "packing": {"masks": True},
    }  # fmt: skip
    return config, written


@pytest.fixture(scope="module")
def mixed(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict[str, Any], dict]:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return write_sources(tmp_path_factory.mktemp("mix"))


def doc_ids_of(window: np.ndarray, starts: set[int], first: int) -> list[int]:
    """Expected doc_ids of a window whose first token is stream token ``first``."""
    ids, current = [], 0
    for t in range(SEQ_LEN):
        if t > 0 and first + t in starts:
            current += 1
        ids.append(current)
    return ids


def test_every_format_feeds_the_mixture_with_its_own_documents(mixed) -> None:
    config, written = mixed
    loader = build_loader(config, batch_size=10)
    names = list(written)
    seen = set()
    streams = {n: np.concatenate(docs) for n, docs in written.items()}
    bounds = {n: set(np.cumsum([len(d) for d in docs]).tolist()) for n, docs in written.items()}
    for step, batch in enumerate(loader):
        for row in range(10):
            inputs = batch["input_ids"][row].numpy()
            source = names[int(inputs.max()) // OFFSET - 1]
            seen.add(source)
            stream = streams[source]
            first = _find(stream, inputs)
            assert first is not None, f"{source}: window not found in its documents"
            want = doc_ids_of(inputs, bounds[source], first)
            assert batch["doc_ids"][row].tolist() == want, (step, row, source)
        if step == 20:
            break
    assert seen == set(names)


def _find(stream: np.ndarray, window: np.ndarray) -> int | None:
    """Offset of ``window`` in ``stream`` (windows start at multiples of SEQ_LEN)."""
    for start in range(0, len(stream) - SEQ_LEN, SEQ_LEN):
        if np.array_equal(stream[start : start + SEQ_LEN], window):
            return start
    return None


def test_mixed_formats_resume_exactly(mixed) -> None:
    config, _ = mixed
    cfg = dict(config, sampling={"num_samples": 200})
    assert_resumes_exactly(lambda: build_loader(cfg, batch_size=10), passes=2)


def test_masks_never_cross_a_format_documents(mixed) -> None:
    """Labels are -100 exactly where the next token opens a new document."""
    config, _ = mixed
    batch = next(iter(build_loader(config, batch_size=10)))
    starts = torch.zeros_like(batch["doc_ids"], dtype=torch.bool)
    starts[:, 1:] = batch["doc_ids"][:, 1:] != batch["doc_ids"][:, :-1]
    masked = batch["labels"][:, :-1] == -100
    assert torch.equal(masked, starts[:, 1:])
