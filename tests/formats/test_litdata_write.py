"""streamload's LitData writer: optimize's bytes, litdata's read-back, round trips, errors.

``tests/fixtures/litdata_streamload/`` holds folders our writer wrote, which litdata read
back (``tool_stream``, ``tool_blocks_5``) and rewrote identically (``identical_to_tool``);
here they are rewritten with our writer and read with our reader, without the tool.
"""

from __future__ import annotations

import json
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
from streamload.formats.litdata.litdata import DEFAULT_CHUNK_BYTES, LitdataWriter
from tests.helpers.paths import TESTS, load_script

OURS = TESTS / "fixtures" / "litdata_streamload"
SCRIPT = load_script(OURS / "make_fixtures.py")
EXPECTED = json.loads((OURS / "expected.json").read_text())
INTEGERS = ["uint8", "int8", "uint16", "int16", "uint32", "int32", "uint64", "int64"]


def chunks_of(folder: Path) -> list[list[int]]:
    """Each chunk's tokens, as our reader reads the folder (in the order of ``index.json``,
    checked here: ``chunk-0-2.bin`` before ``chunk-0-10.bin``)."""
    catalog = describe_source(SourceConfig(name="l", path=str(folder)))
    index = json.loads((folder / "index.json").read_text())
    assert [s.relpath for s in catalog.shards] == [c["filename"] for c in index["chunks"]]
    return [open_shard(info).tokens(0, info.num_tokens).tolist() for info in catalog.shards]


def contents(folder: Path) -> dict[str, Any]:
    """Every file's bytes; ``index.json`` parsed without its time stamp."""
    out: dict[str, Any] = {p.name: p.read_bytes() for p in sorted(folder.iterdir())}
    index = json.loads(out.pop("index.json"))
    assert float(index.pop("updated_at")) > 0
    return {**out, "index.json": index}


def blocks(chunks: list[list[int]], size: int) -> list[list[int]]:
    """``TokensLoader(block_size=size)``'s blocks: within each chunk, remainders dropped."""
    return [c[i : i + size] for c in chunks for i in range(0, len(c) - size + 1, size)]


def test_the_tool_wrote_the_same_files() -> None:
    assert EXPECTED["tool"] == "litdata 0.2.76"
    assert set(EXPECTED["datasets"]) == set(SCRIPT.DATASETS)
    for name, entry in EXPECTED["datasets"].items():
        ours = sorted(p.name for p in (OURS / name).iterdir() if p.suffix != ".loss")
        assert sorted(entry["identical_to_tool"]) == ours
        assert all(entry["identical_to_tool"].values()), name


@pytest.mark.parametrize("name", sorted(SCRIPT.DATASETS))
def test_our_writer_rewrites_the_checked_files(tmp_path: Path, name: str) -> None:
    params = EXPECTED["datasets"][name]["params"]
    with LitdataWriter(
        tmp_path / name,
        params["dtype"],
        chunk_bytes=params["chunk_bytes"],
        chunk_size=params["chunk_size"],
        save_loss_masks=params["loss_masks"],
    ) as writer:
        for doc in SCRIPT.documents(name):
            mask = np.arange(len(doc)) % 2 == 0 if params["loss_masks"] else None
            writer.add_document(np.asarray(doc, dtype=params["dtype"]), loss_mask=mask)
    assert contents(tmp_path / name) == contents(OURS / name)


def test_the_same_bytes_as_litdatas_own_fixture(tmp_path: Path) -> None:
    """``u16_size10`` holds the documents litdata wrote into ``../litdata/u16_numpy``."""
    assert contents(OURS / "u16_size10") == contents(TESTS / "fixtures" / "litdata" / "u16_numpy")


