"""datatrove's own ``.ds.loss`` (``tests/data/datatrove_loss``) read back exactly: through the
catalog's mask discovery, the mask reader, and a loader whose labels are -100 exactly where
the mask says a token is not trained."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest
import torch

import streamload
from streamload.catalog.sources import describe_source
from streamload.config import SourceConfig
from streamload.formats.datatrove.datatrove import DatatroveWriter
from streamload.formats.loss_mask import mask_shard
from streamload.formats.registry import open_shard

DATA = Path(__file__).resolve().parents[1] / "data" / "datatrove_loss"
DS = DATA / "loss_00000_unshuffled.ds"
DOCUMENTS = [
    ([7, 8, 9, 10, 11, 0], [1, 1, 1, 1, 1, 1]),
    ([12, 13, 14, 15, 16, 0], [1, 0, 0, 1, 1, 1]),
    ([22, 23, 24, 25, 0], [0, 0, 1, 1, 1]),
    ([32, 33], [1, 1]),  # no_loss_ranges reached the end: datatrove cropped the rest
    ([42, 43, 44, 45, 46, 47, 0], [0, 1, 0, 1, 1, 1, 1]),
]
"""What ``make.py`` printed (README.md)."""
TOKENS = np.array([t for doc, _ in DOCUMENTS for t in doc])
MASK = np.array([m for _, mask in DOCUMENTS for m in mask], dtype=np.uint8)


def test_fixture_holds_what_the_readme_says() -> None:
    assert np.array_equal(np.fromfile(DS, dtype="<u2"), TOKENS)
    assert np.array_equal(np.fromfile(f"{DS}.loss", dtype="u1"), MASK)
    ends = np.cumsum([len(doc) for doc, _ in DOCUMENTS])
    assert np.array_equal(np.fromfile(f"{DS}.index", dtype="<u8"), ends)


def test_catalog_finds_and_reads_the_mask() -> None:
    source = SourceConfig(name="dt", path=str(DATA), format="auto")
    (info,) = describe_source(source).shards
    assert info.format == "datatrove" and info.loss_mask == f"{DS}.loss"
    mask = open_shard(mask_shard(info))
    assert np.array_equal(np.asarray(mask.tokens(0, info.num_tokens)), MASK)
    assert np.array_equal(np.asarray(mask.tokens(5, 13)), MASK[5:13])


def test_our_writer_writes_the_same_bytes(tmp_path: Path) -> None:
    out = tmp_path / DS.name
    with DatatroveWriter(out, "tok300.json", 2, save_loss_metadata=True) as writer:
        for doc, mask in DOCUMENTS:
            writer.add_document(np.array(doc), loss_mask=np.array(mask, dtype=bool))
    for suffix in ("", ".index", ".metadata", ".loss"):
        assert Path(f"{out}{suffix}").read_bytes() == Path(f"{DS}{suffix}").read_bytes(), suffix


@pytest.mark.filterwarnings("ignore:each pass")
@pytest.mark.parametrize("seq_len", [3, 4, 7])
def test_loader_labels_follow_the_loss_bytes(tmp_path: Path, seq_len: int) -> None:
    """Concat mode: labels[t] = token s+t+1, or -100 where ``.ds.loss[s+t+1] == 0``; the
    reference comes from the ``.ds.loss`` bytes alone."""
    folder = tmp_path / "dt"
    shutil.copytree(DATA, folder, ignore=shutil.ignore_patterns("*.py", "*.md", "*.json"))
    loss = np.fromfile(folder / f"{DS.name}.loss", dtype="u1")
    cfg = {"seq_len": seq_len, "seed": 3, "sources": [{"name": "dt", "path": str(folder)}]}
    loader = streamload.build_loader(cfg, batch_size=2)
    starts_of = streamload.SampleStream.from_config(streamload.load_config(cfg)).window_starts
    rows = 0
    for batch in loader:
        for row, start in enumerate(starts_of(0, batch["sample_index"].numpy()).tolist()):
            target = TOKENS[start + 1 : start + seq_len + 1]
            trained = loss[start + 1 : start + seq_len + 1] != 0
            expected = np.where(trained, target, -100)
            assert torch.equal(batch["input_ids"][row], torch.from_numpy(TOKENS[start:][:seq_len]))
            assert torch.equal(batch["labels"][row], torch.from_numpy(expected))
            rows += 1
    assert rows == len(loader) * 2 == (len(TOKENS) - 1) // seq_len // 2 * 2
