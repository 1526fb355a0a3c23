"""JSONL rows of token ids (issue 33): ``input_ids`` with ``labels`` / ``assistant_masks`` /
``completion_mask`` per line, read without a tokenizer; the refusals name the file, the
line and the field. (The fixture written by ``datasets.to_json`` is read by
``test_arrow_sft.py`` with the Arrow and Parquet ones: labels, precedence, packing.)"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from streamload.catalog.sources import SourceCatalog, describe_source
from streamload.config import SourceConfig
from streamload.errors import ConfigError, FormatError
from streamload.formats import open_shard
from streamload.tools.masks import mask_reader
from tests.helpers.shards import documents

IGNORE = -100
ROWS = [
    {"id": "a", "input_ids": [5, 17, 0], "labels": [IGNORE, 17, 0]},
    {"id": "b", "input_ids": [4, 2], "labels": [IGNORE, 2]},
    {"id": "c", "input_ids": [9, 8, 7, 0], "labels": [IGNORE, IGNORE, 7, 0]},
]


def write(path: Path, rows: list[dict[str, Any]], blank_after: int | None = None) -> Path:
    lines = [json.dumps(r) for r in rows]
    if blank_after is not None:
        lines.insert(blank_after, "   ")
    path.write_text("\n".join(lines) + "\n")
    return path


def describe(path: Path, **kw: Any) -> SourceCatalog:
    return describe_source(SourceConfig(name="rows", path=str(path), **kw))


def test_rows_are_documents_and_labels_their_mask(tmp_path: Path) -> None:
    (info,) = describe(write(tmp_path / "x.jsonl", ROWS)).shards
    assert info.format == "jsonl" and info.dtype == "<u4" and info.num_tokens == 9
    assert info.meta["mask_column"] == "labels"
    shard = open_shard(info)
    assert documents(shard) == [r["input_ids"] for r in ROWS]
    assert shard.tokens(2, 6).tolist() == [0, 4, 2, 9]
    assert mask_reader(info).tokens(0, 9).tolist() == [0, 1, 1, 0, 1, 0, 0, 1, 1]
    assert shard.document_metadata(1) == {"id": "b"}


def test_format_jsonl_and_a_token_field_named_by_column(tmp_path: Path) -> None:
    rows = [{"tokens": r["input_ids"], "completion_mask": [0, *[1] * (len(r["labels"]) - 1)]}
            for r in ROWS]  # fmt: skip
    (info,) = describe(write(tmp_path / "x.jsonl", rows), format="jsonl", column="tokens").shards
    assert info.meta["mask_column"] == "completion_mask"
    assert mask_reader(info).tokens(0, 9).tolist() == [0, 1, 1, 0, 1, 0, 1, 1, 1]
    assert documents(open_shard(info))[2] == [9, 8, 7, 0]


def test_a_configured_dtype_is_checked(tmp_path: Path) -> None:
    path = write(tmp_path / "x.jsonl", [{"input_ids": [1, 300]}])
    (info,) = describe(path, dtype="uint16").shards
    assert open_shard(info).tokens(0, 2).dtype == np.dtype("<u2")
    with pytest.raises(FormatError, match=r"x\.jsonl: line 1 holds token id 300, outside"):
        describe(path, dtype="uint8")


def test_short_labels_are_refused_naming_the_line(tmp_path: Path) -> None:
    rows = [dict(r) for r in ROWS]
    rows[2]["labels"] = [IGNORE, 7, 0]
    (info,) = describe(write(tmp_path / "x.jsonl", rows, blank_after=1)).shards
    want = (
        r"x\.jsonl: line 4 has 4 tokens in column 'input_ids' but 3 flags in its loss-mask "
        r"column 'labels'"
    )
    with pytest.raises(FormatError, match=want):
        mask_reader(info).tokens(0, info.num_tokens)


def test_labels_that_are_not_a_masked_copy_are_refused_naming_the_line(tmp_path: Path) -> None:
    rows = [dict(r) for r in ROWS]
    rows[1]["labels"] = [IGNORE, 3]  # shifted or wrong: not the token at its position
    (info,) = describe(write(tmp_path / "x.jsonl", rows)).shards
    want = r"x\.jsonl: line 2, position 1: column 'labels' holds 3 but the token in 'input_ids'"
    with pytest.raises(FormatError, match=want):
        mask_reader(info).tokens(0, info.num_tokens)


def test_a_line_without_the_mask_field_is_refused(tmp_path: Path) -> None:
    rows = [dict(r) for r in ROWS]
    del rows[2]["labels"]
    (info,) = describe(write(tmp_path / "x.jsonl", rows)).shards
    with pytest.raises(FormatError, match=r"x\.jsonl: line 3 has no field 'labels'"):
        mask_reader(info).tokens(0, info.num_tokens)


@pytest.mark.parametrize(
    ("rows", "want"),
    [
        ([{"input_ids": [1]}, {"text": "hi"}], r"line 2 has no field 'input_ids'"),
        ([{"input_ids": [1]}, {"input_ids": [1, 2.5]}], r"holds double values"),
        ([{"input_ids": [1]}, {"input_ids": "1 2"}], r"not JSONL rows .*changed from array"),
        ([{"input_ids": [1, -3]}], r"line 1 holds token id -3, outside \[0, "),
        ([], r"holds no JSON lines"),
    ],
)
def test_bad_rows_are_refused(tmp_path: Path, rows: list[dict[str, Any]], want: str) -> None:
    with pytest.raises(FormatError, match=want):
        describe(write(tmp_path / "x.jsonl", rows), format="jsonl")


def test_text_lines_without_their_record_say_how_to_prepare(tmp_path: Path) -> None:
    path = write(tmp_path / "x.jsonl", [{"text": "hello"}])
    want = r"no field 'input_ids' .* tokenization record .*x\.tok\.json is missing"
    with pytest.raises(FormatError, match=want):
        describe(path, format="jsonl")


def test_columns_do_not_apply_to_text_lines() -> None:
    with pytest.raises(ConfigError, match=r"apply to JSONL rows of token ids"):
        SourceConfig(
            name="s", path="x.jsonl", format="jsonl", tokenizer="t.json", eos_token_id=0,
            mask_column="labels",
        )  # fmt: skip
