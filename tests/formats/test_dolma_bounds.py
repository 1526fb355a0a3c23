"""Dolma document bounds parsed once: describe keeps them, plans and masks map them."""

from __future__ import annotations

import dataclasses
import logging
import shutil
from pathlib import Path

import numpy as np
import pytest

from streamload.errors import FormatError
from streamload.formats import ReadOptions, open_shard
from streamload.formats.base import ListedFile, ShardInfo
from streamload.formats.dolma import _bounds_cache
from streamload.formats.dolma import dolma as dolma_module
from streamload.formats.dolma.dolma import FORMAT, DolmaWriter
from tests.helpers.shards import documents, is_mapped

NPY = "part-0-00000.npy"
DOCS = [[1, 2, 3], [], [4], [5, 6, 7, 8], [9, 10]]
MOVED = np.array([0, 3, 3, 5, 8, 10])  # the same tokens, one boundary moved


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    with DolmaWriter(tmp_path / "data" / NPY, "uint16", mtime=0) as writer:
        for doc in DOCS:
            writer.add_document(np.array(doc, dtype=np.int64), doc_id='a,"b"', src="s,\n")
    return tmp_path / "data"


def describe_here(folder: Path, root: Path) -> ShardInfo:
    import fsspec

    path = str(folder / NPY)
    listed = ListedFile(path, NPY, (folder / NPY).stat().st_size)
    options = ReadOptions(dtype="uint16", cache_root=str(root))
    return FORMAT.describe(fsspec.filesystem("file"), listed, options)


def no_parse(*args: object, **kwargs: object) -> None:
    raise AssertionError("the CSV was parsed again")


def test_bounds_are_mapped_from_what_describe_parsed(
    folder: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    info = describe_here(folder, tmp_path / "cache")
    key = info.meta["bounds_sha256"]
    entry = tmp_path / "cache" / "dolma" / key[:2] / f"{key}.bounds"
    assert np.fromfile(entry, dtype="<i8").tolist() == [0, 3, 3, 4, 8, 10]
    monkeypatch.setattr(dolma_module, "read_rows", no_parse)
    shard = open_shard(info)
    bounds = shard.document_bounds()
    assert bounds.dtype == np.int64 and bounds.tolist() == [0, 3, 3, 4, 8, 10]
    assert is_mapped(bounds)
    assert documents(shard) == DOCS


@pytest.mark.parametrize("damage", ["flip", "truncate", "delete"])
def test_a_damaged_entry_is_parsed_again_and_repaired(
    folder: Path, tmp_path: Path, damage: str
) -> None:
    info = describe_here(folder, tmp_path / "cache")
    key = info.meta["bounds_sha256"]
    entry = tmp_path / "cache" / "dolma" / key[:2] / f"{key}.bounds"
    data = bytearray(entry.read_bytes())
    if damage == "flip":
        data[8] ^= 1  # still a valid tiling (0, 2, 3, ...): only the digest tells
        entry.write_bytes(bytes(data))
    elif damage == "truncate":
        entry.write_bytes(bytes(data[:-8]))
    else:
        entry.unlink()
    assert documents(open_shard(info)) == DOCS
    assert entry.read_bytes() == np.array([0, 3, 3, 4, 8, 10], dtype="<i8").tobytes()


def test_a_csv_rewritten_in_place_is_refused(
    folder: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Rows parsed again (no entry) that are not the described ones: the CSV changed."""
    info = describe_here(folder, tmp_path / "cache")
    monkeypatch.setattr(dolma_module, "load_bounds", lambda *args: None)
    rows = dolma_module.read_rows
    monkeypatch.setattr(
        dolma_module,
        "read_rows",
        lambda *a, **k: dataclasses.replace(rows(*a, **k), starts=MOVED[:-1], ends=MOVED[1:]),
    )
    with pytest.raises(FormatError, match=r"csv\.gz: its rows differ from those described"):
        open_shard(info).document_bounds()


def test_an_unwritable_cache_costs_a_warning_only(
    folder: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("not a folder")
    monkeypatch.setattr(_bounds_cache, "_WARNED", set())
    with caplog.at_level(logging.WARNING, logger="streamload.formats"):
        info = describe_here(folder, blocker)
        assert documents(open_shard(info)) == DOCS  # parsed again, its save refused again
    assert sum("cannot keep dolma document bounds" in r.message for r in caplog.records) == 1


def test_a_description_without_a_key_parses_the_csv(folder: Path, tmp_path: Path) -> None:
    """Descriptions cached by earlier versions record no key: the CSV is parsed, as then."""
    info = describe_here(folder, tmp_path / "cache")
    meta = {k: v for k, v in info.meta.items() if k not in ("bounds_sha256", "cache_root")}
    shard = open_shard(dataclasses.replace(info, meta=meta))
    assert documents(shard) == DOCS
    assert shard.document_metadata(1) == {"id": 'a,"b"', "src": "s,\n", "loc": 2}


def test_the_key_names_the_content(folder: Path, tmp_path: Path) -> None:
    """The same CSV in another folder has the same key; another CSV another key."""
    info = describe_here(folder, tmp_path / "cache")
    shutil.copytree(folder, tmp_path / "copy")
    assert (
        describe_here(tmp_path / "copy", tmp_path / "cache").meta["bounds_sha256"]
        == (info.meta["bounds_sha256"])
    )
    with DolmaWriter(tmp_path / "other" / NPY, "uint16", mtime=0) as writer:
        for doc in [[1], *DOCS[1:]]:
            writer.add_document(np.array(doc, dtype=np.int64))
    other = describe_here(tmp_path / "other", tmp_path / "cache")
    assert other.meta["bounds_sha256"] != info.meta["bounds_sha256"]


@pytest.mark.filterwarnings("ignore:each pass")
@pytest.mark.parametrize("mode", ["packed", "padded"])
def test_plans_are_the_same_from_kept_and_parsed_bounds(
    tmp_path: Path, mode: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A cold build parses each CSV once (at describe), and its plan is byte for byte the
    plan of a build that parses the CSVs again."""
    from streamload import build_loader

    rng = np.random.default_rng(5)
    with DolmaWriter(tmp_path / "data" / NPY, "uint16", max_size=4000, mtime=0) as writer:
        for n in rng.integers(0, 90, size=300):
            writer.add_document(rng.integers(1, 500, size=int(n)))
    parses = []
    read_rows = dolma_module.read_rows
    monkeypatch.setattr(
        dolma_module, "read_rows", lambda *a, **k: parses.append(1) or read_rows(*a, **k)
    )
    plans = []
    for kept in (True, False):
        if not kept:
            monkeypatch.setattr(dolma_module, "load_bounds", lambda *args: None)
        parses.clear()
        cfg = {
            "seq_len": 32,
            "pad_token_id": 0,
            "vocab_size": 512,
            "sources": [{"name": "d", "path": str(tmp_path / "data"), "format": "dolma"}],
            "sampling": {"mode": mode, "cache_dir": str(tmp_path / f"plans-{kept}")},
            "storage": {"cache_dir": str(tmp_path / f"storage-{kept}")},
        }
        loader = build_loader(cfg, batch_size=4)
        assert len(parses) == len(writer.paths) * (1 if kept else 2)
        files = loader.stream.sources[0].plan.files
        plans.append({n: Path(p).read_bytes() for n, p in sorted(files.items())})
    assert len(writer.paths) > 1
    assert plans[0] == plans[1]
