"""Document bounds read when needed: concat mode's masks from the shards a chunk touches,
cached once per job and mapped; a source's whole bounds cached for the plans built from them.

The masks are checked against a reference built from the documents as written (what every
format's index, or EOS, records), over Megatron, Dolma, datatrove and NPY-with-EOS shards,
with and without ``cross_shard`` and a split, from the format and from the cache.
"""

from __future__ import annotations

import pickle
import warnings
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

import streamload
from streamload.catalog.sources import describe_sources
from streamload.config import load_config
from streamload.formats.datatrove.datatrove import DatatroveShard, DatatroveWriter
from streamload.formats.dolma.dolma import DolmaShard, DolmaWriter
from streamload.formats.megatron.megatron import MegatronShard
from streamload.streams import source_documents
from streamload.streams.shard_set import ShardSet
from streamload.streams.source_documents import ShardDocuments, source_document_bounds
from tests.helpers.masks import expected_fields
from tests.helpers.shards import write_megatron_documents

FORMATS = ["megatron", "dolma", "datatrove", "npy"]
SHARD_CLASSES = {"megatron": MegatronShard, "dolma": DolmaShard, "datatrove": DatatroveShard}
EOS = 0


def make_documents(seed: int, count: int = 60) -> list[np.ndarray]:
    """Documents of 1-30 tokens in ``[1, 500)``, each ending with EOS (for the NPY shards;
    the indexed formats record the same boundaries)."""
    rng = np.random.default_rng(seed)
    docs = [rng.integers(1, 500, size=int(n)) for n in rng.integers(1, 31, size=count)]
    for doc in docs:
        doc[-1] = EOS
    return docs


def write_source(folder: Path, fmt: str, docs: Sequence[np.ndarray], files: int = 3) -> None:
    """``docs`` in ``files`` shards of ``fmt`` (a document never spans two files)."""
    folder.mkdir(parents=True, exist_ok=True)
    for part, group in enumerate(np.array_split(np.arange(len(docs)), files)):
        chunk = [docs[i].astype(np.uint16) for i in group]
        if fmt == "megatron":
            lengths = [len(doc) for doc in chunk]
            write_megatron_documents(folder / f"part_{part}", np.concatenate(chunk), lengths)
        elif fmt == "dolma":
            with DolmaWriter(folder / f"part-{part}-00000.npy", "uint16", mtime=0) as dolma:
                for doc in chunk:
                    dolma.add_document(doc)
        elif fmt == "datatrove":
            with DatatroveWriter(folder / f"t_{part:05d}.ds", "t", 2) as datatrove:
                for doc in chunk:
                    datatrove.add_document(doc)
        else:
            np.save(folder / f"shard_{part:05d}.npy", np.concatenate(chunk))


def config(folder: Path, fmt: str, **sampling: Any) -> dict[str, Any]:
    cfg: dict[str, Any] = {
        "seq_len": 8,
        "seed": 3,
        "vocab_size": 512,
        "sources": [{"name": "d", "path": str(folder)}],
        "sampling": sampling,
        "packing": {"masks": True},
    }
    if fmt == "npy":  # no index: the boundaries are the EOS tokens the windows hold
        cfg["eos_token_id"] = EOS
    return cfg


def batches(cfg: dict[str, Any]) -> list[dict[str, torch.Tensor]]:
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", "each pass")
        return list(streamload.build_loader(cfg, batch_size=4))


def assert_masks_follow(cfg: dict[str, Any], docs: Sequence[np.ndarray]) -> None:
    """Every row of every batch of the pass: inputs, labels, doc_ids, position_ids and
    cu_seqlens equal the reference of its window, from the documents as written."""
    stream = np.concatenate(docs)
    doc_starts = {int(s) for s in np.cumsum([0, *map(len, docs)])[:-1]}
    length = cfg["seq_len"]
    starts_of = streamload.SampleStream.from_config(load_config(cfg)).window_starts
    seen = 0
    for batch in batches(cfg):
        for row, start in enumerate(starts_of(0, batch["sample_index"].numpy()).tolist()):
            inputs, labels, doc_ids, positions = expected_fields(stream, doc_starts, start, length)
            assert torch.equal(batch["input_ids"][row], torch.from_numpy(inputs))
            assert torch.equal(batch["labels"][row], torch.from_numpy(labels))
            assert torch.equal(batch["doc_ids"][row], torch.from_numpy(doc_ids))
            assert torch.equal(batch["position_ids"][row], torch.from_numpy(positions))
            opens = np.flatnonzero(positions == 0)
            cu = np.full(length + 1, length, dtype=np.int32)
            cu[: opens.size] = opens
            assert torch.equal(batch["cu_seqlens"][row], torch.from_numpy(cu))
            seen += 1
    assert seen > 0


@pytest.fixture
def cache_every_shard(monkeypatch: pytest.MonkeyPatch) -> None:
    """Cache the bounds of shards of any size (the test shards are tiny)."""
    monkeypatch.setattr(source_documents, "CACHED_TOKENS", 0)


