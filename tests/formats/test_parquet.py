"""Parquet token datasets: ``to_parquet``/``write_table`` fixtures, the row-group cache, the
writer (pyarrow reads it back), errors, loader."""

from __future__ import annotations

import dataclasses
import io
import json
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from streamload import build_loader
from streamload.catalog.sources import SourceCatalog, describe_source
from streamload.config import SourceConfig
from streamload.errors import FormatError
from streamload.formats import open_shard
from streamload.formats.arrow._row_groups import RowGroupCache, row_groups
from streamload.formats.arrow.arrow import FORMAT as ARROW
from streamload.formats.arrow.columns import arrow_errors
from streamload.formats.arrow.parquet import FORMAT, ParquetShard, ParquetWriter
from streamload.formats.base import ListedFile, ReadOptions
from streamload.testing import assert_resumes_exactly, collect_global_batches
from tests.helpers.paths import TESTS
from tests.helpers.shards import documents

HF = TESTS / "fixtures" / "hf"
EXPECTED: dict[str, Any] = json.loads((HF / "expected.json").read_text())["files"]
PARQUET_FILES = sorted(k for k in EXPECTED if k.endswith(".parquet"))


def describe(path: Path | str, **kw: Any) -> SourceCatalog:
    return describe_source(SourceConfig(name="p", path=str(path), **kw))


def write(path: Path, docs: list[list[int]], dtype: Any = np.uint16, rg: int = 4) -> Path:
    with ParquetWriter(path, dtype, row_group_tokens=rg) as writer:
        for doc in docs:
            writer.add_document(np.asarray(doc, dtype=np.int64))
    return path


@pytest.mark.parametrize("name", PARQUET_FILES)
def test_fixtures_read_back_as_the_tools_read_them(name: str) -> None:
    want = EXPECTED[name]
    (info,) = describe(HF / name).shards
    assert info.format == "parquet"
    assert np.dtype(info.dtype) == np.dtype(want["value_type"])
    assert (info.meta["documents"], info.meta["row_groups"]) == (len(want["documents"]), 3)
    # one row group of each holds an empty document, a null value to the footer statistics:
    # that row group is decoded at describe, the other two are counted from the footer
    assert (info.meta["counts_from"], info.meta["decoded_row_groups"]) == ("decoded", 1)
    pf = pq.ParquetFile(HF / name)
    assert info.meta["row_group_tokens"] == [
        sum(map(len, pf.read_row_group(g).column(0).to_pylist())) for g in range(3)
    ]
    shard = open_shard(info)
    assert documents(shard) == want["documents"]
    flat = [t for doc in want["documents"] for t in doc]
    for start in range(0, len(flat) + 1, 3):
        for stop in range(start, len(flat) + 2, 2):
            assert shard.tokens(start, stop).tolist() == flat[start:stop]


def test_a_window_inside_a_row_group_is_a_view_of_the_decoded_group() -> None:
    (info,) = describe(HF / "write_table").shards
    shard = open_shard(info)
    assert isinstance(shard, ParquetShard)
    bounds = shard.document_bounds()
    first, second = shard.tokens(0, 3), shard.tokens(1, int(bounds[3]))
    assert np.shares_memory(first, second)


def test_row_groups_are_decoded_once_and_the_cache_is_bounded() -> None:
    row_groups.clear()
    (info,) = describe(HF / "to_parquet").shards
    shard = open_shard(info)
    shard.tokens(0, info.num_tokens)
    held = row_groups.nbytes
    assert held > 0
    shard.tokens(0, info.num_tokens)
    assert row_groups.nbytes == held  # nothing decoded again
    small = RowGroupCache(max_bytes=10)
    calls: list[int] = []

    def decode(n: int) -> tuple[np.ndarray, np.ndarray]:
        calls.append(n)
        return np.zeros(n, np.int32), np.zeros(2, np.int64)

    for key in (1, 2, 1, 1):
        small.get(key, lambda k=key: decode(k))
    assert calls == [1, 2, 1]  # 1 evicted by 2, which stays as the only entry above the bound
    assert small.nbytes == 4 + 16


def test_footer_statistics_without_nulls_are_a_footer_read(tmp_path: Path) -> None:
    write(tmp_path / "x.parquet", [[1, 2, 3], [4, 5], [6], [7, 8, 9, 10]], rg=3)
    (info,) = describe(tmp_path / "x.parquet").shards
    assert info.meta["counts_from"] == "statistics"
    assert (info.meta["decoded_row_groups"], info.meta["row_group_tokens"]) == (0, [3, 3, 4])


