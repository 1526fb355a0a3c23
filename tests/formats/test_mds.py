"""Mosaic MDS: real MDSWriter fixtures read token for token against StreamingDataset's output,
strict errors, the decoded cache, the loader (exact batches, exact resumption), S3."""

from __future__ import annotations

import gzip
import json
import os
import shutil
import struct
import uuid
from pathlib import Path
from typing import Any

import fsspec
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from streamload import build_loader
from streamload.catalog.sources import SourceCatalog, describe_source
from streamload.config import SourceConfig
from streamload.errors import ConfigError, FormatError
from streamload.formats import open_shard
from streamload.formats.base import ListedFile, ReadOptions
from streamload.formats.mds.mds import FORMAT, MdsShard
from streamload.testing import assert_batches_equal, assert_resumes_exactly
from tests.helpers.catalog import rewrote_in_place
from tests.helpers.extras import needs
from tests.helpers.paths import TESTS
from tests.helpers.shards import documents, is_mapped

DATA = TESTS / "fixtures" / "mds"
EXPECTED = json.loads((DATA / "expected.json").read_text())["datasets"]
READ = ["u16", "i32_zstd", "u16_gz", "fixed", "any_dtype", "bytes_i64", "two_arrays"]
OPTIONS = {"bytes_i64": {"dtype": "int64"}, "two_arrays": {"column": "tokens"}}


def describe(path: Path | str, **kw: Any) -> SourceCatalog:
    return describe_source(SourceConfig(name="m", path=str(path), **kw))


def read_documents(path: Path | str, **kw: Any) -> list[list[int]]:
    return [doc for info in describe(path, **kw).shards for doc in documents(open_shard(info))]


def write_mds(folder: Path, docs: list[np.ndarray], per_shard: int, gz: bool = False) -> Path:
    """MDS shards as MDSWriter writes them (columns ``id: str``, ``tokens: ndarray:<dtype>``;
    byte-identical: checked against the real fixture below)."""
    folder.mkdir(parents=True, exist_ok=True)
    dtype = np.dtype(docs[0].dtype).name
    columns = {"column_encodings": ["str", f"ndarray:{dtype}"], "column_names": ["id", "tokens"],
               "column_sizes": [None, None]}  # fmt: skip
    shards = []
    for number, lo in enumerate(range(0, len(docs), per_shard)):
        samples = [_sample(f"d{i}", docs[i]) for i in range(lo, min(lo + per_shard, len(docs)))]
        config = {**columns, "compression": "gz" if gz else None, "format": "mds",
                  "hashes": [], "size_limit": 300, "version": 2}  # fmt: skip
        head = json.dumps(config, sort_keys=True).encode()
        sizes = np.cumsum([0] + [len(s) for s in samples]) + 4 * (len(samples) + 2) + len(head)
        data = struct.pack("<I", len(samples)) + sizes.astype("<u4").tobytes() + head
        data += b"".join(samples)
        raw = f"shard.{number:05d}.mds"
        entry = {**config, "raw_data": {"basename": raw, "bytes": len(data), "hashes": {}},
                 "samples": len(samples), "zip_data": None}  # fmt: skip
        if gz:
            packed = gzip.compress(data)
            entry["zip_data"] = {"basename": raw + ".gz", "bytes": len(packed), "hashes": {}}
            raw, data = raw + ".gz", packed
        (folder / raw).write_bytes(data)
        shards.append(entry)
    (folder / "index.json").write_text(json.dumps({"shards": shards, "version": 2}, sort_keys=True))
    return folder


def _sample(name: str, tokens: np.ndarray) -> bytes:
    code = next(c for c, t in enumerate("BHIQ") if tokens.size < 1 << (8 << c))
    array = bytes([4 | code]) + struct.pack("<" + "BHIQ"[code], tokens.size) + tokens.tobytes()
    return struct.pack("<II", len(name), len(array)) + name.encode() + array


@pytest.mark.parametrize("name", READ)
def test_real_fixtures_read_as_streaming_dataset_reads_them(name: str) -> None:
    if "zstd" in name:
        needs("zstandard", "mds")
    expected = [s["tokens"] for s in EXPECTED[name]["samples"]]
    catalog = describe(DATA / name, **OPTIONS.get(name, {}))
    assert {s.format for s in catalog.shards} == {"mds"}
    assert read_documents(DATA / name, **OPTIONS.get(name, {})) == expected
    shard = open_shard(catalog.shards[0])
    assert isinstance(shard, MdsShard) and is_mapped(shard.tokens(0, 2))


