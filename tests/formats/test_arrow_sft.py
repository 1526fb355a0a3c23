"""Hugging Face / TRL SFT columns of Arrow, Parquet and JSONL token files (issue 33): ``labels``
(-100 = not trained) read as the loss mask ``labels != -100``, TRL's ``assistant_masks`` and
``completion_mask``, which one is read when several are there, and the refusals. The
fixtures (``tests/fixtures/hf_sft``) were written by ``datasets``; the loader's labels are
checked against the dataset's own labels shifted by hand."""

from __future__ import annotations

import itertools
import json
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import torch

from streamload import build_loader
from streamload.catalog.sources import SourceCatalog, describe_source
from streamload.config import SourceConfig
from streamload.errors import FormatError
from streamload.formats import open_shard
from streamload.testing import assert_resumes_exactly, collect_global_batches
from streamload.tools.masks import mask_reader
from tests.helpers.paths import TESTS
from tests.helpers.shards import documents

SFT = TESTS / "fixtures" / "hf_sft"
EXPECTED: dict[str, Any] = json.loads((SFT / "expected.json").read_text())["files"]
FOLDERS = {"save_to_disk": sorted(k for k in EXPECTED if k.startswith("save_to_disk/"))}
FOLDERS["to_parquet"] = ["to_parquet/train.parquet"]
FOLDERS["to_json"] = ["to_json/train.jsonl"]
PATHS = {name: SFT / name for name in FOLDERS}
PATHS["to_json"] = SFT / "to_json" / "*.jsonl"  # a folder lists no .jsonl: a glob does
IGNORE = -100


def describe(path: Path | str, **kw: Any) -> SourceCatalog:
    return describe_source(SourceConfig(name="sft", path=str(path), **kw))


def rows(folder: str) -> dict[str, list[list[int]]]:
    """The folder's rows as the tool's reader returned them, files in listing order."""
    out: dict[str, list[list[int]]] = {}
    for name in FOLDERS[folder]:
        for key, values in EXPECTED[name].items():
            out.setdefault(key, []).extend(values)
    return out


def config(folder: Path | str, mode: str, seq_len: int, **source: Any) -> dict[str, Any]:
    return {
        "seq_len": seq_len,
        "seed": 5,
        "eos_token_id": 0,
        "pad_token_id": 1,
        "vocab_size": 300,
        "sources": [{"name": "sft", "path": str(folder), **source}],
        "sampling": {"shuffle": False, "mode": mode},
        "packing": {"masks": mode == "packed"},
    }


def batches(cfg: dict[str, Any]) -> list[dict[str, torch.Tensor]]:
    return collect_global_batches([build_loader(cfg, batch_size=2)])


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_labels_are_read_as_the_mask_labels_not_minus_100(name: str) -> None:
    want = EXPECTED[name]
    (info,) = describe(SFT / name).shards
    assert info.meta["mask_column"] == "labels" and info.loss_mask == info.path
    assert documents(open_shard(info)) == want["input_ids"]
    flags = [int(label != IGNORE) for row in want["labels"] for label in row]
    assert mask_reader(info).tokens(0, info.num_tokens).tolist() == flags


@pytest.mark.filterwarnings("ignore:each pass of")
@pytest.mark.parametrize("folder", sorted(FOLDERS))
def test_concat_labels_are_the_rows_labels_shifted(folder: str) -> None:
    """Sample k holds tokens ``[8k, 8k + 8)``; its label at t is token ``8k + t + 1``, or
    -100 where the dataset's own label of that token is -100."""
    data = rows(folder)
    tokens = np.concatenate([np.asarray(r, np.int64) for r in data["input_ids"]])
    labels = np.concatenate([np.asarray(r, np.int64) for r in data["labels"]])
    got = batches(config(PATHS[folder], "concat", 8))
    samples = [row for batch in got for row in batch["labels"].tolist()]
    assert len(samples) == (tokens.size - 1) // 8 - (((tokens.size - 1) // 8) % 2)
    for k, sample in enumerate(samples):
        window = slice(8 * k + 1, 8 * k + 9)
        assert sample == np.where(labels[window] != IGNORE, tokens[window], IGNORE).tolist()
    if folder == "save_to_disk":  # by hand: row 0's labels train its tokens 11..15
        assert got[0]["input_ids"][1].tolist() == [77, 109, 1, 278, 227, 256, 1, 0]
        assert samples[1] == [IGNORE, IGNORE, 278, 227, 256, 1, 0, IGNORE]
        assert samples[0] == [IGNORE] * 8


