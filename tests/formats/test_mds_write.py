"""streamload's MDS writer: MDSWriter's bytes, Streaming's read-back, round trips, errors.

``tests/fixtures/mds_streamload/`` holds folders our writer wrote, which mosaicml-streaming
read back (``tool_samples``) and rewrote byte for byte (``identical_to_tool``); here they
are rewritten with our writer (same bytes) and read with our reader (Streaming's samples),
without the tool. The layout also reproduces the committed MDSWriter fixtures of
``tests/fixtures/mds/`` (with their ``id`` column) byte for byte.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from streamload.catalog.sources import describe_source
from streamload.config import SourceConfig
from streamload.errors import ConfigError
from streamload.formats import open_shard
from streamload.formats.mds.mds import MdsWriter
from streamload.formats.mds.write import MdsShards, encode_ndarray
from tests.helpers.extras import has_module, needs
from tests.helpers.paths import TESTS, load_script
from tests.helpers.shards import documents

OURS = TESTS / "fixtures" / "mds_streamload"
SCRIPT = load_script(OURS / "make_fixtures.py")
EXPECTED = json.loads((OURS / "expected.json").read_text())
TOOL_FIXTURES = TESTS / "fixtures" / "mds"
TOOL_DOCS = [[7, 8, 9, 0], [12, 13, 0], [22, 23, 24, 25, 26, 0], [32, 0], [40, 41, 42, 0]]
INTEGERS = ["uint8", "int8", "uint16", "int16", "uint32", "int32", "uint64", "int64"]


def read_documents(folder: Path, **kw: Any) -> list[list[int]]:
    catalog = describe_source(SourceConfig(name="m", path=str(folder), **kw))
    return [doc for info in catalog.shards for doc in documents(open_shard(info))]


def files(folder: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir())}


def write(folder: Path, docs: list[list[int]], dtype: str, **kw: Any) -> Path:
    with MdsWriter(folder, dtype, **kw) as writer:
        for doc in docs:
            writer.add_document(np.asarray(doc, dtype=dtype))
    return folder


def test_the_tool_wrote_the_same_bytes_and_read_our_samples() -> None:
    assert EXPECTED["tool"] == "mosaicml-streaming 0.13.0"
    assert set(EXPECTED["datasets"]) == set(SCRIPT.DATASETS)
    for name, entry in EXPECTED["datasets"].items():
        ours = sorted(p.name for p in (OURS / name).iterdir() if p.suffix != ".loss")
        assert sorted(entry["identical_to_tool"]) == ours
        assert all(entry["identical_to_tool"].values()), name
        dtype = entry["params"]["dtype"]
        assert entry["tool_samples"] == [
            SCRIPT.sample_record(d, dtype) for d in SCRIPT.documents(name)
        ]


@pytest.mark.parametrize("name", sorted(SCRIPT.DATASETS))
def test_our_writer_rewrites_the_checked_files(tmp_path: Path, name: str) -> None:
    if "zstd" in name:
        needs("zstandard", "mds")
    params = EXPECTED["datasets"][name]["params"]
    with MdsWriter(
        tmp_path / name,
        params["dtype"],
        compression=params["compression"],
        size_limit=params["size_limit"],
        save_loss_masks=params["loss_masks"],
    ) as writer:
        for doc in SCRIPT.documents(name):
            mask = np.arange(len(doc)) % 2 == 0 if params["loss_masks"] else None
            writer.add_document(np.asarray(doc, dtype=params["dtype"]), loss_mask=mask)
    assert files(tmp_path / name) == files(OURS / name)


@pytest.mark.parametrize("name", sorted(SCRIPT.DATASETS))
def test_our_reader_reads_what_streaming_read(name: str) -> None:
    if "zstd" in name:
        needs("zstandard", "mds")
    dtype = EXPECTED["datasets"][name]["params"]["dtype"]
    docs = read_documents(OURS / name)
    assert [SCRIPT.sample_record(d, dtype) for d in docs] == EXPECTED["datasets"][name][
        "tool_samples"
    ]


def test_masks_are_read_back_per_shard() -> None:
    catalog = describe_source(SourceConfig(name="m", path=str(OURS / "u16_masks")))
    masks = []
    for info in catalog.shards:
        assert info.loss_mask is not None and info.loss_mask.endswith(".mds.loss")
        masks += Path(info.loss_mask).read_bytes()
    expected = [int(i % 2 == 0) for d in SCRIPT.documents("u16_masks") for i in range(len(d))]
    assert masks == expected


@pytest.mark.parametrize(
    ("name", "dtype", "compression"), [("u16", "uint16", None), ("i32_zstd", "int32", "zstd")]
)
def test_the_layout_reproduces_mdswriter_fixtures(
    tmp_path: Path, name: str, dtype: str, compression: str | None
) -> None:
    """The committed MDSWriter fixtures (columns ``id: str``, ``tokens``; size_limit 300)."""
    if compression:
        needs("zstandard", "mds")
    shards = MdsShards(str(tmp_path), {"id": "str", "tokens": f"ndarray:{dtype}"},
                       compression=compression, size_limit=300)  # fmt: skip
    for i, doc in enumerate(TOOL_DOCS):
        shards.add({"id": f"d{i}".encode(), "tokens": encode_ndarray(np.array(doc, dtype))})
    shards.finish()
    assert files(tmp_path) == files(TOOL_FIXTURES / name)


@settings(
    max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    lengths=st.lists(st.integers(1, 300), max_size=25),
    dtype=st.sampled_from(INTEGERS),
    limit=st.sampled_from([200, 1000, 1 << 26]),
    zstd=st.booleans() if has_module("zstandard") else st.just(False),
    seed=st.integers(0, 1000),
)
def test_round_trip(
    tmp_path_factory: pytest.TempPathFactory,
    lengths: list[int],
    dtype: str,
    limit: int,
    zstd: bool,
    seed: int,
) -> None:
    """Any non-empty documents, any integer dtype (its extreme ids included), any shard size
    and compression: our reader returns the documents as written, in order."""
    info = np.iinfo(dtype)
    rng = np.random.default_rng(seed)
    docs = [
        rng.integers(info.min, info.max, n, dtype=dtype, endpoint=True).tolist() for n in lengths
    ]
    if docs:
        docs[0][0] = int(info.max)
    folder = tmp_path_factory.mktemp("mds") / "out"
    write(folder, docs, dtype, size_limit=limit, compression="zstd" if zstd else None)
    index = json.loads((folder / "index.json").read_text())
    assert sum(s["samples"] for s in index["shards"]) == len(docs)
    if docs:
        assert read_documents(folder) == docs
        # a shard passes the limit only when one sample alone does
        assert all(s["raw_data"]["bytes"] <= limit or s["samples"] == 1 for s in index["shards"])


def test_an_empty_document_is_refused_and_nothing_is_published(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="empty document cannot be an MDS sample"):
        write(tmp_path / "out", [[1, 2], []], "uint16")
    assert list(tmp_path.iterdir()) == []


def test_bad_arguments_are_refused_before_anything_is_written(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with pytest.raises(ValueError, match="compression 'gz' is not written"):
        MdsWriter(tmp_path / "a", "uint16", compression="gz")
    with pytest.raises(ValueError, match=r"size_limit 4294967296 must be in 1\.\."):
        MdsWriter(tmp_path / "a", "uint16", size_limit=1 << 32)
    with pytest.raises(ValueError, match="cannot hold token ids"):
        MdsWriter(tmp_path / "a", "float32")
    monkeypatch.setitem(sys.modules, "zstandard", None)
    with pytest.raises(ValueError, match=r"need the zstandard package.*streamload\[mds\]"):
        MdsWriter(tmp_path / "a", "uint16", compression="zstd")
    assert list(tmp_path.iterdir()) == []


def test_an_existing_folder_is_never_replaced(tmp_path: Path) -> None:
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "keep").write_text("x")
    with pytest.raises(ConfigError, match="already exists"):
        MdsWriter(tmp_path / "out", "uint16")
    assert (tmp_path / "out" / "keep").read_text() == "x"


def test_a_first_document_larger_than_the_limit_gets_no_empty_shard_before_it(
    tmp_path: Path,
) -> None:
    """MDSWriter writes an empty shard 0 here; streamload starts with the document's shard
    (a shard of no tokens is refused by readers)."""
    docs = [list(range(1, 201)), [5, 0], [6, 0]]
    folder = write(tmp_path / "out", docs, "uint16", size_limit=250)
    index = json.loads((folder / "index.json").read_text())
    assert [s["samples"] for s in index["shards"]] == [1, 2]
    assert read_documents(folder) == docs