@pytest.mark.parametrize("name", sorted(SCRIPT.DATASETS))
def test_our_reader_reads_what_litdata_read(name: str) -> None:
    entry = EXPECTED["datasets"][name]
    chunks = chunks_of(OURS / name)
    stream = [t for c in chunks for t in c]
    assert stream == entry["tool_stream"] == [t for d in SCRIPT.documents(name) for t in d]
    assert blocks(chunks, 5) == entry["tool_blocks_5"]
    if entry["params"]["loss_masks"]:
        catalog = describe_source(SourceConfig(name="l", path=str(OURS / name)))
        masks = [b for info in catalog.shards for b in Path(str(info.loss_mask)).read_bytes()]
        docs = SCRIPT.documents(name)
        assert masks == [int(i % 2 == 0) for d in docs for i in range(len(d))]


@settings(
    max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    lengths=st.lists(st.integers(0, 60), min_size=1, max_size=25),
    dtype=st.sampled_from(INTEGERS),
    limit=st.sampled_from([("bytes", 1), ("bytes", 50), ("size", 7), ("size", 100)]),
    seed=st.integers(0, 1000),
)
def test_round_trip(
    tmp_path_factory: pytest.TempPathFactory,
    lengths: list[int],
    dtype: str,
    limit: tuple[str, int],
    seed: int,
) -> None:
    """Any documents (empty ones too), any integer dtype, any chunk limit: the token stream
    reads back as written; chunks hold whole documents within the limit, or one document."""
    info = np.iinfo(dtype)
    rng = np.random.default_rng(seed)
    docs = [rng.integers(info.min, info.max, n, dtype=dtype, endpoint=True) for n in lengths]
    folder = tmp_path_factory.mktemp("lit") / "out"
    kind, value = limit
    kw = {"chunk_bytes": value} if kind == "bytes" else {"chunk_size": value}
    with LitdataWriter(folder, dtype, **kw) as writer:
        for doc in docs:
            writer.add_document(doc)
    index = json.loads((folder / "index.json").read_text())
    stream = np.concatenate(docs)
    if stream.size == 0:
        assert index["chunks"] == []
        return
    chunks = chunks_of(folder)
    assert np.array_equal(np.concatenate(chunks), stream)
    width = np.dtype(dtype).itemsize
    for entry, chunk in zip(index["chunks"], chunks, strict=True):
        measure = len(chunk) * width if kind == "bytes" else len(chunk)
        assert measure <= value or entry["chunk_size"] == 1
        assert entry["dim"] == len(chunk)


def test_the_default_is_litdatas_64mb_chunk_bytes(tmp_path: Path) -> None:
    with LitdataWriter(tmp_path / "out", "int32") as writer:
        writer.add_document(np.arange(1, 5))
    config = json.loads((tmp_path / "out" / "index.json").read_text())["config"]
    assert (config["chunk_bytes"], config["chunk_size"]) == (DEFAULT_CHUNK_BYTES, None)
    assert DEFAULT_CHUNK_BYTES == 64 * 10**6
    assert config["data_format"] == ["no_header_numpy:2"]


def test_bad_arguments_are_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="not both"):
        LitdataWriter(tmp_path / "a", "uint16", chunk_bytes=10, chunk_size=10)
    with pytest.raises(ValueError, match=">= 1"):
        LitdataWriter(tmp_path / "a", "uint16", chunk_bytes=0)
    with pytest.raises(ValueError, match="cannot hold token ids"):
        LitdataWriter(tmp_path / "a", "float64")
    assert list(tmp_path.iterdir()) == []
    (tmp_path / "b").mkdir()
    (tmp_path / "b" / "x").write_text("x")
    with pytest.raises(ConfigError, match="already exists"):
        LitdataWriter(tmp_path / "b", "uint16")


def test_an_error_inside_the_block_publishes_nothing(tmp_path: Path) -> None:
    with pytest.raises(RuntimeError), LitdataWriter(tmp_path / "out", "uint16", chunk_size=2) as w:
        for _ in range(5):
            w.add_document(np.array([1, 2, 0]))
        raise RuntimeError("stop")
    assert list(tmp_path.iterdir()) == []