@pytest.fixture
def refuse_indexes(monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    """Call it with a format name: any read of that format's document index then fails."""

    def arm(fmt: str) -> None:
        def refuse(self: Any) -> np.ndarray:
            raise AssertionError(f"{self.info.path}: document index read with a warm cache")

        if fmt in SHARD_CLASSES:
            monkeypatch.setattr(SHARD_CLASSES[fmt], "document_bounds", refuse)

    yield arm


@pytest.mark.parametrize("split", [None, "80,15,5"])
@pytest.mark.parametrize("cross_shard", [True, False])
@pytest.mark.parametrize("fmt", FORMATS)
def test_masks_follow_the_documents_from_the_format_and_from_the_cache(
    tmp_path: Path,
    fmt: str,
    cross_shard: bool,
    split: str | None,
    cache_every_shard: None,
    refuse_indexes: Any,
) -> None:
    docs = make_documents(seed=len(fmt))
    write_source(tmp_path / "data", fmt, docs)
    sampling: dict[str, Any] = {"cross_shard": cross_shard}
    if split is not None:
        sampling["split"] = split
    cfg = config(tmp_path / "data", fmt, **sampling)
    assert_masks_follow(cfg, docs)  # cold: read from each format, then cached
    cold = batches(cfg)
    if split is None:  # a split reads its bookend shards' bounds at start (source_split)
        refuse_indexes(fmt)
    warm = batches(cfg)  # warm: mapped from the cache, no index read
    assert len(warm) == len(cold) > 0
    for got, want in zip(warm, cold, strict=True):
        assert got.keys() == want.keys()
        assert all(torch.equal(got[key], want[key]) for key in want)


def test_small_shards_are_read_from_their_format_and_not_cached(tmp_path: Path) -> None:
    docs = make_documents(seed=7)
    write_source(tmp_path / "data", "dolma", docs)
    cfg = config(tmp_path / "data", "dolma")
    cfg["storage"] = {"cache_dir": str(tmp_path / "cache")}
    assert_masks_follow(cfg, docs)
    assert not (tmp_path / "cache" / "documents").exists()


def source_shards(folder: Path, cache: Path) -> tuple[ShardSet, ShardDocuments]:
    cfg = load_config(config(folder, "dolma") | {"storage": {"cache_dir": str(cache)}})
    catalog = describe_sources(cfg)[0]
    shards = ShardSet(catalog.shards)
    return shards, ShardDocuments(cfg, shards)


def reference_starts(shards: ShardSet, starts: np.ndarray, width: int) -> np.ndarray:
    """Document starts of windows from every shard's whole index (and every shard start)."""
    count = len(shards.shards)
    bounds = [shards.shard(i).document_bounds()[:-1] + shards.offsets[i] for i in range(count)]
    every = np.unique(np.concatenate([*bounds, shards.offsets[:-1]]))
    out = np.zeros((starts.size, width), dtype=bool)
    for row, start in enumerate(starts.tolist()):
        inside = every[(every > start) & (every < start + width)]
        out[row, inside - start] = True
    return out


def test_only_the_shards_a_chunk_touches_are_read(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, cache_every_shard: None
) -> None:
    write_source(tmp_path / "data", "dolma", make_documents(seed=11, count=80), files=4)
    shards, documents = source_shards(tmp_path / "data", tmp_path / "cache")
    offsets = shards.offsets
    inside = np.array([offsets[1] + 2, offsets[1] + 5], dtype=np.int64)  # both in shard 1
    straddling = np.array([offsets[3] - 4], dtype=np.int64)  # shards 2 and 3
    expected = [reference_starts(shards, rows, 9) for rows in (inside, straddling)]
    read: list[str] = []
    original = DolmaShard.document_bounds

    def counted(self: DolmaShard) -> np.ndarray:
        read.append(Path(self.info.path).name)
        return original(self)

    monkeypatch.setattr(DolmaShard, "document_bounds", counted)
    fresh = ShardDocuments(load_config(config(tmp_path / "data", "dolma")), ShardSet(shards.shards))
    fresh.folder = documents.folder
    assert np.array_equal(fresh.starts(inside, 9), expected[0])
    assert read == ["part-1-00000.npy"]  # shard 1 alone, once, for both windows
    assert np.array_equal(fresh.starts(straddling, 9), expected[1])
    assert read == ["part-1-00000.npy", "part-2-00000.npy", "part-3-00000.npy"]
    fresh.starts(inside, 9)
    assert len(read) == 3  # kept in this process
    assert len(list((tmp_path / "cache" / "documents").rglob("*-bounds.npy"))) == 3


def test_kept_bounds_are_bounded_like_the_open_shards(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(source_documents, "MAX_OPEN_SHARDS", 2)
    write_source(tmp_path / "data", "dolma", make_documents(seed=5, count=80), files=4)
    shards, documents = source_shards(tmp_path / "data", tmp_path / "cache")
    starts = shards.offsets[:-1] + 1
    for _ in range(2):
        assert np.array_equal(documents.starts(starts, 5), reference_starts(shards, starts, 5))
        assert list(documents._kept) == [2, 3]
    travelled = pickle.loads(pickle.dumps(documents))
    assert not travelled._kept  # a worker maps its own
    assert np.array_equal(travelled.starts(starts, 5), documents.starts(starts, 5))


def test_changed_shards_are_read_again(tmp_path: Path, cache_every_shard: None) -> None:
    docs = make_documents(seed=13)
    write_source(tmp_path / "data", "dolma", docs)
    cfg = config(tmp_path / "data", "dolma")
    assert_masks_follow(cfg, docs)
    merged = [np.concatenate(docs[:2]), *docs[2:]]  # same tokens, one boundary less
    write_source(tmp_path / "data", "dolma", merged)
    assert_masks_follow(cfg, merged)


def test_a_damaged_cache_file_is_rebuilt_with_a_warning(
    tmp_path: Path, cache_every_shard: None
) -> None:
    docs = make_documents(seed=17)
    write_source(tmp_path / "data", "dolma", docs)
    cfg = config(tmp_path / "data", "dolma") | {"storage": {"cache_dir": str(tmp_path / "c")}}
    expected = batches(cfg)
    target = next((tmp_path / "c" / "documents").rglob("*-bounds.npy"))
    data = bytearray(target.read_bytes())
    data[-8:] = (3).to_bytes(8, "little")  # same size, another bound
    target.write_bytes(bytes(data))
    with pytest.warns(UserWarning, match=r"cache of the document bounds: .*bounds\.npy changed"):
        got = batches(cfg)
    assert all(torch.equal(a[k], b[k]) for a, b in zip(got, expected, strict=True) for k in a)


def test_an_unwritable_cache_folder_costs_a_warning(
    tmp_path: Path, cache_every_shard: None
) -> None:
    docs = make_documents(seed=19)
    write_source(tmp_path / "data", "dolma", docs)
    (tmp_path / "cache").mkdir()
    (tmp_path / "cache" / "documents").write_text("in the way")
    cfg = config(tmp_path / "data", "dolma") | {"storage": {"cache_dir": str(tmp_path / "cache")}}
    with pytest.warns(UserWarning, match=r"document bounds of .* are not cached") as caught:
        assert_masks_follow(cfg, docs)
    documents_warnings = [w for w in caught if "document bounds" in str(w.message)]
    assert len(documents_warnings) == 1  # once per process (per source)


@pytest.mark.parametrize("fmt", FORMATS)
def test_source_bounds_are_built_once_then_mapped(
    tmp_path: Path, fmt: str, refuse_indexes: Any
) -> None:
    docs = make_documents(seed=23)
    write_source(tmp_path / "data", fmt, docs)
    raw = config(tmp_path / "data", fmt) | {"eos_token_id": EOS}
    cfg = load_config(raw | {"storage": {"cache_dir": str(tmp_path / "cache")}})
    catalog = describe_sources(cfg)[0]
    expected = np.cumsum([0, *map(len, docs)])
    cold = source_document_bounds(cfg, catalog, ShardSet(catalog.shards), None)
    assert np.array_equal(cold, expected)
    refuse_indexes(fmt)
    warm = source_document_bounds(cfg, catalog, ShardSet(catalog.shards), (5, 200))
    assert isinstance(warm.base, np.memmap) or isinstance(warm, np.memmap)
    assert np.array_equal(warm, expected[(expected >= 5) & (expected <= 200)])


def test_packed_plans_of_two_lengths_read_the_documents_once(
    tmp_path: Path, refuse_indexes: Any
) -> None:
    docs = make_documents(seed=29)
    write_source(tmp_path / "data", "dolma", docs)
    base = config(tmp_path / "data", "dolma") | {"pad_token_id": 1}
    base["sampling"] = {"mode": "packed"}
    first = batches(base)
    refuse_indexes("dolma")
    other = batches(base | {"seq_len": 16})  # a new plan, from the cached bounds
    assert len(first) > 0 and len(other) > 0
    again = batches(base)
    assert all(torch.equal(a[k], b[k]) for a, b in zip(again, first, strict=True) for k in a)


@pytest.mark.parametrize("context", ["fork", "spawn"])
def test_process_workers_map_the_bounds_the_first_reader_cached(
    tmp_path: Path, context: str, cache_every_shard: None
) -> None:
    """Forked workers inherit the lowered threshold and map the cached files; spawned ones
    read small shards from the format: the batches are the same."""
    docs = make_documents(seed=31, count=200)
    write_source(tmp_path / "data", "dolma", docs)
    cfg = config(tmp_path / "data", "dolma")
    expected = batches(cfg)
    options = streamload.LoaderOptions(worker_type="process", multiprocessing_context=context)
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", "each pass")
        got = list(streamload.build_loader(cfg, batch_size=4, num_workers=2, options=options))
    assert len(got) == len(expected)
    assert all(torch.equal(a[k], b[k]) for a, b in zip(got, expected, strict=True) for k in b)
