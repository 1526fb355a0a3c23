"""A folder of Hub-sized Parquet files: names, sizes, order, round trips, masks, failures."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from streamload.catalog.sources import describe_source
from streamload.config import SourceConfig
from streamload.errors import ConfigError
from streamload.formats import open_shard
from streamload.formats.arrow.parquet_folder import (
    MAX_FILE_BYTES,
    ParquetFolderWriter,
    hub_file_name,
)
from streamload.formats.loss_mask import mask_shard
from tests.helpers.shards import documents

INTEGERS = ["uint8", "int8", "uint16", "int16", "uint32", "int32", "uint64", "int64"]


def read_documents(folder: Path) -> list[list[int]]:
    catalog = describe_source(SourceConfig(name="p", path=str(folder)))
    return [doc for info in catalog.shards for doc in documents(open_shard(info))]


def write(folder: Path, docs: list[list[int]], dtype: str, **kw: object) -> Path:
    with ParquetFolderWriter(folder, dtype, **kw) as writer:  # type: ignore[arg-type]
        for doc in docs:
            writer.add_document(np.asarray(doc, dtype=dtype))
    return folder


def test_the_docstring_example(tmp_path: Path) -> None:
    docs = [[1] * 100, [2] * 100, [3] * 50]
    folder = write(tmp_path / "out", docs, "uint16", max_file_bytes=450)
    names = sorted(p.name for p in folder.iterdir())
    assert names == ["train-00000-of-00002.parquet", "train-00001-of-00002.parquet"]
    assert [pq.read_metadata(folder / n).num_rows for n in names] == [2, 1]
    assert read_documents(folder) == docs
    assert MAX_FILE_BYTES == 500_000_000
    assert hub_file_name("train", 3, 12) == "train-00003-of-00012.parquet"


@settings(
    max_examples=20, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    lengths=st.lists(st.integers(0, 80), max_size=30),
    dtype=st.sampled_from(INTEGERS),
    limit=st.sampled_from([1, 60, 400, MAX_FILE_BYTES]),
    row_group_tokens=st.sampled_from([7, 1 << 20]),
    seed=st.integers(0, 1000),
)
def test_round_trip(
    tmp_path_factory: pytest.TempPathFactory,
    lengths: list[int],
    dtype: str,
    limit: int,
    row_group_tokens: int,
    seed: int,
) -> None:
    """Any documents (empty ones too), any dtype, any file limit: the folder reads back as
    written, in order (our reader and pyarrow's dataset reader); every file holds whole
    rows within the limit (empty rows may pass it), or one row with tokens; the names count
    the files."""
    info = np.iinfo(dtype)
    rng = np.random.default_rng(seed)
    docs = [
        rng.integers(info.min, info.max, n, dtype=dtype, endpoint=True).tolist() for n in lengths
    ]
    folder = tmp_path_factory.mktemp("pq") / "out"
    write(folder, docs, dtype, max_file_bytes=limit, row_group_tokens=row_group_tokens)
    names = sorted(p.name for p in folder.iterdir())
    assert names == [hub_file_name("train", i, len(names)) for i in range(len(names))]
    width = np.dtype(dtype).itemsize
    for name in names:
        rows = pq.read_table(folder / name).column("input_ids").to_pylist()
        data = sum(len(r) * width + 4 for r in rows)
        tokens = sum(map(len, rows))
        assert tokens > 0 or len(names) == 1
        empties = sum(not r for r in rows)
        assert data <= limit + 4 * empties or sum(bool(r) for r in rows) == 1
    assert pq.read_table(folder).column("input_ids").to_pylist() == docs
    if sum(lengths):
        assert read_documents(folder) == docs


def test_masks_are_a_column_of_each_file(tmp_path: Path) -> None:
    docs = [[5, 6, 0], [7, 0], [8, 9, 10, 0]]
    with ParquetFolderWriter(
        tmp_path / "out", "uint16", max_file_bytes=18, save_loss_masks=True
    ) as w:
        for doc in docs:
            w.add_document(np.array(doc), loss_mask=np.array(doc) != 0)
    # the limit counts the mask column too: [5, 6, 0] is 6 + 4 bytes of tokens, 3 + 4 of flags
    names = sorted(p.name for p in (tmp_path / "out").iterdir())
    assert names == [f"train-0000{i}-of-00003.parquet" for i in range(3)]
    table = pq.read_table(tmp_path / "out")
    assert table.column("labels_mask").to_pylist() == [[1, 1, 0], [1, 0], [1, 1, 1, 0]]
    assert table.schema.field("labels_mask").type == pa.list_(pa.uint8())
    catalog = describe_source(SourceConfig(name="p", path=str(tmp_path / "out")))
    assert [i.meta["mask_column"] for i in catalog.shards] == ["labels_mask"] * 3
    masks = [open_shard(mask_shard(i)).tokens(0, i.num_tokens).tolist() for i in catalog.shards]
    assert masks == [[1, 1, 0], [1, 0], [1, 1, 1, 0]]


def test_no_documents_make_one_empty_file(tmp_path: Path) -> None:
    write(tmp_path / "out", [], "int32")
    assert [p.name for p in (tmp_path / "out").iterdir()] == ["train-00000-of-00001.parquet"]


def test_a_failure_publishes_nothing_and_an_existing_folder_is_kept(tmp_path: Path) -> None:
    with (
        pytest.raises(ValueError, match="does not fit uint8"),
        ParquetFolderWriter(tmp_path / "out", "uint8", max_file_bytes=1) as writer,
    ):
        writer.add_document(np.array([1, 2]))
        writer.add_document(np.array([300]))
    assert list(tmp_path.iterdir()) == []
    (tmp_path / "taken").mkdir()
    (tmp_path / "taken" / "x").write_text("x")
    with pytest.raises(ConfigError, match="already exists"):
        ParquetFolderWriter(tmp_path / "taken", "uint16")
    with pytest.raises(ValueError, match="must be >= 1"):
        ParquetFolderWriter(tmp_path / "new", "uint16", max_file_bytes=0)
