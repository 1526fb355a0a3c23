"""The families' text readers (``formats/arrow/text.py``, ``formats/mds/text.py``) give the rows
the real tools' own readers gave (tests/fixtures/text/expected.json), and refuse bad files
naming file, column and what was expected."""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path
from typing import Any

import fsspec
import pytest

from streamload.errors import ConfigError, FormatError
from streamload.formats.arrow.text import iter_text_rows as table_rows
from streamload.formats.mds.text import iter_text_rows as mds_rows
from streamload.formats.text_columns import MissingColumnError

pa = pytest.importorskip("pyarrow")
pq = pytest.importorskip("pyarrow.parquet")

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "text"
EXPECTED: dict[str, list[dict[str, Any]]] = json.loads(
    (FIXTURES / "expected.json").read_text(encoding="utf-8")
)["files"]
TABLES = [name for name in EXPECTED if name.endswith((".parquet", ".arrow"))]
SHARDS = [name for name in EXPECTED if name.startswith("mds/")]


def rows_of(name: str, **options: Any) -> list[dict[str, Any]]:
    columns = ["text", "id"] if not name.startswith("mds/mixed") else ["text", "id", "meta"]
    read = mds_rows if name.startswith("mds/") else table_rows
    return list(read(str(FIXTURES / name), columns, **options))


def expected_rows(name: str, columns: tuple[str, ...] = ("text", "id")) -> list[dict[str, Any]]:
    if name.startswith("mds/mixed"):
        columns = ("text", "id", "meta")
    return [{c: row[c] for c in columns} for row in EXPECTED[name]]


def test_the_fixtures_cover_every_kind() -> None:
    assert len(TABLES) == 4 and len(SHARDS) == 5
    assert all(len(EXPECTED[n]) == 12 for n in ("to_parquet/train.parquet", "ipc_file/text.arrow"))


@pytest.mark.parametrize("name", TABLES)
@pytest.mark.parametrize("batch_rows", [1, 5, 1024])
def test_table_rows_are_the_tools_rows_in_order(name: str, batch_rows: int) -> None:
    assert rows_of(name, batch_rows=batch_rows) == expected_rows(name)


@pytest.mark.parametrize("name", SHARDS)
def test_mds_rows_are_streamings_samples_in_order(name: str) -> None:
    assert rows_of(name) == expected_rows(name)


def test_structs_and_json_columns_come_back_as_dicts() -> None:
    parquet = list(table_rows(str(FIXTURES / "to_parquet/train.parquet"), ["meta"]))
    mds = list(mds_rows(str(FIXTURES / "mds/mixed/shard.00000.mds"), ["meta", "score", "id"]))
    assert [r["meta"] for r in parquet] == [
        r["meta"] for r in EXPECTED["mds/mixed/shard.00000.mds"]
    ]
    assert mds[4] == {"meta": {"lang": "mixed"}, "score": 104, "id": 4}


def test_a_column_asked_twice_is_read_once() -> None:
    rows = list(table_rows(str(FIXTURES / "ipc_file/text.arrow"), ["id", "id"]))
    assert rows[0] == {"id": "t0"} and len(rows) == 12


@pytest.mark.parametrize(
    ("name", "have"),
    [
        ("to_parquet/train.parquet", "text, id, meta"),
        ("save_to_disk/data-00001-of-00002.arrow", "text, id, meta"),
        ("ipc_file/text.arrow", "id, text"),
        ("mds/zstd/shard.00000.mds.zstd", "id, text"),
    ],
)
def test_a_missing_column_names_the_file_and_its_columns(name: str, have: str) -> None:
    path = str(FIXTURES / name)
    read = mds_rows if name.startswith("mds/") else table_rows
    with pytest.raises(MissingColumnError) as info:
        list(read(path, ["id", "content"]))
    assert str(info.value) == f"{path} has no column 'content' (its columns: {have})"
    assert (info.value.column, info.value.available) == ("content", tuple(have.split(", ")))