def test_dtypes_come_from_the_encoding() -> None:
    needs("zstandard", "mds")  # i32_zstd is among them
    dtypes = {n: {s.dtype for s in describe(DATA / n, **OPTIONS.get(n, {})).shards} for n in READ}
    assert dtypes == {
        "u16": {"<u2"}, "i32_zstd": {"<i4"}, "u16_gz": {"<u2"}, "fixed": {"<u2"},
        "any_dtype": {"<u2"}, "bytes_i64": {"<i8"}, "two_arrays": {"<u2"},
    }  # fmt: skip


def test_test_writer_is_byte_identical_to_mdswriter(tmp_path: Path) -> None:
    docs = [np.asarray(s["tokens"], dtype=np.uint16) for s in EXPECTED["u16"]["samples"]]
    write_mds(tmp_path, docs, per_shard=4)
    for name in ("shard.00000.mds", "shard.00001.mds"):
        assert (tmp_path / name).read_bytes() == (DATA / "u16" / name).read_bytes()
    assert json.loads((tmp_path / "index.json").read_text()) == json.loads(
        (DATA / "u16" / "index.json").read_text()
    )


@given(
    lengths=st.lists(st.integers(1, 300), min_size=1, max_size=12),
    per_shard=st.integers(1, 5),
    dtype=st.sampled_from(["uint16", "int32", "uint8", "int64"]),
    gz=st.booleans(),
)
@settings(
    max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
def test_any_documents_read_back_exactly(
    tmp_path: Path, lengths: list[int], per_shard: int, dtype: str, gz: bool
) -> None:
    rng = np.random.default_rng(len(lengths))
    docs = [rng.integers(0, 200, n).astype(dtype) for n in lengths]
    folder = write_mds(tmp_path / uuid.uuid4().hex, docs, per_shard, gz)
    assert read_documents(folder) == [d.tolist() for d in docs]


def test_decoded_cache_is_reused_and_rebuilt(tmp_path: Path, monkeypatch: Any) -> None:
    needs("zstandard", "mds")
    monkeypatch.setenv("STREAMLOAD_CACHE_DIR", str(tmp_path / "cache"))
    shards = describe(DATA / "i32_zstd").shards
    cached = sorted((tmp_path / "cache" / "mds").rglob("*.tokens"))
    assert len(cached) == len(shards) == 3  # one per shard, written at describe
    info = shards[0]
    shutil.rmtree(tmp_path / "cache" / "mds")
    assert documents(open_shard(info)) == [[7, 8, 9, 0], [12, 13, 0]]
    assert len(list((tmp_path / "cache" / "mds").rglob("*.tokens"))) == 1  # decoded again


def test_describe_does_not_rewrite_a_cached_entry(tmp_path: Path) -> None:
    shard = DATA / "u16" / "shard.00000.mds"
    file = ListedFile(str(shard), shard.name, shard.stat().st_size)
    options = ReadOptions(cache_root=str(tmp_path))
    info = FORMAT.describe(fsspec.filesystem("file"), file, options)
    (cached,) = (tmp_path / "mds").rglob("*.tokens")
    before = cached.stat().st_ino
    assert FORMAT.describe(fsspec.filesystem("file"), file, options) == info
    assert cached.stat().st_ino == before  # not written again (a rewrite renames a new file)
    assert documents(FORMAT.open(info)) == [
        [7, 8, 9, 0],
        [12, 13, 0],
        [22, 23, 24, 25, 26, 0],
        [32, 0],
    ]


def copy_of(tmp_path: Path, name: str) -> Path:
    return Path(shutil.copytree(DATA / name, tmp_path / name))


def edit_index(folder: Path, edit: Any) -> None:
    index = json.loads((folder / "index.json").read_text())
    edit(index)
    (folder / "index.json").write_text(json.dumps(index))


@pytest.mark.parametrize(
    ("name", "kw", "message"),
    [
        ("pkl", {}, "pkl is never read"),
        ("two_arrays", {}, "2 columns could hold tokens"),
        ("two_arrays", {"column": "ids"}, "column = 'ids' is not a column"),
        ("two_arrays", {"column": "id"}, "is encoded 'str'"),
        ("bytes_i64", {}, "does not record the token width"),
        ("u16", {"dtype": "uint8"}, "the config says dtype = 'uint8'"),
        ("any_dtype", {"dtype": "uint8"}, "the config says dtype = 'uint8'"),
    ],
)
def test_wrong_column_or_dtype_is_refused(name: str, kw: dict[str, str], message: str) -> None:
    with pytest.raises(FormatError, match=message):
        describe(DATA / name, **kw)


def test_damaged_files_are_refused(tmp_path: Path) -> None:
    folder = copy_of(tmp_path, "u16")
    shard = folder / "shard.00000.mds"
    data = shard.read_bytes()
    shard.write_bytes(data[:-3])
    with pytest.raises(FormatError, match=r"bytes but index\.json says"):
        describe(folder)
    edit_index(folder, lambda ix: ix["shards"][0]["raw_data"].update(bytes=len(data) - 3))
    with pytest.raises(FormatError, match="it is truncated"):
        describe(folder)
    shard.write_bytes(data[:-4] + b"\xff" * 4)  # a token's bytes changed: still consistent
    rewrote_in_place(shard)
    edit_index(folder, lambda ix: ix["shards"][0]["raw_data"].update(bytes=len(data)))
    assert describe(folder).num_tokens == 19
    bad = bytearray(data)
    bad[230] = 0x3C  # the first sample's ndarray header: ndim 15 (was 1)
    shard.write_bytes(bytes(bad))
    rewrote_in_place(shard)
    with pytest.raises(FormatError, match="sample 0's column 'tokens'"):
        describe(folder)


def test_an_array_header_cut_short_is_refused(tmp_path: Path) -> None:
    """The last sample's token column is the single byte 0x07 (ndim 1, 8-byte shape): its
    header would run past the end of the shard."""
    docs = [np.array([7, 8, 0], np.uint16), np.array([9, 0], np.uint16)]
    folder = write_mds(tmp_path / "m", docs, per_shard=2)
    shard = folder / "shard.00000.mds"
    data = shard.read_bytes()
    last = data.rindex(b"d1") - 8  # the last sample: u32 sizes of id and tokens, "d1", tokens
    cut = bytearray(data[:last] + struct.pack("<II", 2, 1) + b"d1\x07")
    struct.pack_into("<I", cut, 12, len(cut))  # offsets[2]: the samples' end
    shard.write_bytes(bytes(cut))
    edit_index(folder, lambda ix: ix["shards"][0]["raw_data"].update(bytes=len(cut)))
    message = r"shard\.00000\.mds: sample 1's column 'tokens' \(ndarray:uint16\) is 1 bytes, "
    with pytest.raises(FormatError, match=message + "shorter than the 9-byte header"):
        describe(folder)


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (lambda ix: ix.update(version=1), "version is 1; expected 2"),
        (lambda ix: ix["shards"][0].update(format="jsonl"), "'mds' shards only"),
        (lambda ix: ix["shards"][0].update(compression="br"), "compression 'br' is not read"),
        (lambda ix: ix["shards"][0].update(samples=9), "header says 4 samples"),
        (
            lambda ix: ix["shards"][0]["raw_data"].update(basename="x.mds"),
            r"missing: x\.mds; not listed there: shard\.00000\.mds",
        ),
        (lambda ix: ix["shards"][0].update(column_sizes=[None]), "three lists"),
        (  # issue 36: was an OverflowError in the int64 size table
            lambda ix: ix["shards"][0].update(column_sizes=[None, 2**64 + 3]),
            r"column_sizes\[1\] is 18446744073709551619; expected a byte size from 0 to 4294967295",
        ),
        (
            lambda ix: ix["shards"][0].update(column_sizes=[-1, None]),
            r"column_sizes\[0\] is -1; expected a byte size",
        ),
    ],
)
def test_bad_index_is_refused(tmp_path: Path, edit: Any, message: str) -> None:
    folder = copy_of(tmp_path, "u16")
    edit_index(folder, edit)
    with pytest.raises(FormatError, match=message):
        describe(folder)