def test_open_uses_the_row_group_counts_of_describe(tmp_path: Path) -> None:
    """Opening decodes nothing: the counts come from the description, and a row group that
    decodes to another count than described is refused when read."""
    write(tmp_path / "x.parquet", [[1, 2, 3], [4, 5], [6], [7, 8, 9, 10]], rg=3)
    (info,) = describe(tmp_path / "x.parquet").shards
    moved = dataclasses.replace(info, meta={**info.meta, "row_group_tokens": [4, 2, 4]})
    shard = open_shard(moved)
    with pytest.raises(FormatError, match=r"row group 0 holds 3 tokens .* but held 4 at start"):
        shard.tokens(0, 2)
    fewer = dataclasses.replace(info, meta={**info.meta, "row_group_tokens": [6, 4]})
    with pytest.raises(FormatError, match=r"x\.parquet: 3 row groups now but 2 row groups"):
        open_shard(fewer)


def test_network_errors_are_not_corrupt_files() -> None:
    """An OSError subclass from a remote file (a reset connection) reaches the retry layer
    unchanged; pyarrow's plain OSError (a corrupt file) is a FormatError."""
    for name, reader in (
        ("to_parquet/train-00000-of-00001.parquet", FORMAT),
        ("ipc_file/tokens.arrow", ARROW),
    ):
        data = (HF / name).read_bytes()
        file = ListedFile(f"memory://{name}", name, len(data))
        with pytest.raises(ConnectionResetError, match="peer reset"):
            reader.describe(ResettingFS(data), file, ReadOptions())
    with pytest.raises(TimeoutError), arrow_errors("x.parquet", "Parquet"):
        raise TimeoutError("timed out")
    corrupt = pytest.raises(FormatError, match=r"x\.parquet: not a readable Parquet file")
    with corrupt, arrow_errors("x.parquet", "Parquet"):
        raise OSError("Couldn't deserialize thrift")


class ResettingFS:
    """A file system whose files lose their connection after the first 4 bytes."""

    def __init__(self, data: bytes) -> None:
        self.data = data

    def open(self, path: str, mode: str = "rb", **kw: Any) -> io.BytesIO:
        return _Resetting(self.data)


class _Resetting(io.BytesIO):
    def read(self, n: int | None = -1) -> bytes:
        if self.tell() >= 4:
            raise ConnectionResetError("peer reset")
        return super().read(n)


def test_row_group_counts_without_statistics_come_from_decoding(tmp_path: Path) -> None:
    table = pa.table({"input_ids": pa.array([[1, 2], [], [3]], pa.list_(pa.int32()))})
    pq.write_table(table, tmp_path / "x.parquet", write_statistics=False, row_group_size=2)
    (info,) = describe(tmp_path / "x.parquet").shards
    assert info.meta["counts_from"] == "decoded"
    assert documents(open_shard(info)) == [[1, 2], [], [3]]


@settings(max_examples=30, deadline=None)
@given(
    docs=st.lists(st.lists(st.integers(0, 2**16 - 1), max_size=9), min_size=1, max_size=30),
    rg=st.integers(1, 20),
)
def test_streamload_writes_what_pyarrow_and_streamload_read_back(
    tmp_path_factory: pytest.TempPathFactory, docs: list[list[int]], rg: int
) -> None:
    path = write(tmp_path_factory.mktemp("p") / "x.parquet", docs, np.uint16, rg)
    table = pq.read_table(path)
    assert table.schema.field("input_ids").type == pa.list_(pa.uint16())
    assert table.column("input_ids").to_pylist() == docs
    metadata = pq.ParquetFile(path).metadata
    tokens = [len(d) for d in docs]
    assert metadata.num_row_groups == len(_groups(tokens, rg))
    if sum(tokens):
        (info,) = describe(path).shards
        assert documents(open_shard(info)) == docs


def _groups(lengths: list[int], limit: int) -> list[list[int]]:
    """The row groups the writer makes: whole documents until one reaches ``limit`` tokens."""
    groups: list[list[int]] = [[]]
    for n in lengths:
        groups[-1].append(n)
        if sum(groups[-1]) >= limit:
            groups.append([])
    return [g for g in groups if g]


def test_writer_is_atomic_and_checks_ids(tmp_path: Path) -> None:
    with pytest.raises(RuntimeError), ParquetWriter(tmp_path / "x.parquet", np.uint16) as w:
        w.add_document(np.array([1, 2]))
        raise RuntimeError("interrupted")
    assert list(tmp_path.iterdir()) == []
    with (
        pytest.raises(ValueError, match="token id 70000 does not fit uint16"),
        ParquetWriter(tmp_path / "x.parquet", np.uint16) as w,
    ):
        w.add_document(np.array([70000]))
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(
    ("name", "match"),
    [
        ("floats.parquet", r"floats.parquet: column 'input_ids' holds float values"),
        ("null_row.parquet", r"row group 0: column 'input_ids' has 1 null row\(s\), the first"),
    ],
)
def test_bad_fixtures_are_refused_at_describe(name: str, match: str) -> None:
    with pytest.raises(FormatError, match=match):
        describe(HF / "bad" / name)