@pytest.mark.parametrize("column", ["blob", "tokens"])
def test_an_mds_column_of_another_encoding_is_refused(column: str) -> None:
    path = str(FIXTURES / "mds/mixed/shard.00000.mds")
    encoding = {"blob": "pkl", "tokens": "ndarray:uint16"}[column]
    with pytest.raises(FormatError, match=f"column '{column}' is encoded '{encoding}'") as info:
        list(mds_rows(path, ["text", column]))
    assert str(info.value).startswith(path)


def corrupt_copy(tmp_path: Path, name: str, keep: int) -> str:
    data = (FIXTURES / name).read_bytes()
    path = tmp_path / Path(name).name
    path.write_bytes(data[:keep] if keep > 0 else data[-keep:])
    return str(path)


@pytest.mark.parametrize(
    ("name", "keep", "kind"),
    [
        ("to_parquet/train.parquet", 2000, "Parquet"),  # the footer is gone
        ("to_parquet/train.parquet", -3000, "Parquet"),  # the head is gone
        ("save_to_disk/data-00000-of-00002.arrow", 900, "Arrow IPC"),
        ("ipc_file/text.arrow", 1200, "Arrow IPC"),
    ],
)
def test_a_corrupt_or_truncated_file_is_refused_naming_it(
    tmp_path: Path, name: str, keep: int, kind: str
) -> None:
    path = corrupt_copy(tmp_path, name, keep)
    with pytest.raises(FormatError, match=r"truncated|corrupt|end-of-stream") as info:
        list(table_rows(path, ["text"]))
    assert str(info.value).startswith(path)


def test_a_damaged_mds_shard_is_refused(tmp_path: Path) -> None:
    folder = tmp_path / "plain"
    shutil.copytree(FIXTURES / "mds/plain", folder)
    shard = folder / "shard.00000.mds"
    data = bytearray(shard.read_bytes())
    at = data.index(b"quick")
    data[at] = 0xFF  # not UTF-8
    shard.write_bytes(bytes(data))
    with pytest.raises(FormatError, match=r"row 1 \(sample 0\) has a column 'text'") as info:
        list(mds_rows(str(shard), ["text"]))
    assert str(info.value).startswith(str(shard))
    shard.write_bytes(bytes(data[:-5]))
    with pytest.raises(FormatError, match=r"bytes but index\.json says"):
        list(mds_rows(str(shard), ["text"]))


def test_an_mds_shard_without_its_index_is_refused(tmp_path: Path) -> None:
    shutil.copy(FIXTURES / "mds/plain/shard.00001.mds", tmp_path)
    with pytest.raises(FormatError, match=r"index.json is missing"):
        list(mds_rows(str(tmp_path / "shard.00001.mds"), ["text"]))


def test_another_suffix_and_bad_batch_rows_are_refused() -> None:
    with pytest.raises(FormatError, match=r"x\.csv: not a \.parquet or \.arrow file"):
        table_rows("x.csv", ["text"])
    with pytest.raises(ConfigError, match="batch_rows is 0"):
        table_rows(str(FIXTURES / "ipc_file/text.arrow"), ["text"], batch_rows=0)


def test_missing_pyarrow_says_which_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "pyarrow", None)
    with pytest.raises(FormatError, match=r"needs pyarrow; install it with pip install"):
        table_rows(str(FIXTURES / "to_parquet/train.parquet"), ["text"])


def test_remote_files_are_read_through_fsspec_with_storage_options() -> None:
    fs = fsspec.filesystem("memory")
    names = [
        "to_parquet/train.parquet",
        "save_to_disk/data-00000-of-00002.arrow",
        "mds/zstd/index.json",
        "mds/zstd/shard.00001.mds.zstd",
    ]
    for name in names:
        fs.pipe(f"/text-rows/{name}", (FIXTURES / name).read_bytes())
    options = {"skip_instance_cache": True}
    try:
        for name in names[:2]:
            got = list(table_rows(f"memory://text-rows/{name}", ["text", "id"], options))
            assert got == expected_rows(name)
        url = "memory://text-rows/mds/zstd/shard.00001.mds.zstd"
        assert list(mds_rows(url, ["text", "id"], options)) == expected_rows(names[3])
    finally:
        fs.rm("/text-rows", recursive=True)