def segment_labels(data: dict[str, list[list[int]]], segment: list[int]) -> list[int] | None:
    """The labels a packed segment holding the start of a conversation must have: the
    conversation ``d`` (``n`` tokens) whose first ``m`` tokens the segment holds, where
    ``n == m`` (it ends inside the sample: ``labels[d][1:]`` then -100, the boundary) or
    ``n == m + 1`` (its last token is the sample's last label: ``labels[d][1:]``);
    ``None`` for the padding segment."""
    m = len(segment)
    for ids, labels in zip(data["input_ids"], data["labels"], strict=True):
        if len(ids) in (m, m + 1) and ids[:m] == segment:
            return labels[1:] + [IGNORE] * (len(ids) == m)
    return None


@pytest.mark.filterwarnings("ignore:each pass of")
@pytest.mark.parametrize("folder", sorted(FOLDERS))
def test_packed_labels_are_each_conversations_labels_shifted(folder: str) -> None:
    """Each packed segment is one whole conversation; its labels are its dataset labels
    shifted by one (:func:`segment_labels`), padding -100."""
    data = rows(folder)
    got = batches(config(PATHS[folder], "packed", 24))
    seen = 0
    for batch in got:
        for row in range(batch["input_ids"].shape[0]):
            ids, labels = batch["input_ids"][row].tolist(), batch["labels"][row].tolist()
            cuts = sorted(set(batch["cu_seqlens"][row].tolist()))
            for start, stop in itertools.pairwise(cuts):
                want = segment_labels(data, ids[start:stop])
                if want is None:  # the padding segment
                    assert set(ids[start:stop]) == {1} and set(labels[start:stop]) == {IGNORE}
                    continue
                assert labels[start:stop] == want
                seen += 1
    assert seen >= len(data["input_ids"]) - 2
    if folder == "to_parquet":  # by hand: a conversation whose last 6 tokens are trained
        assert got[0]["labels"][0].tolist()[11:19] == [IGNORE, 88, 281, 118, 206, 1, 0, IGNORE]
    elif folder == "save_to_disk":  # a conversation of 11 tokens fills the sample: its EOS
        # is the last label
        tail = [row for batch in got for row in batch["labels"].tolist()][8][14:]
        assert tail == [IGNORE] * 7 + [78, 1, 0]


def columns_table(drop: tuple[str, ...] = (), **extra: Any) -> pa.Table:
    """The ``to_parquet`` fixture without the ``drop`` columns, with ``extra`` ones."""
    data = pq.read_table(SFT / "to_parquet" / "train.parquet").drop_columns(list(drop))
    for name, values in extra.items():
        data = data.append_column(name, values)
    return data


def flags_of(data: pa.Table, column: str) -> list[int]:
    values = data.column(column).combine_chunks().flatten().to_pylist()
    if column == "labels":
        return [int(v != IGNORE) for v in values]
    return [int(v) for v in values]


@pytest.mark.parametrize(
    ("drop", "picked"),
    [
        ((), "labels"),
        (("labels",), "assistant_masks"),
        (("labels", "assistant_masks"), "completion_mask"),
        (("labels", "assistant_masks", "completion_mask"), None),
    ],
)
def test_found_by_name_in_order_of_precedence(
    tmp_path: Path, drop: tuple[str, ...], picked: str | None
) -> None:
    data = columns_table(drop)
    pq.write_table(data, tmp_path / "x.parquet", row_group_size=4)
    (info,) = describe(tmp_path / "x.parquet").shards
    if picked is None:
        assert info.loss_mask is None
        return
    assert info.meta["mask_column"] == picked
    assert mask_reader(info).tokens(0, info.num_tokens).tolist() == flags_of(data, picked)


