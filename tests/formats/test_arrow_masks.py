"""Loss-mask and id columns of Arrow and Parquet token files: the ``datasets`` fixtures read
back as the tool reads them, every mode's labels against references made from the mask column
alone, exact resumption, and the strict errors (type, lengths, missing column)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import torch

import streamload
from streamload import build_loader
from streamload.catalog.sources import SourceCatalog, describe_source
from streamload.config import SourceConfig
from streamload.errors import FormatError
from streamload.formats import open_shard
from streamload.formats.loss_mask import LossMaskWriter
from streamload.formats.mask_names import mask_path_for
from streamload.formats.megatron.megatron import MegatronWriter
from streamload.testing import assert_resumes_exactly, collect_global_batches
from streamload.tools.masks import mask_reader
from tests.formats.test_arrow import loader_config
from tests.helpers.paths import TESTS
from tests.helpers.shards import documents

MASKED = TESTS / "fixtures" / "hf" / "masked"
EXPECTED: dict[str, Any] = json.loads((MASKED / "expected.json").read_text())["files"]
SEQ_LEN = 8


def describe(path: Path | str, **kw: Any) -> SourceCatalog:
    return describe_source(SourceConfig(name="m", path=str(path), **kw))


def sft_rows(count: int = 40, seed: int = 0) -> tuple[list[list[int]], list[list[int]]]:
    """Documents of 1..12 tokens ending in EOS 0, and prompt-style masks (random 0/1 flags)."""
    rng = np.random.default_rng(seed)
    docs, masks = [], []
    for _ in range(count):
        n = int(rng.integers(1, 13))
        docs.append([*rng.integers(2, 300, size=n - 1).tolist(), 0])
        masks.append(rng.integers(0, 2, size=n).tolist())
    return docs, masks


def table(
    docs: list[list[int]], masks: list[Any], name: str = "loss_mask", kind: Any = None
) -> pa.Table:
    ids = pa.array([f"d{i}" for i in range(len(docs))])
    tokens = pa.array(docs, pa.list_(pa.int32()))
    flags = pa.array(masks, kind or pa.list_(pa.int8()))
    return pa.table({"id": ids, "input_ids": tokens, name: flags})


def write(path: Path, data: pa.Table, rows: int = 3) -> Path:
    """An Arrow stream of record batches of ``rows`` rows, or Parquet row groups of them."""
    path.parent.mkdir(parents=True, exist_ok=True)
    if path.suffix == ".parquet":
        pq.write_table(data, path, row_group_size=rows)
        return path
    with pa.ipc.new_stream(str(path), data.schema) as writer:
        for batch in data.to_batches(max_chunksize=rows):
            writer.write_batch(batch)
    return path


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_datasets_fixtures_read_back_as_the_tool_reads_them(name: str) -> None:
    want = EXPECTED[name]
    (info,) = describe(MASKED / name).shards
    assert info.meta["mask_column"] == want["mask_column"] and info.loss_mask == info.path
    shard = open_shard(info)
    assert documents(shard) == want["documents"]
    flat = [f for mask in want["masks"] for f in mask]
    assert mask_reader(info).tokens(0, info.num_tokens).tolist() == flat
    assert [shard.document_metadata(i)["id"] for i in range(len(want["ids"]))] == want["ids"]


@pytest.mark.parametrize(
    "kind", [pa.list_(pa.bool_()), pa.list_(pa.int8()), pa.large_list(pa.int64())]
)
@pytest.mark.parametrize("suffix", [".arrow", ".parquet"])
def test_mask_values_of_any_flag_type_in_pieces(tmp_path: Path, kind: Any, suffix: str) -> None:
    docs, masks = sft_rows(10)
    values = [[bool(f) for f in m] for m in masks] if kind.value_type == pa.bool_() else masks
    path = write(tmp_path / f"x{suffix}", table(docs, values, kind=kind))
    (info,) = describe(path).shards
    flat = [f for m in masks for f in m]
    reader = mask_reader(info)
    for start in range(0, len(flat), 5):
        for stop in (start, start + 1, start + 7, len(flat) + 1):
            assert reader.tokens(start, stop).tolist() == flat[start:stop]


def test_wide_flags_other_than_0_and_1_stay_visible_to_validate(tmp_path: Path) -> None:
    path = write(tmp_path / "x.arrow", table([[5, 0]], [[7, -1]], kind=pa.list_(pa.int64())))
    (info,) = describe(path).shards
    assert mask_reader(info).tokens(0, 2).tolist() == [2, 2]  # trained, and not 0/1


@pytest.mark.parametrize("suffix", [".arrow", ".parquet"])
def test_a_row_of_other_length_is_refused_naming_row_and_lengths(
    tmp_path: Path, suffix: str
) -> None:
    docs, masks = sft_rows(8)
    masks[5] = masks[5] + [1]
    path = write(tmp_path / f"x{suffix}", table(docs, masks))
    (info,) = describe(path).shards
    want = (
        rf"x\{suffix}: row 5 has {len(docs[5])} tokens in column 'input_ids' but "
        rf"{len(docs[5]) + 1} flags in its loss-mask column 'loss_mask'"
    )
    with pytest.raises(FormatError, match=want):
        mask_reader(info).tokens(0, info.num_tokens)


@pytest.mark.parametrize("suffix", [".arrow", ".parquet"])
def test_a_named_mask_column_must_exist_and_hold_flags(tmp_path: Path, suffix: str) -> None:
    docs, masks = sft_rows(4)
    path = write(tmp_path / f"x{suffix}", table(docs, masks, name="weights"))
    with pytest.raises(FormatError, match=r"no column 'labels' to read as the loss mask .*"
                       r"the file has columns id, input_ids, weights"):  # fmt: skip
        describe(path, mask_column="labels")
    with pytest.raises(FormatError, match=r"column 'id' is string; a loss mask is a list of"):
        describe(path, mask_column="id")
    floats = [[0.5] * len(d) for d in docs]
    write(path, table(docs, floats, kind=pa.list_(pa.float32())))
    with pytest.raises(FormatError, match=r"column 'loss_mask' is list<\w+: float>; a loss"):
        describe(path)  # found by its name: still refused, never skipped silently


def test_attention_mask_is_never_a_loss_mask(tmp_path: Path) -> None:
    docs, masks = sft_rows(4)
    path = write(tmp_path / "x.arrow", table(docs, masks, name="attention_mask"))
    (info,) = describe(path).shards
    assert info.loss_mask is None
    (info,) = describe(path, mask_column="attention_mask").shards  # unless named
    assert info.meta["mask_column"] == "attention_mask"


def test_label_masks_none_ignores_the_column(tmp_path: Path) -> None:
    docs, masks = sft_rows(4)
    path = write(tmp_path / "x.parquet", table(docs, masks, name="labels_mask"))
    assert describe(path).shards[0].meta["mask_column"] == "labels_mask"
    assert describe(path, label_masks="none").shards[0].loss_mask is None


def config(path: Path, mode: str, **source: Any) -> dict[str, Any]:
    out = loader_config(path, mode, **source)
    if mode == "megatron":  # Megatron's train_samples; its padding is its own
        out["sampling"]["num_samples"] = 30
        del out["pad_token_id"]
    return out


def megatron_reference(folder: Path, docs: list[list[int]], masks: list[list[int]]) -> Path:
    """The same documents as a Megatron dataset whose ``.bin.loss`` holds the mask column's
    flags, written byte by byte from the Python lists (the file-mask path is the reference)."""
    folder.mkdir()
    prefix = folder / "ref_text_document"
    with MegatronWriter(prefix, np.int32) as writer:
        for doc in docs:
            writer.add_document(np.asarray(doc, dtype=np.int32))
    with LossMaskWriter(mask_path_for(f"{prefix}.bin")) as mask:
        for flags in masks:
            mask.add(np.asarray(flags, dtype=np.uint8))
    return prefix


@pytest.mark.filterwarnings("ignore:each pass of")
@pytest.mark.parametrize("mode", ["concat", "packed", "padded", "megatron"])
@pytest.mark.parametrize("suffix", [".arrow", ".parquet"])
def test_every_mode_trains_the_mask_column_as_the_reference(
    tmp_path: Path, mode: str, suffix: str
) -> None:
    docs, masks = sft_rows(40)
    half = len(docs) // 2
    for part, rows in (("a", slice(0, half)), ("b", slice(half, None))):
        write(tmp_path / "hf" / f"{part}{suffix}", table(docs[rows], masks[rows]))
    reference = megatron_reference(tmp_path / "ref", docs, masks)
    got = collect_global_batches([build_loader(config(tmp_path / "hf", mode), batch_size=3)])
    want = collect_global_batches([build_loader(config(reference, mode), batch_size=3)])
    bare = collect_global_batches(
        [build_loader(config(tmp_path / "hf", mode, label_masks="none"), batch_size=3)]
    )
    assert len(got) == len(want) == len(bare) > 3
    for a, b in zip(got, want, strict=True):
        assert a.keys() == b.keys()
        for key in a:
            assert a[key].equal(b[key]), key
    masked = sum(int((a["labels"] == -100).sum()) for a in got)
    assert masked > sum(int((a["labels"] == -100).sum()) for a in bare)  # the mask applied


@pytest.mark.filterwarnings("ignore:each pass")
def test_concat_labels_are_the_mask_columns_flags(tmp_path: Path) -> None:
    """Concat mode against the mask column alone: label t is token s+t+1, or -100 where
    the column's flag of token s+t+1 is 0."""
    docs, masks = sft_rows(30, seed=4)
    write(tmp_path / "x.parquet", table(docs, masks), rows=4)
    tokens = np.array([t for d in docs for t in d])
    flags = np.array([f for m in masks for f in m])
    cfg = {"seq_len": SEQ_LEN, "seed": 3, "sources": [{"name": "p", "path": str(tmp_path)}]}
    starts_of = streamload.SampleStream.from_config(streamload.load_config(cfg)).window_starts
    rows = 0
    for batch in build_loader(cfg, batch_size=2):
        for row, start in enumerate(starts_of(0, batch["sample_index"].numpy()).tolist()):
            span = slice(start + 1, start + SEQ_LEN + 1)
            expected = np.where(flags[span] != 0, tokens[span], -100)
            assert torch.equal(batch["labels"][row], torch.from_numpy(expected))
            rows += 1
    assert rows > 10


@pytest.mark.filterwarnings("ignore:each pass of")
@pytest.mark.parametrize(("mode", "suffix"), [("packed", ".arrow"), ("concat", ".parquet")])
def test_masked_runs_resume_exactly(tmp_path: Path, mode: str, suffix: str) -> None:
    docs, masks = sft_rows(24, seed=2)
    write(tmp_path / "hf" / f"x{suffix}", table(docs, masks))
    cfg = config(tmp_path / "hf", mode)
    assert_resumes_exactly(lambda: build_loader(cfg, batch_size=2), passes=2)


def test_validate_reports_flags_other_than_0_and_1(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from streamload.cli.main import main

    assert main(["validate", str(MASKED / "save_to_disk")]) == 0
    assert "sound: 79 tokens in 2 files (2 with a loss mask)" in capsys.readouterr().out
    write(tmp_path / "x.arrow", table([[5, 0], [6, 7, 0]], [[0, 1], [1, 5, 1]]))
    assert main(["validate", str(tmp_path / "x.arrow")]) == 1
    assert "x.arrow column 'loss_mask': 1 bytes are neither 0" in capsys.readouterr().out
