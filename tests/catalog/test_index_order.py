"""MDS and LitData folders are listed in their ``index.json``'s order, not by file name.

A LitData folder of 12 chunks names them ``chunk-0-0.bin`` … ``chunk-0-11.bin``, which sort as
strings with ``chunk-0-10.bin`` before ``chunk-0-2.bin``: read in that order, the dataset would
be silently shuffled. Folders written by ``streamload convert`` are read back end to end
through ``build_loader`` (concat windows, no shuffle) against the source tokens; files the
index does not list, or listed files that are missing, are refused by name; MDS shards of 0
samples (``MDSWriter``'s empty first shard) are left out.
"""

from __future__ import annotations

import json
import struct
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from streamload import build_loader
from streamload.catalog.sources import describe_source
from streamload.cli.main import main
from streamload.config import SourceConfig
from streamload.config.storage import StorageConfig
from streamload.errors import ConfigError, FormatError
from streamload.formats import open_shard
from tests.helpers.shards import write_megatron_documents

SEQ_LEN = 8


def source_tokens(tmp_path: Path) -> tuple[Path, np.ndarray]:
    """A Megatron dataset of 40 documents ending in EOS 0, and its token stream."""
    rng = np.random.default_rng(3)
    lengths = rng.integers(2, 12, 40)
    tokens = rng.integers(1, 900, int(lengths.sum())).astype(np.uint16)
    tokens[np.cumsum(lengths) - 1] = 0
    prefix = write_megatron_documents(tmp_path / "src" / "docs", tokens, lengths.tolist())
    return prefix, tokens


def convert(src: Path, dst: Path, *target: str) -> Path:
    assert main(["convert", str(src), str(dst), *target]) == 0
    return dst


def index_files(folder: Path) -> list[str]:
    """The file names ``index.json`` lists, in its order (LitData chunks or MDS shards)."""
    index = json.loads((folder / "index.json").read_text())
    if "chunks" in index:
        return [c["filename"] for c in index["chunks"]]
    return [s["raw_data"]["basename"] for s in index["shards"]]


def listed(path: Path | str) -> list[str]:
    return [s.relpath for s in describe_source(SourceConfig(name="s", path=str(path))).shards]


def read_stream(path: Path | str) -> np.ndarray:
    shards = describe_source(SourceConfig(name="s", path=str(path))).shards
    return np.concatenate([open_shard(s).tokens(0, s.num_tokens) for s in shards])


def assert_loader_reads_in_order(path: Path, tokens: np.ndarray) -> None:
    """Every concat window of an unshuffled loader is the source's next ``SEQ_LEN + 1``
    tokens: the shards are read in document order."""
    cfg = {"seq_len": SEQ_LEN, "seed": 1, "eos_token_id": 0, "sampling": {"shuffle": False},
           "sources": [{"name": "s", "path": str(path)}]}  # fmt: skip
    rows = 0
    with build_loader(cfg, batch_size=4) as loader:
        for batch in loader:
            for inputs, labels in zip(batch["input_ids"], batch["labels"], strict=True):
                window = tokens[rows * SEQ_LEN : rows * SEQ_LEN + SEQ_LEN + 1].astype(np.int64)
                assert inputs.tolist() == window[:-1].tolist(), f"window {rows}"
                assert labels[labels != -100].tolist() == window[1:][labels != -100].tolist()
                rows += 1
    assert rows == (tokens.size - 1) // SEQ_LEN // 4 * 4 > 0


@pytest.mark.filterwarnings("ignore:each pass")
def test_a_litdata_folder_of_many_chunks_reads_in_index_order(tmp_path: Path) -> None:
    src, tokens = source_tokens(tmp_path)
    lit = convert(src, tmp_path / "lit", "--to", "litdata", "--chunk-bytes", "40")
    names = index_files(lit)
    assert len(names) >= 12
    assert sorted(names) != names  # chunk-0-10.bin sorts before chunk-0-2.bin
    assert listed(lit) == names
    assert np.array_equal(read_stream(lit), tokens)
    assert_loader_reads_in_order(lit, tokens)


@pytest.mark.filterwarnings("ignore:each pass")
def test_an_mds_folder_follows_its_index_whatever_the_names(tmp_path: Path) -> None:
    src, tokens = source_tokens(tmp_path)
    mds = convert(src, tmp_path / "mds", "--to", "mds", "--size-limit", "200")
    names = index_files(mds)
    assert len(names) >= 11 and names == sorted(names)  # zero-padded: shard.00010.mds
    assert listed(mds) == names
    assert_loader_reads_in_order(mds, tokens)
    # Another tool's names (unpadded) sort otherwise; the index still decides.
    index = json.loads((mds / "index.json").read_text())
    for k, shard in enumerate(index["shards"]):
        (mds / shard["raw_data"]["basename"]).rename(mds / f"part-{k}.mds")
        shard["raw_data"]["basename"] = f"part-{k}.mds"
    (mds / "index.json").write_text(json.dumps(index))
    assert listed(mds) == [f"part-{k}.mds" for k in range(len(names))]
    assert_loader_reads_in_order(mds, tokens)