def test_missing_or_corrupt_index_is_refused(tmp_path: Path) -> None:
    folder = copy_of(tmp_path, "u16")
    (folder / "index.json").write_text('{"shards": [')
    with pytest.raises(FormatError, match="not valid JSON"):
        describe(folder, format="mds")
    (folder / "index.json").unlink()
    with pytest.raises(FormatError, match=r"index .*index\.json is missing"):
        describe(folder, format="mds")


def test_corrupt_zstd_is_refused(tmp_path: Path) -> None:
    needs("zstandard", "mds")
    folder = copy_of(tmp_path, "i32_zstd")
    shard = folder / "shard.00000.mds.zstd"
    shard.write_bytes(shard.read_bytes()[:-6] + b"\0" * 6)
    with pytest.raises(FormatError, match="corrupt zstd stream"):
        describe(folder)


def as_streaming_leaves_it(tmp_path: Path, name: str) -> Path:
    """A copy of fixture ``name`` after StreamingDataset read it: each shard decompressed
    beside its compressed file (``shard.00000.mds`` beside ``shard.00000.mds.zstd``)."""
    folder = copy_of(tmp_path, name)
    for shard in sorted(folder.glob("*.mds.*")):
        data = shard.read_bytes()
        if shard.suffix == ".zstd":
            needs("zstandard", "mds")
            import zstandard

            data = zstandard.ZstdDecompressor().decompressobj().decompress(data)
        else:
            data = gzip.decompress(data)
        (folder / shard.stem).write_bytes(data)
    return folder