def test_the_older_names_keep_their_mask_beside_labels(tmp_path: Path) -> None:
    """A file that was read with its ``loss_mask`` keeps it when it also has ``labels``."""
    lengths = [len(r) for r in columns_table().column("input_ids").to_pylist()]
    data = columns_table(loss_mask=pa.array([[1] * n for n in lengths]))
    with pa.ipc.new_stream(str(tmp_path / "x.arrow"), data.schema) as writer:
        writer.write_table(data, max_chunksize=3)
    (info,) = describe(tmp_path / "x.arrow").shards
    assert info.meta["mask_column"] == "loss_mask"
    assert set(mask_reader(info).tokens(0, info.num_tokens).tolist()) == {1}


@pytest.mark.parametrize("column", ["labels", "assistant_masks", "completion_mask"])
@pytest.mark.parametrize("folder", sorted(FOLDERS))
def test_mask_column_names_any_of_them(folder: str, column: str) -> None:
    data = rows(folder)
    want = [int(v != IGNORE) if column == "labels" else int(v) for r in data[column] for v in r]
    got: list[int] = []
    for info in describe(PATHS[folder], mask_column=column).shards:
        assert info.meta["mask_column"] == column
        got += mask_reader(info).tokens(0, info.num_tokens).tolist()
    assert got == want


@pytest.mark.filterwarnings("ignore:each pass of")
def test_label_masks_none_ignores_them_all() -> None:
    assert all(i.loss_mask is None for i in describe(SFT / "to_parquet", label_masks="none").shards)
    cfg = config(SFT / "to_parquet", "concat", 8, label_masks="none")
    for batch in batches(cfg):
        assert batch["labels"][:, :-1].equal(batch["input_ids"][:, 1:])
        assert (batch["labels"] != IGNORE).all()


def test_labels_that_are_not_a_masked_copy_are_refused() -> None:
    (info,) = describe(SFT / "bad" / "shifted.parquet").shards
    shifted = pq.read_table(SFT / "bad" / "shifted.parquet").to_pydict()
    first, second = shifted["input_ids"][0][:2]
    want = (
        rf"shifted\.parquet: row 0, position 0: column 'labels' holds {second} but the token "
        rf"in 'input_ids' is {first}; labels must be a masked copy of the tokens"
    )
    with pytest.raises(FormatError, match=want):
        mask_reader(info).tokens(0, info.num_tokens)


def test_labels_of_another_length_are_refused() -> None:
    (info,) = describe(SFT / "bad" / "short.parquet").shards
    short = pq.read_table(SFT / "bad" / "short.parquet").to_pydict()
    n = len(short["input_ids"][3])
    want = rf"row 3 has {n} tokens in column 'input_ids' but {n - 1} flags in its loss-mask column 'labels'"  # noqa: E501
    with pytest.raises(FormatError, match=want):
        mask_reader(info).tokens(0, info.num_tokens)


def test_a_class_label_column_is_not_a_mask() -> None:
    (info,) = describe(SFT / "bad" / "class_label.parquet").shards
    assert info.loss_mask is None
    with pytest.raises(FormatError, match=r"column 'labels' is int64; a loss mask is a list"):
        describe(SFT / "bad" / "class_label.parquet", mask_column="labels")


def test_a_bad_label_in_a_later_record_batch_names_the_files_row(tmp_path: Path) -> None:
    docs = [[5, 6, 7, 0]] * 7
    labels = [[IGNORE, 6, 7, 0]] * 7
    labels[5] = [IGNORE, 6, 9, 0]
    data = pa.table({"input_ids": pa.array(docs), "labels": pa.array(labels)})
    with pa.ipc.new_stream(str(tmp_path / "x.arrow"), data.schema) as writer:
        writer.write_table(data, max_chunksize=3)
    (info,) = describe(tmp_path / "x.arrow").shards
    reader = mask_reader(info)
    assert reader.tokens(0, 12).tolist() == [0, 1, 1, 1] * 3  # the first batch is sound
    want = r"x\.arrow: row 5, position 2: column 'labels' holds 9 but the token in 'input_ids' is 7"
    with pytest.raises(FormatError, match=want):
        reader.tokens(0, info.num_tokens)


@pytest.mark.filterwarnings("ignore:each pass of")
@pytest.mark.parametrize("folder", sorted(FOLDERS))
def test_packed_labels_resume_exactly(folder: str) -> None:
    cfg = config(PATHS[folder], "packed", 24)
    cfg["sampling"]["shuffle"] = True
    assert_resumes_exactly(lambda: build_loader(cfg, batch_size=2), passes=2)