def test_a_glob_in_an_indexed_folder_takes_its_order(tmp_path: Path) -> None:
    src, tokens = source_tokens(tmp_path)
    lit = convert(src, tmp_path / "lit", "--to", "litdata", "--chunk-bytes", "40")
    assert listed(lit / "chunk-0-[12]*.bin") == [
        "chunk-0-1.bin", "chunk-0-2.bin", "chunk-0-10.bin", "chunk-0-11.bin",
        *(f"chunk-0-{k}.bin" for k in range(12, len(index_files(lit))) if str(k)[0] in "12"),
    ]  # fmt: skip
    assert np.array_equal(read_stream(lit / "*.bin"), tokens)


def test_missing_and_unlisted_files_are_refused_by_name(tmp_path: Path) -> None:
    src, _ = source_tokens(tmp_path)
    lit = convert(src, tmp_path / "lit", "--to", "litdata", "--chunk-bytes", "40")
    (lit / "chunk-0-7.bin").rename(lit / "chunk-1-0.bin")
    with pytest.raises(FormatError, match=r"missing: chunk-0-7\.bin; not listed there: chunk-1-0"):
        listed(lit)
    mds = convert(src, tmp_path / "mds", "--to", "mds", "--size-limit", "200")
    (mds / "shard.00003.mds").unlink()
    with pytest.raises(FormatError, match=r"MDS index\.json lists \d+ shards .*shard\.00003\.mds"):
        listed(mds)


def test_the_order_is_in_the_fingerprint_and_the_catalog_cache_key(tmp_path: Path) -> None:
    src, _ = source_tokens(tmp_path)
    lit = convert(src, tmp_path / "lit", "--to", "litdata", "--chunk-bytes", "40")
    names = index_files(lit)
    storage = StorageConfig(cache_dir=str(tmp_path / "cache"))

    def catalog(path: Any) -> Any:
        return describe_source(SourceConfig(name="s", path=path), storage=storage)

    in_index = catalog(tuple(str(lit / n) for n in names)).fingerprint()
    assert catalog(str(lit)).fingerprint() == in_index  # a warm start: the same
    assert catalog(str(lit)).fingerprint() == in_index
    assert catalog(tuple(str(lit / n) for n in sorted(names))).fingerprint() != in_index
    index = json.loads((lit / "index.json").read_text())
    index["chunks"].reverse()  # another order, the same files: no cached catalog may serve it
    (lit / "index.json").write_text(json.dumps(index))
    assert [s.relpath for s in catalog(str(lit)).shards] == names[::-1]


def test_another_tools_index_json_leaves_the_name_order(tmp_path: Path) -> None:
    for k in (10, 2):
        np.save(tmp_path / f"t_{k}.npy", np.arange(1, 5, dtype=np.uint16))
    (tmp_path / "index.json").write_text(json.dumps({"files": ["t_2.npy", "t_10.npy"]}))
    assert listed(tmp_path) == ["t_10.npy", "t_2.npy"]


def with_empty_first_shard(folder: Path) -> Path:
    """``folder`` (an MDS folder of our writer) as ``MDSWriter`` writes it when its first
    sample passes the size limit: an empty ``shard.00000.mds`` first, the others renumbered."""
    index = json.loads((folder / "index.json").read_text())
    shards = index["shards"]
    for k in reversed(range(len(shards))):
        new = f"shard.{k + 1:05d}.mds"
        (folder / shards[k]["raw_data"]["basename"]).rename(folder / new)
        shards[k]["raw_data"]["basename"] = new
    first = (folder / "shard.00001.mds").read_bytes()
    count, first_sample = struct.unpack_from("<II", first)
    config = first[4 * (count + 2) : first_sample]  # between the offset table and sample 0
    assert json.loads(config)["format"] == "mds"
    empty = struct.pack("<II", 0, 8 + len(config)) + config  # MDSWriter's: n, offsets[1], config
    (folder / "shard.00000.mds").write_bytes(empty)
    entry: dict[str, Any] = {**shards[0], "samples": 0}
    entry["raw_data"] = {"basename": "shard.00000.mds", "bytes": len(empty), "hashes": {}}
    index["shards"] = [entry, *shards]
    (folder / "index.json").write_text(json.dumps(index, sort_keys=True))
    return folder


@pytest.mark.filterwarnings("ignore:each pass")
def test_mds_shards_of_no_samples_are_left_out(tmp_path: Path) -> None:
    src, tokens = source_tokens(tmp_path)
    mds = with_empty_first_shard(convert(src, tmp_path / "mds", "--to", "mds"))
    assert index_files(mds) == ["shard.00000.mds", "shard.00001.mds"]
    assert listed(mds) == listed(mds / "*.mds") == ["shard.00001.mds"]
    assert np.array_equal(read_stream(mds), tokens)
    assert_loader_reads_in_order(mds, tokens)
    with pytest.raises(ConfigError, match=r"holds no token files .*MDS shards of 0 samples"):
        listed(mds / "shard.00000.mds")


def test_other_empty_shards_are_still_refused(tmp_path: Path) -> None:
    np.save(tmp_path / "a.npy", np.arange(1, 5, dtype=np.uint16))
    np.save(tmp_path / "b.npy", np.zeros(0, dtype=np.uint16))
    with pytest.raises(FormatError, match=r"b\.npy: shard holds 0 tokens"):
        listed(tmp_path)
