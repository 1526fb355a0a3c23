"""LitData ``TokensLoader`` chunks: real ``litdata.optimize`` fixtures read token for token
against litdata's own reader, strict errors, the loader (exact batches and resumption), S3."""

from __future__ import annotations

import json
import shutil
import struct
import uuid
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from streamload import build_loader
from streamload.catalog.sources import SourceCatalog, describe_source
from streamload.config import SourceConfig
from streamload.errors import FormatError
from streamload.formats import open_shard
from streamload.testing import assert_batches_equal, assert_resumes_exactly
from tests.helpers.paths import TESTS
from tests.helpers.shards import is_mapped

DATA = TESTS / "fixtures" / "litdata"
EXPECTED = json.loads((DATA / "expected.json").read_text())["datasets"]
SHARED = TESTS.parent.parent / "shared" / "fixtures" / "litdata"


def describe(path: Path | str, **kw: Any) -> SourceCatalog:
    return describe_source(SourceConfig(name="l", path=str(path), **kw))


def chunk_tokens(path: Path | str, **kw: Any) -> list[list[int]]:
    """Each chunk's tokens, in listing order."""
    return [open_shard(s).tokens(0, s.num_tokens).tolist() for s in describe(path, **kw).shards]


def write_litdata(folder: Path, items: list[np.ndarray], per_chunk: int) -> Path:
    """Chunks and index as ``optimize(..., item_loader=TokensLoader())`` writes them (numpy
    items, ``no_header_numpy``)."""
    folder.mkdir(parents=True, exist_ok=True)
    code = {"int32": 2, "uint16": 5, "int64": 3, "uint32": 6}[items[0].dtype.name]
    chunks = []
    for k, lo in enumerate(range(0, len(items), per_chunk)):
        part = items[lo : lo + per_chunk]
        sizes = np.cumsum([0] + [a.nbytes for a in part]) + 4 * (len(part) + 2)
        data = struct.pack("<I", len(part)) + sizes.astype("<u4").tobytes()
        data += b"".join(a.tobytes() for a in part)
        name = f"chunk-0-{k}.bin"
        (folder / name).write_bytes(data)
        chunks.append({"chunk_bytes": len(data), "chunk_size": len(part),
                       "dim": int(sum(a.size for a in part)), "filename": name})  # fmt: skip
    config = {"chunk_bytes": None, "chunk_size": per_chunk, "compression": None,
              "data_format": [f"no_header_numpy:{code}"], "encryption": None,
              "item_loader": "TokensLoader"}  # fmt: skip
    (folder / "index.json").write_text(json.dumps({"chunks": chunks, "config": config}))
    return folder


@pytest.mark.parametrize(("name", "dtype"), [("i32", "<i4"), ("u16_numpy", "<u2")])
def test_real_fixtures_read_as_litdata_reads_them(name: str, dtype: str) -> None:
    catalog = describe(DATA / name)
    assert {(s.format, s.dtype) for s in catalog.shards} == {("litdata", dtype)}
    chunks = chunk_tokens(DATA / name)
    assert [t for c in chunks for t in c] == EXPECTED[name]["stream"]
    # TokensLoader(block_size=3): blocks never span chunks, each chunk's remainder dropped
    blocks = [c[j * 3 : j * 3 + 3] for c in chunks for j in range(len(c) // 3)]
    assert blocks == EXPECTED[name]["blocks_3"]
    assert is_mapped(open_shard(catalog.shards[0]).tokens(0, 3))


def test_shared_fixture_and_explicit_format() -> None:
    if not SHARED.is_dir():
        pytest.skip("no ../shared/fixtures")
    assert chunk_tokens(SHARED, format="litdata", dtype="int32") == [
        [7, 8, 9, 0], [12, 13, 0], [22, 23, 24, 25, 26, 0], [32, 0],
    ]  # fmt: skip


def test_documents_are_found_at_eos(tmp_path: Path) -> None:
    from streamload.formats.documents import document_bounds

    (info, *_) = describe(DATA / "i32").shards
    assert open_shard(info).document_bounds() is None
    assert document_bounds(open_shard(info), eos_token_id=0).tolist() == [0, 4, 7]


def copy_of(tmp_path: Path, name: str = "i32") -> Path:
    return Path(shutil.copytree(DATA / name, tmp_path / name))


def edit_index(folder: Path, edit: Any) -> None:
    index = json.loads((folder / "index.json").read_text())
    edit(index)
    (folder / "index.json").write_text(json.dumps(index))


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (lambda ix: ix["config"].update(item_loader="PyTreeLoader"), "TokensLoader"),
        (lambda ix: ix["config"].update(compression="zstd"), "config.compression is 'zstd'"),
        (lambda ix: ix["config"].update(data_format=["no_header_tensor:0"]), "integer dtype"),
        (lambda ix: ix["config"].update(data_format=["pickle", "int"]), "expected one entry"),
        (lambda ix: ix["chunks"][0].update(chunk_size=3), "says 3 items of 7 int32 tokens"),
        (lambda ix: ix["chunks"][0].update(dim=6), "the file is not what the index"),
        (
            lambda ix: ix["chunks"][0].update(filename="other.bin"),
            r"missing: other\.bin; not listed there: chunk-0-0\.bin",
        ),
        (lambda ix: ix["chunks"][1].update(dim="8"), r"chunks\[1\]: field 'dim' is '8'"),
        (lambda ix: ix.pop("config"), "field 'config' is None"),
    ],
)
def test_bad_index_is_refused(tmp_path: Path, edit: Any, message: str) -> None:
    folder = copy_of(tmp_path)
    edit_index(folder, edit)
    with pytest.raises(FormatError, match=message):
        describe(folder, format="litdata")