def test_missing_column_and_dtype_mismatch(tmp_path: Path) -> None:
    table = pa.table({"text": ["a"], "tokens": pa.array([[1, 2]], pa.list_(pa.int64()))})
    pq.write_table(table, tmp_path / "x.parquet")
    with pytest.raises(FormatError, match=r"no column 'input_ids'; the file has columns text, t"):
        describe(tmp_path / "x.parquet")
    (info,) = describe(tmp_path / "x.parquet", column="tokens").shards
    assert (info.dtype, info.num_tokens) == ("<i8", 2)
    with pytest.raises(FormatError, match=r"holds int64 tokens but the config says dtype"):
        describe(tmp_path / "x.parquet", column="tokens", dtype="int32")


def test_truncated_or_corrupt_files_are_refused(tmp_path: Path) -> None:
    data = (HF / "to_parquet" / "train-00000-of-00001.parquet").read_bytes()
    for cut in (len(data) // 2, len(data) - 4):
        (tmp_path / "x.parquet").write_bytes(data[:cut])
        with pytest.raises(FormatError, match=r"x\.parquet: not a readable Parquet file"):
            describe(tmp_path / "x.parquet")
    (tmp_path / "x.parquet").write_bytes(data[:4] + bytes(len(data) - 4))
    with pytest.raises(FormatError, match=r"x\.parquet: not a readable Parquet file"):
        describe(tmp_path / "x.parquet")


def test_footer_statistics_that_lie_are_caught_when_decoding(tmp_path: Path) -> None:
    """A file replaced after start-up by one of equal size with other row groups."""
    write(tmp_path / "x.parquet", [[1, 2, 3], [4, 5]], rg=100)
    (info,) = describe(tmp_path / "x.parquet").shards
    write(tmp_path / "x.parquet", [[1, 2], [4, 5, 6]], rg=100)
    assert documents(open_shard(info)) == [[1, 2], [4, 5, 6]]  # same count: read as it is now
    write(tmp_path / "x.parquet", [[1, 2], [4]], rg=100)
    with pytest.raises(FormatError, match=r"x\.parquet: (file is|\d+ row groups now)"):
        open_shard(info)


def loader_config(path: Path, mode: str = "concat") -> dict[str, Any]:
    return {
        "seq_len": 4,
        "seed": 7,
        "eos_token_id": 0,
        "pad_token_id": 1,
        "vocab_size": 300,
        "sources": [{"name": "hf", "path": str(path)}],
        "sampling": {"shuffle": True, "mode": mode},
        "packing": {"masks": True},
    }


@pytest.mark.filterwarnings("ignore:each pass of")
@pytest.mark.parametrize("mode", ["concat", "packed"])
def test_loader_equals_the_same_documents_as_arrow_and_resumes(mode: str) -> None:
    """``write_table/tokens.parquet`` and ``ipc_file/tokens.arrow`` hold the same table."""
    parquet = loader_config(HF / "write_table", mode)
    parquet["vocab_size"] = 70000
    arrow = {**parquet, "sources": [{"name": "hf", "path": str(HF / "ipc_file")}]}
    got = collect_global_batches([build_loader(parquet, batch_size=2)])
    want = collect_global_batches([build_loader(arrow, batch_size=2)])
    assert len(got) == len(want) > 3
    for a, b in zip(got, want, strict=True):
        assert a.keys() == b.keys()
        for key in a:
            assert a[key].equal(b[key]), key
    assert_resumes_exactly(lambda: build_loader(parquet, batch_size=2, num_workers=1), passes=2)


@pytest.mark.filterwarnings("ignore:each pass of")
@pytest.mark.parametrize(
    ("folder", "names"),
    [
        ("to_parquet", ["train-00000-of-00001.parquet"]),
        ("save_to_disk", ["data-00000-of-00002.arrow", "data-00001-of-00002.arrow"]),
    ],
)
def test_remote_files_read_through_the_storage_layer(
    tmp_path: Path, folder: str, names: list[str]
) -> None:
    """Over HTTP the batches equal the local ones: Parquet read by range, Arrow copied
    whole into the disk cache, then mapped."""
    from tests.servers.http import RangeFileServer

    local = loader_config(HF / folder)
    with RangeFileServer(HF / folder) as server:
        remote = loader_config(HF / folder)
        remote["sources"][0]["path"] = [f"{server.url}/{n}" for n in names]
        remote["storage"] = {"cache_dir": str(tmp_path / "cache"), "retries": 2, "timeout": 5.0}
        got = collect_global_batches([build_loader(remote, batch_size=2)])
    want = collect_global_batches([build_loader(local, batch_size=2)])
    assert len(got) == len(want) > 2
    for a, b in zip(got, want, strict=True):
        for key in a:
            assert a[key].equal(b[key]), key