@pytest.mark.parametrize("name", ["i32_zstd", "u16_gz"])
def test_a_folder_streaming_has_read_reads_as_the_clean_folder(tmp_path: Path, name: str) -> None:
    """Issue 36: the decompressed copies are the same shards; the folder lists its compressed
    files (same files, same fingerprint as before Streaming read it), and a glob of either
    kind reads the same documents."""
    folder = as_streaming_leaves_it(tmp_path, name)
    clean, cache = describe(DATA / name), describe(folder)
    assert [s.relpath for s in cache.shards] == [s.relpath for s in clean.shards]
    assert cache.fingerprint() == clean.fingerprint()
    docs = read_documents(DATA / name)
    suffix = ".mds.zstd" if name == "i32_zstd" else ".mds.gz"
    for path in (folder, f"{folder}/*{suffix}", f"{folder}/*.mds", f"{folder}/*.mds*"):
        assert read_documents(path) == docs, path
    assert describe(f"{folder}/*.mds").shards[0].relpath == "shard.00000.mds"
    with pytest.raises(ConfigError, match=r"shard\.00000\.mds and .*shard\.00000\.mds\.\w+ are "
                       r"one shard of their index\.json"):  # fmt: skip
        describe_source(
            SourceConfig(
                name="m",
                path=(str(folder / "shard.00000.mds"), str(folder / f"shard.00000{suffix}")),
            )
        )


@pytest.mark.filterwarnings("ignore:each pass")
def test_loader_over_a_streaming_cache_gives_the_clean_batches(tmp_path: Path) -> None:
    folder = as_streaming_leaves_it(tmp_path, "i32_zstd")
    (folder / "shard.00001.mds.zstd").unlink()  # evicted: its decompressed copy is read
    with build_loader({**loader_config(DATA / "i32_zstd"), "seq_len": 4}, batch_size=2) as ld:
        expected = list(ld)
    with build_loader({**loader_config(folder), "seq_len": 4}, batch_size=2) as loader:
        assert_batches_equal(expected, list(loader), "a Streaming cache vs the clean folder")


def loader_config(path: str | Path, **source: Any) -> dict[str, Any]:
    return {"seq_len": 16, "seed": 3, "eos_token_id": 0, "packing": {"masks": True},
            "sources": [{"name": "m", "path": str(path), **source}]}  # fmt: skip


@pytest.mark.filterwarnings("ignore:each pass")
def test_loader_batches_equal_a_numpy_folder_of_the_same_tokens(tmp_path: Path) -> None:
    rng = np.random.default_rng(0)
    docs = [np.append(rng.integers(1, 500, n), 0).astype(np.uint16)
            for n in rng.integers(1, 40, 120)]  # fmt: skip
    mds = write_mds(tmp_path / "mds", docs, per_shard=25)
    npy = tmp_path / "npy"
    npy.mkdir()
    for k, lo in enumerate(range(0, len(docs), 25)):
        np.save(npy / f"shard_{k:05d}.npy", np.concatenate(docs[lo : lo + 25]))
    with build_loader(loader_config(npy), batch_size=4) as loader:
        expected = list(loader)
    with build_loader(loader_config(mds), batch_size=4, num_workers=2) as loader:
        assert_batches_equal(expected, list(loader), "mds vs numpy")
    assert_resumes_exactly(
        lambda: build_loader(loader_config(mds), batch_size=4),
        make_resumed=lambda: build_loader(loader_config(mds), batch_size=4, num_workers=2),
    )


@pytest.mark.filterwarnings("ignore:each pass")
def test_s3_reads_equal_local(s3: Any, tmp_path: Path) -> None:
    pytest.importorskip("s3fs")
    needs("zstandard", "mds")
    url = s3.upload_folder(DATA / "i32_zstd", "corpora", uuid.uuid4().hex[:12])
    local = loader_config(DATA / "i32_zstd")
    local["seq_len"] = 4
    remote = {**local, "storage": {"cache_dir": str(tmp_path / "cache"), "retries": 2}}
    remote["sources"] = [{"name": "m", "path": url, "storage_options": s3.storage_options()}]
    with build_loader(local, batch_size=1) as loader:
        expected = list(loader)
    with build_loader(remote, batch_size=1) as loader:
        assert_batches_equal(expected, list(loader), "s3 vs local")
    assert os.listdir(tmp_path / "cache")