def test_a_chunk_named_alone_is_checked_against_the_index(tmp_path: Path) -> None:
    folder = copy_of(tmp_path)
    edit_index(folder, lambda ix: ix["chunks"][0].update(filename="other.bin"))
    with pytest.raises(FormatError, match=r"chunk-0-0\.bin: not listed in the index\.json"):
        describe(folder / "chunk-0-0.bin")


def test_damaged_chunks_and_dtype_mismatch_are_refused(tmp_path: Path) -> None:
    with pytest.raises(FormatError, match=r"\(int32 tokens\) but the config says dtype"):
        describe(DATA / "i32", dtype="uint16")
    folder = copy_of(tmp_path)
    chunk = folder / "chunk-0-0.bin"
    data = chunk.read_bytes()
    chunk.write_bytes(data[:-2])
    with pytest.raises(FormatError, match="the file is truncated"):
        describe(folder)
    chunk.write_bytes(data[:8] + struct.pack("<I", 99) + data[12:])  # offsets[1] past the end
    with pytest.raises(FormatError, match="item offsets decrease; expected a TokensLoader"):
        describe(folder, format="litdata")
    chunk.write_bytes(struct.pack("<I", 3) + data[4:])  # another item count in the header
    with pytest.raises(FormatError, match=r"header says 3 items but index\.json says chunk_size 2"):
        describe(folder, format="litdata")
    (folder / "index.json").unlink()
    with pytest.raises(FormatError, match=r"LitData index .*index\.json is missing"):
        describe(folder, format="litdata")


def loader_config(*paths: Path | str, **extra: Any) -> dict[str, Any]:
    sources = [{"name": f"s{i}", "path": str(p), "weight": 1.0} for i, p in enumerate(paths)]
    return {"seq_len": 16, "seed": 5, "eos_token_id": 0, "packing": {"masks": True},
            "sources": sources, **extra}  # fmt: skip


@pytest.mark.filterwarnings("ignore:each pass")
def test_loader_batches_equal_a_numpy_folder_and_resume_with_mds(tmp_path: Path) -> None:
    from tests.formats.test_mds import write_mds

    rng = np.random.default_rng(1)
    items = [np.append(rng.integers(1, 900, n), 0).astype(np.int32)
             for n in rng.integers(1, 50, 100)]  # fmt: skip
    lit = write_litdata(tmp_path / "lit", items, per_chunk=30)
    npy = tmp_path / "npy"
    npy.mkdir()
    for k, lo in enumerate(range(0, len(items), 30)):
        np.save(npy / f"chunk_{k:05d}.npy", np.concatenate(items[lo : lo + 30]))
    with build_loader(loader_config(npy), batch_size=4) as loader:
        expected = list(loader)
    with build_loader(loader_config(lit), batch_size=4, num_workers=2) as loader:
        assert_batches_equal(expected, list(loader), "litdata vs numpy")
    mds = write_mds(tmp_path / "mds", [a.astype(np.uint16) for a in items[:60]], per_shard=20)
    mixture = loader_config(lit, mds, global_batch_size=4, sampling={"num_samples": 120})
    assert_resumes_exactly(
        lambda: build_loader(mixture, batch_size=4),
        make_resumed=lambda: build_loader(mixture, batch_size=4, num_workers=2),
    )


@pytest.mark.filterwarnings("ignore:each pass")
def test_s3_reads_equal_local(s3: Any, tmp_path: Path) -> None:
    pytest.importorskip("s3fs")
    url = s3.upload_folder(DATA / "u16_numpy", "corpora", uuid.uuid4().hex[:12])
    local = loader_config(DATA / "u16_numpy", seq_len=4)
    remote = {**local, "storage": {"cache_dir": str(tmp_path / "cache"), "retries": 2}}
    remote["sources"] = [{"name": "s0", "path": url, "storage_options": s3.storage_options()}]
    with build_loader(local, batch_size=1) as loader:
        expected = list(loader)
    with build_loader(remote, batch_size=1) as loader:
        assert_batches_equal(expected, list(loader), "s3 vs local")
