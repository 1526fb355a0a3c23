"""Arrow IPC token datasets: ``datasets.save_to_disk`` fixtures, IPC files, errors, loader."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from streamload import build_loader
from streamload.catalog.sources import SourceCatalog, describe_source
from streamload.config import SourceConfig
from streamload.errors import FormatError
from streamload.formats import open_shard
from streamload.formats.arrow.arrow import ArrowShard, is_arrow_ipc
from streamload.testing import assert_resumes_exactly, collect_global_batches
from streamload.tools.convert import convert, open_output
from tests.helpers.paths import TESTS
from tests.helpers.shards import documents

HF = TESTS / "fixtures" / "hf"
EXPECTED: dict[str, Any] = json.loads((HF / "expected.json").read_text())["files"]
ARROW_FILES = sorted(k for k in EXPECTED if k.endswith(".arrow"))


def describe(path: Path | str, **kw: Any) -> SourceCatalog:
    return describe_source(SourceConfig(name="a", path=str(path), **kw))


def write_stream(path: Path, table: pa.Table, max_chunksize: int | None = None) -> Path:
    with pa.ipc.new_stream(str(path), table.schema) as writer:
        for batch in table.to_batches(max_chunksize=max_chunksize):
            writer.write_batch(batch)
    return path


def token_table(docs: list[list[int]], kind: pa.DataType | None = None) -> pa.Table:
    return pa.table({"input_ids": pa.array(docs, kind or pa.list_(pa.int32()))})


@pytest.mark.parametrize("name", ARROW_FILES)
def test_fixtures_read_back_as_the_tools_read_them(name: str) -> None:
    want = EXPECTED[name]
    (info,) = describe(HF / name, column=want["column"]).shards
    assert info.format == "arrow"
    assert np.dtype(info.dtype) == np.dtype(want["value_type"])
    assert info.meta["documents"] == len(want["documents"])
    shard = open_shard(info)
    assert documents(shard) == want["documents"]
    flat = [t for doc in want["documents"] for t in doc]
    assert shard.tokens(0, info.num_tokens).tolist() == flat


def test_save_to_disk_folder_is_one_source_in_row_order() -> None:
    catalog = describe(HF / "save_to_disk")
    names = [Path(i.path).name for i in catalog.shards]
    assert names == ["data-00000-of-00002.arrow", "data-00001-of-00002.arrow"]
    assert [i.meta["ipc"] for i in catalog.shards] == ["stream", "stream"]
    assert [i.meta["batches"] for i in catalog.shards] == [2, 2]
    assert catalog.shards[0].meta["list_columns"] == "loss_mask"
    got = [d for info in catalog.shards for d in documents(open_shard(info))]
    want = [d for n in names for d in EXPECTED[f"save_to_disk/{n}"]["documents"]]
    assert got == want and [] in got  # the empty document is kept


def test_one_record_batch_is_one_mapped_array() -> None:
    (info,) = describe(HF / "save_to_disk_int64", column="tokens").shards
    shard = open_shard(info)
    assert isinstance(shard, ArrowShard) and shard.remote_array is None
    first, second = shard.tokens(0, 5), shard.tokens(2, 9)
    assert np.shares_memory(first, second)  # views of one buffer, no copy
    assert not first.flags.writeable


def test_ranges_inside_and_across_record_batches() -> None:
    (info,) = describe(HF / "ipc_file").shards  # 3 record batches
    shard = open_shard(info)
    assert not hasattr(shard, "remote_array")  # windows read one by one
    flat = [t for d in EXPECTED["ipc_file/tokens.arrow"]["documents"] for t in d]
    for start in range(len(flat) + 1):
        for stop in range(start, len(flat) + 2):
            assert shard.tokens(start, stop).tolist() == flat[start:stop]


@settings(max_examples=25, deadline=None)
@given(
    docs=st.lists(st.lists(st.integers(0, 2**31 - 1), max_size=6), min_size=1, max_size=20),
    chunk=st.integers(1, 7),
    large=st.booleans(),
)
def test_any_batching_reads_back_documents(
    tmp_path_factory: pytest.TempPathFactory, docs: list[list[int]], chunk: int, large: bool
) -> None:
    if not any(docs):
        docs = [*docs, [1]]
    kind = pa.large_list(pa.int64()) if large else pa.list_(pa.int32())
    path = write_stream(tmp_path_factory.mktemp("a") / "x.arrow", token_table(docs, kind), chunk)
    (info,) = describe(path).shards
    assert np.dtype(info.dtype) == (np.int64 if large else np.int32)
    assert documents(open_shard(info)) == docs


def test_sniffed_by_content_not_by_name(tmp_path: Path) -> None:
    stream = (HF / "save_to_disk" / "data-00000-of-00002.arrow").read_bytes()
    assert is_arrow_ipc(stream[:16])
    assert is_arrow_ipc((HF / "ipc_file" / "tokens.arrow").read_bytes()[:16])
    assert not is_arrow_ipc(b"\xff\xff\xff\xff" + b"\x07\x00\x00\x00" + bytes(8))
    (tmp_path / "renamed.bin").write_bytes(stream)  # any name: the content decides
    (info,) = describe(tmp_path / "renamed.bin").shards
    assert info.format == "arrow" and info.num_tokens == 32
    (tmp_path / "fake.arrow").write_bytes(np.arange(8, dtype=np.uint16).tobytes())
    with pytest.raises(FormatError, match="headerless token file"):  # not arrow: raw
        describe(tmp_path / "fake.arrow")


def test_missing_column_lists_the_columns() -> None:
    with pytest.raises(FormatError) as err:
        describe(HF / "save_to_disk_int64")
    assert "no column 'input_ids'; the file has columns tokens" in str(err.value)
    assert "data-00000-of-00001.arrow" in str(err.value)


@pytest.mark.parametrize(
    ("kind", "match"),
    [
        (pa.list_(pa.float32()), r"column 'input_ids' holds float values; token ids must be"),
        (pa.list_(pa.string()), r"holds string values"),
        (pa.int64(), r"column 'input_ids' is int64; expected a list of integer token ids"),
    ],
)
def test_wrong_column_types_are_refused(tmp_path: Path, kind: pa.DataType, match: str) -> None:
    values: list[Any] = [["1"]] if kind == pa.list_(pa.string()) else [[1.0]]
    column = pa.array([1] if kind == pa.int64() else values, kind)
    write_stream(tmp_path / "x.arrow", pa.table({"input_ids": column}))
    with pytest.raises(FormatError, match=match):
        describe(tmp_path / "x.arrow")


def test_nulls_are_refused(tmp_path: Path) -> None:
    with pytest.raises(FormatError, match=r"record batch 0: column 'input_ids' holds 1 null"):
        describe(HF / "bad" / "null_token.arrow")
    write_stream(tmp_path / "x.arrow", token_table([[1, 2], None, [3]]))  # type: ignore[list-item]
    with pytest.raises(FormatError, match=r"1 null row\(s\), the first at row 1"):
        describe(tmp_path / "x.arrow")


def test_configured_dtype_must_match(tmp_path: Path) -> None:
    assert describe(HF / "ipc_file", dtype="uint32").shards[0].dtype == "<u4"
    with pytest.raises(FormatError, match=r"holds uint32 tokens but the config says dtype"):
        describe(HF / "ipc_file", dtype="uint16")


def test_truncated_and_padded_streams_are_refused(tmp_path: Path) -> None:
    data = (HF / "save_to_disk" / "data-00000-of-00002.arrow").read_bytes()
    for cut in (100, len(data) // 2, len(data) - 8, len(data) - 3):
        (tmp_path / "x.arrow").write_bytes(data[:cut])
        with pytest.raises(FormatError, match=r"x\.arrow: .*truncated"):
            describe(tmp_path / "x.arrow")
    (tmp_path / "x.arrow").write_bytes(data + bytes(8))
    with pytest.raises(FormatError, match="8 bytes follow the Arrow stream's end-of-stream"):
        describe(tmp_path / "x.arrow")
    ipc = (HF / "ipc_file" / "tokens.arrow").read_bytes()
    (tmp_path / "y.arrow").write_bytes(ipc[:-10])
    with pytest.raises(FormatError, match=r"y\.arrow: not a readable Arrow IPC file"):
        describe(tmp_path / "y.arrow")


def test_a_file_changed_after_start_up_is_refused(tmp_path: Path) -> None:
    path = write_stream(tmp_path / "x.arrow", token_table([[1, 2, 3], [4]]))
    (info,) = describe(path).shards
    write_stream(path, token_table([[1, 2, 3], [5]]))  # same size, other tokens: fine
    assert open_shard(info).tokens(0, 4).tolist() == [1, 2, 3, 5]
    write_stream(path, token_table([[1, 2, 3, 4], [5]]))
    with pytest.raises(FormatError, match=r"x\.arrow: file is .* bytes but was"):
        open_shard(info)


def loader_config(path: Path, mode: str = "concat", **source: Any) -> dict[str, Any]:
    sampling: dict[str, Any] = {"shuffle": True, "mode": mode}
    return {
        "seq_len": 4,
        "seed": 5,
        "eos_token_id": 0,
        "pad_token_id": 1,
        "vocab_size": 300,
        "sources": [{"name": "hf", "path": str(path), **source}],
        "sampling": sampling,
        "packing": {"masks": True},
    }


def as_megatron(tmp_path: Path) -> Path:
    """The save_to_disk fixture converted to Megatron (documents kept)."""
    catalog = describe(HF / "save_to_disk")
    prefix = tmp_path / "mega" / "data_text_document"
    prefix.parent.mkdir()
    convert(catalog, open_output(catalog, "megatron", str(prefix)))
    return prefix


@pytest.mark.filterwarnings("ignore:each pass of")
@pytest.mark.parametrize("mode", ["concat", "packed"])
def test_loader_equals_the_same_documents_in_megatron_and_resumes(
    tmp_path: Path, mode: str
) -> None:
    arrow = loader_config(HF / "save_to_disk", mode)
    mega = loader_config(as_megatron(tmp_path), mode)
    got = collect_global_batches([build_loader(arrow, batch_size=3)])
    want = collect_global_batches([build_loader(mega, batch_size=3)])
    assert len(got) == len(want) > 3
    for a, b in zip(got, want, strict=True):
        assert a.keys() == b.keys()
        for key in a:
            assert a[key].equal(b[key]), key
    assert_resumes_exactly(lambda: build_loader(arrow, batch_size=3), passes=2)


def test_loader_with_a_named_column_and_workers(tmp_path: Path) -> None:
    shutil.copytree(HF / "save_to_disk_int64", tmp_path / "d")
    cfg = loader_config(tmp_path / "d", column="tokens")
    one = collect_global_batches([build_loader(cfg, batch_size=3)])
    two = collect_global_batches([build_loader(cfg, batch_size=3, num_workers=2)])
    assert len(one) == len(two) > 1
    for a, b in zip(one, two, strict=True):
        assert a["input_ids"].equal(b["input_ids"])
