"""Document ids and metadata of Arrow and Parquet files: ``streamload docs`` and ``show``'s
trace."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from streamload.cli.main import main
from tests.formats.test_arrow import write_stream
from tests.helpers.paths import TESTS

HF = TESTS / "fixtures" / "hf"


def test_docs_prints_the_id_column(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["docs", str(HF / "save_to_disk"), "--start", "6", "--count", "2"]) == 0
    assert capsys.readouterr().out.splitlines() == [
        "6 id=doc-6: 137 0",
        "7 id=doc-7: 41 116 122 271 62 151 80 7 0",
    ]
    assert main(["docs", str(HF / "masked" / "to_parquet"), "--count", "2", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["ids"] == ["sft-0", "sft-1"] and len(report["documents"]) == 2


def test_docs_without_ids_prints_as_before(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["docs", str(HF / "ipc_file"), "--count", "1", "--json"]) == 0
    assert set(json.loads(capsys.readouterr().out)) == {"documents"}


def test_a_named_id_column(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    table = pa.table({"input_ids": pa.array([[3, 0], [4, 0]]), "url": pa.array(["a", "b"])})
    pq.write_table(table, tmp_path / "x.parquet", row_group_size=1)
    assert main(["docs", str(tmp_path), "--start", "1", "--id-column", "url"]) == 0
    assert capsys.readouterr().out.splitlines() == ["1 id=b: 4 0"]
    assert main(["docs", str(tmp_path), "--id-column", "nope"]) != 0
    assert "no column 'nope' to show as the document id; the file has columns input_ids, url" \
        in capsys.readouterr().err  # fmt: skip


def metadata_table(rows: int) -> pa.Table:
    """Tokens, an id, a long text column, a source and a list column that is not metadata."""
    return pa.table(
        {
            "input_ids": pa.array([[r + 2, 0] for r in range(rows)]),
            "id": pa.array([f"doc-{r}" for r in range(rows)]),
            "text": pa.array(["line one\n" + "x" * 100] * rows),
            "source": pa.array(["web", None] * (rows // 2) + ["web"] * (rows % 2)),
            "tags": pa.array([["a"]] * rows),
        }
    )


def test_docs_prints_the_scalar_columns_after_the_id(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    pq.write_table(metadata_table(5), tmp_path / "x.parquet", row_group_size=2)
    assert main(["docs", str(tmp_path), "--start", "2", "--count", "2"]) == 0
    short = "line one\\n" + "x" * 49 + "…"  # 60 characters, the line break escaped
    assert capsys.readouterr().out.splitlines() == [
        f"2 id=doc-2 text={short} source=web: 4 0",
        f"3 id=doc-3 text={short}: 5 0",  # a null is left out
    ]
    assert main(["docs", str(tmp_path), "--start", "3", "--count", "2", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    text = "line one\n" + "x" * 100  # whole in JSON
    assert report == {
        "documents": [[5, 0], [6, 0]],
        "ids": ["doc-3", "doc-4"],
        "metadata": [
            {"id": "doc-3", "text": text, "source": None},
            {"id": "doc-4", "text": text, "source": "web"},
        ],
    }


def test_docs_shows_metadata_without_an_id_column(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    table = metadata_table(2).select(["input_ids", "source"])
    write_stream(tmp_path / "x.arrow", table)
    assert main(["docs", str(tmp_path), "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["ids"] == [None, None]
    assert report["metadata"] == [{"source": "web"}, {"source": None}]
    assert main(["docs", str(tmp_path)]) == 0
    assert capsys.readouterr().out.splitlines() == ["0 source=web: 2 0", "1: 3 0"]


def test_show_traces_documents_to_their_ids(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = {
        "seq_len": 8,
        "seed": 1,
        "eos_token_id": 0,
        "pad_token_id": 1,
        "global_batch_size": 2,
        "sources": [{"name": "hf", "path": str(HF / "masked" / "save_to_disk"),
                     "id_column": "id"}],
        "sampling": {"mode": "packed"},
    }  # fmt: skip
    path = tmp_path / "c.json"
    path.write_text(json.dumps(config))
    assert main(["show", str(path), "--step", "1", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    found = [
        doc["metadata"]["id"]
        for sample in report["samples"]
        for doc in sample["documents"]
        if doc["kind"] == "document" and doc["metadata"]
    ]
    assert found and all(1000 <= i < 1011 for i in found)


def test_show_reports_every_scalar_column(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    data = tmp_path / "data"
    data.mkdir()
    write_stream(data / "x.arrow", metadata_table(6), max_chunksize=4)
    config = {
        "seq_len": 4,
        "seed": 1,
        "eos_token_id": 0,
        "pad_token_id": 1,
        "global_batch_size": 2,
        "sources": [{"name": "hf", "path": str(data)}],
        "sampling": {"mode": "packed"},
    }
    path = tmp_path / "c.json"
    path.write_text(json.dumps(config))
    assert main(["show", str(path), "--step", "0", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    found = [
        doc["metadata"]
        for sample in report["samples"]
        for doc in sample["documents"]
        if doc["kind"] == "document"
    ]
    assert found
    for fields in found:
        assert list(fields) == ["id", "text", "source"]
        assert fields["text"] == "line one\n" + "x" * 100
        assert fields["source"] == ("web" if int(fields["id"][4:]) % 2 == 0 else None)
