"""Document metadata of Arrow and Parquet rows: the id column first, then the scalar columns."""

from __future__ import annotations

import datetime
import decimal
import json
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from streamload.catalog.sources import describe_source
from streamload.config import SourceConfig
from streamload.errors import FormatError
from streamload.formats import open_shard
from streamload.formats.arrow._metadata import is_scalar, row_metadata
from tests.formats.test_arrow import write_stream
from tests.helpers.paths import TESTS

MASKED = TESTS / "fixtures" / "hf" / "masked"
MASKED_FILES: dict[str, Any] = json.loads((MASKED / "expected.json").read_text())["files"]
ROWS = 7
STAMP = datetime.datetime(2024, 1, 2, 3, 4, 5)


def rich_table() -> pa.Table:
    """Tokens, a loss mask and a list column beside every kind of scalar column; ``id`` is
    not the first column, so the reported order is not the file's."""
    stamps = [STAMP + datetime.timedelta(seconds=r) for r in range(ROWS)]
    return pa.table(
        {
            "input_ids": pa.array([[r + 2, 0] for r in range(ROWS)], pa.list_(pa.int32())),
            "source": pa.array(["web" if r % 2 else "books" for r in range(ROWS)]),
            "id": pa.array([f"doc-{r}" for r in range(ROWS)]),
            "score": pa.array([r / 4 for r in range(ROWS)], pa.float64()),
            "n": pa.array(range(ROWS), pa.int64()),
            "clean": pa.array([r % 3 == 0 for r in range(ROWS)]),
            "crawled": pa.array(stamps, pa.timestamp("ns")),
            "day": pa.array([s.date() for s in stamps], pa.date32()),
            "price": pa.array([decimal.Decimal(f"{r}.5") for r in range(ROWS)]),
            "lang": pa.array(["en", None, "fr", "en", None, "de", "en"]).dictionary_encode(),
            "missing": pa.array([None] * ROWS, pa.string()),
            "tags": pa.array([["a", "b"]] * ROWS, pa.list_(pa.string())),
            "loss_mask": pa.array([[0, 1]] * ROWS, pa.list_(pa.int8())),
            "meta": pa.array([{"k": r} for r in range(ROWS)]),
            "raw": pa.array([b"\x00"] * ROWS, pa.binary()),
        }
    )


def expected(row: int) -> dict[str, Any]:
    langs = ["en", None, "fr", "en", None, "de", "en"]
    return {
        "id": f"doc-{row}",
        "source": "web" if row % 2 else "books",
        "score": row / 4,
        "n": row,
        "clean": row % 3 == 0,
        "crawled": f"2024-01-02T03:04:{5 + row:02}.000000000",
        "day": "2024-01-02",
        "price": f"{row}.5",
        "lang": langs[row],
        "missing": None,
    }


def write(path: Path, table: pa.Table, rows_per_piece: int = 3) -> Path:
    """``table`` as an Arrow stream in record batches, or Parquet in row groups, of
    ``rows_per_piece`` rows."""
    if path.suffix == ".parquet":
        pq.write_table(table, path, row_group_size=rows_per_piece)
        return path
    return write_stream(path, table, max_chunksize=rows_per_piece)


def open_file(path: Path, **kw: Any) -> Any:
    (info,) = describe_source(SourceConfig(name="a", path=str(path), **kw)).shards
    return open_shard(info)


@pytest.mark.parametrize("suffix", [".arrow", ".parquet"])
def test_every_row_of_every_piece_reports_its_scalar_columns(tmp_path: Path, suffix: str) -> None:
    shard = open_file(write(tmp_path / f"x{suffix}", rich_table()))
    for row in (6, 0, 4, 3, 1):  # pieces of 3 rows: out of order, each piece more than once
        fields = shard.document_metadata(row)
        assert fields == expected(row)
        assert list(fields) == list(expected(row))  # id first, then the file's column order
    with pytest.raises(IndexError, match=r"document 7 out of range \[0, 7\)"):
        shard.document_metadata(ROWS)
    json.dumps(shard.document_metadata(2), allow_nan=False)  # JSON-ready


def test_parquet_decodes_only_the_scalar_columns_of_the_row_group(tmp_path: Path) -> None:
    shard = open_file(write(tmp_path / "x.parquet", rich_table()))
    assert shard.document_metadata(4)["id"] == "doc-4"
    names, group, table = shard._fields
    assert group == 1 and table.num_rows == 3
    assert names == table.column_names == list(expected(0))
    kept = table
    assert shard.document_metadata(5)["id"] == "doc-5"
    assert shard._fields[2] is kept  # the same row group: not decoded again
    assert shard.document_metadata(6)["id"] == "doc-6" and shard._fields[1] == 2


@pytest.mark.parametrize("suffix", [".arrow", ".parquet"])
def test_a_named_id_column_is_reported_as_id(tmp_path: Path, suffix: str) -> None:
    shard = open_file(write(tmp_path / f"x{suffix}", rich_table()))
    fields = shard.document_metadata(3, "source")
    assert list(fields)[:3] == ["id", "score", "n"]  # the file's own id column: key taken
    assert fields["id"] == "web" and "source" not in fields
    with pytest.raises(FormatError, match="no column 'url' to show as the document id"):
        shard.document_metadata(3, "url")


@pytest.mark.parametrize("suffix", [".arrow", ".parquet"])
def test_files_without_scalar_columns_report_nothing(tmp_path: Path, suffix: str) -> None:
    table = rich_table().select(["input_ids", "tags", "loss_mask", "meta", "raw"])
    shard = open_file(write(tmp_path / f"x{suffix}", table))
    assert shard.document_metadata(2) == {}
    table = rich_table().select(["input_ids", "n"])
    assert open_file(write(tmp_path / f"y{suffix}", table)).document_metadata(2) == {"n": 2}


def test_timestamps_with_a_zone_and_coarser_units() -> None:
    table = pa.table(
        {
            "utc": pa.array([STAMP], pa.timestamp("us", tz="UTC")),
            "s": pa.array([STAMP], pa.timestamp("s")),
            "t": pa.array([datetime.time(1, 2)], pa.time64("us")),
        }
    )
    columns = [(name, name) for name in table.column_names]
    assert row_metadata(table, 0, columns) == {
        "utc": "2024-01-02T03:04:05.000000Z",
        "s": "2024-01-02T03:04:05",
        "t": "01:02:00.000000",
    }


@pytest.mark.parametrize(
    ("kind", "scalar"),
    [
        (pa.string(), True),
        (pa.large_string(), True),
        (pa.uint8(), True),
        (pa.float16(), True),
        (pa.null(), True),
        (pa.dictionary(pa.int32(), pa.string()), True),
        (pa.list_(pa.int32()), False),
        (pa.large_list(pa.bool_()), False),
        (pa.struct([("k", pa.int64())]), False),
        (pa.map_(pa.string(), pa.int64()), False),
        (pa.binary(), False),
        (pa.duration("s"), False),
    ],
)
def test_which_types_are_scalar(kind: pa.DataType, scalar: bool) -> None:
    assert is_scalar(kind) is scalar


@pytest.mark.parametrize("name", sorted(MASKED_FILES))
def test_real_tool_fixture_reports_its_id_column_only(name: str) -> None:
    """``datasets`` files: the token and mask columns are lists, so the id is all there is."""
    shard = open_file(MASKED / name)
    ids = MASKED_FILES[name]["ids"]
    assert [shard.document_metadata(i) for i in range(len(ids))] == [{"id": i} for i in ids]
