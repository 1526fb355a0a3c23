"""The packing plan's disk cache: built once per (data, config), mapped after, one builder
for many processes, rebuilt when the data changes or a file is damaged, never trusted blind."""

from __future__ import annotations

import hashlib
import multiprocessing
import os
import pickle
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import streamload
from streamload.errors import ConfigError
from streamload.modes.packed.source import PackedSource
from tests.helpers.catalog import rewrote_in_place
from tests.helpers.corpus_factory import Corpus
from tests.helpers.shards import write_megatron_documents
from tests.streams.test_packed import packed_config


def cached_config(corpus: Corpus, folder: Path, mode: str = "packed") -> dict[str, Any]:
    cfg = packed_config(corpus, mode)
    cfg["sampling"]["cache_dir"] = str(folder)
    return cfg


def rows(cfg: dict[str, Any]) -> np.ndarray:
    """Every sample of pass 0, in order."""
    stream = streamload.build_stream(streamload.load_config(cfg))
    return stream.read(0, np.arange(stream.pass_length))[0]


def plan_files(folder: Path) -> list[str]:
    return sorted(p.name.split("-", 1)[1] for p in folder.iterdir())


@pytest.fixture
def no_scan(monkeypatch: pytest.MonkeyPatch) -> Callable[[], None]:
    """Call it to make any look at the sources' documents fail (the plan must come mapped)."""

    def arm() -> None:
        def refuse(self: PackedSource) -> np.ndarray:
            raise AssertionError(f"source {self.name!r}: documents read with a warm cache")

        monkeypatch.setattr(PackedSource, "_document_bounds", refuse)

    return arm


@pytest.mark.parametrize("mode", ["packed", "padded"])
def test_the_plan_is_built_once_then_mapped(
    make_corpus: Callable[..., Corpus], tmp_path: Path, no_scan: Callable[[], None], mode: str
) -> None:
    corpus = make_corpus([900, 300], mean_doc_len=11.0)
    cfg = cached_config(corpus, tmp_path, mode)
    cold = rows(cfg)
    names = ["cut_items", "cut_tokens", "data_offsets", "documents", "lengths", "offsets"]
    assert plan_files(tmp_path) == sorted(
        [f"streamload-packing-{name}.npy" for name in [*names, "starts"]]
        + ["streamload-packing-description.json"]
    )
    no_scan()
    stream = streamload.build_stream(streamload.load_config(cfg))
    plan = stream.sources[0].plan
    assert isinstance(plan.starts.base, np.memmap) and isinstance(plan.offsets.base, np.memmap)
    assert np.array_equal(stream.read(0, np.arange(stream.pass_length))[0], cold)
    uncached = packed_config(corpus, mode)  # the same rows without any cache
    uncached["sampling"]["cache_dir"] = str(tmp_path / "elsewhere")
    with pytest.raises(AssertionError, match="documents read with a warm cache"):
        rows(uncached)


def test_packed_and_padded_plans_do_not_share_files(
    make_corpus: Callable[..., Corpus], tmp_path: Path
) -> None:
    corpus = make_corpus([600], mean_doc_len=9.0)
    packed, padded = (
        rows(cached_config(corpus, tmp_path)),
        rows(cached_config(corpus, tmp_path, "padded")),
    )
    assert len(list(tmp_path.glob("*-description.json"))) == 2
    assert packed.shape[0] < padded.shape[0]


def test_changed_data_gets_a_new_plan(make_corpus: Callable[..., Corpus], tmp_path: Path) -> None:
    corpus = make_corpus([800], mean_doc_len=10.0)
    cfg = cached_config(corpus, tmp_path)
    before = rows(cfg)
    shard = next(p for p in corpus.folder.iterdir() if p.suffix == ".npy")
    tokens = np.load(shard)
    eos = np.flatnonzero(tokens == corpus.eos_token_id)
    tokens[eos[:5]] = corpus.eos_token_id + 2  # five documents merge into their successors
    np.save(shard, tokens)  # same size, new documents
    rewrote_in_place(shard)
    after = rows(cfg)
    fresh = packed_config(corpus)
    fresh["sampling"]["cache_dir"] = str(tmp_path / "fresh")
    assert np.array_equal(after, rows(fresh))
    assert not np.array_equal(before, after)
    assert len(list(tmp_path.glob("*-description.json"))) == 2


def test_a_damaged_plan_file_is_rebuilt_with_a_warning(
    make_corpus: Callable[..., Corpus], tmp_path: Path
) -> None:
    corpus = make_corpus([700], mean_doc_len=10.0)
    cfg = cached_config(corpus, tmp_path)
    expected = rows(cfg)
    target = next(tmp_path.glob("*-streamload-packing-starts.npy"))
    data = bytearray(target.read_bytes())
    data[-8:] = (12345).to_bytes(8, "little")  # same size, another start
    target.write_bytes(bytes(data))
    with pytest.warns(UserWarning, match=r"cache of the packing plan: .*starts\.npy changed"):
        assert np.array_equal(rows(cfg), expected)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert np.array_equal(rows(cfg), expected)  # the rebuilt set is sound


def test_cache_folders_that_cannot_be_written(
    make_corpus: Callable[..., Corpus], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    corpus = make_corpus([500], mean_doc_len=10.0)
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    with pytest.raises(ConfigError, match=r"sampling\.cache_dir = '.*a-file/plans' lies below"):
        rows(cached_config(corpus, blocker / "plans"))
    monkeypatch.setenv("STREAMLOAD_CACHE_DIR", str(blocker / "cache"))  # the default folder
    with pytest.warns(UserWarning, match=r"packing plan of source 'web' is not cached"):
        assert rows(packed_config(corpus)).shape[0] > 0


def _build_in_child(cfg: dict[str, Any], queue: Any) -> None:
    """Build the stream, counting how often this process read the source's documents."""
    calls = []
    read = PackedSource._document_bounds

    def counted(self: PackedSource) -> np.ndarray:
        calls.append(1)
        return read(self)

    PackedSource._document_bounds = counted  # type: ignore[method-assign]
    stream = streamload.build_stream(streamload.load_config(cfg))
    tokens = stream.read(0, np.arange(stream.pass_length))[0]
    queue.put((len(calls), hashlib.sha256(tokens.tobytes()).hexdigest()))


@pytest.mark.slow
def test_processes_starting_together_build_the_plan_once(
    make_corpus: Callable[..., Corpus], tmp_path: Path
) -> None:
    corpus = make_corpus([3000, 2000], mean_doc_len=12.0)
    cfg = cached_config(corpus, tmp_path)
    context = multiprocessing.get_context("spawn")
    queue = context.Queue()
    children = [context.Process(target=_build_in_child, args=(cfg, queue)) for _ in range(3)]
    for child in children:
        child.start()
    results = [queue.get(timeout=120) for _ in children]
    for child in children:
        child.join(timeout=60)
        assert child.exitcode == 0
    assert sum(calls for calls, _ in results) == 1  # one builder; the others mapped its files
    assert len({digest for _, digest in results}) == 1
    assert hashlib.sha256(rows(cfg).tobytes()).hexdigest() == results[0][1]


def test_process_workers_map_the_plan_instead_of_copying_it(
    make_corpus: Callable[..., Corpus], tmp_path: Path
) -> None:
    corpus = make_corpus([8000], mean_doc_len=6.0)
    stream = streamload.build_stream(streamload.load_config(cached_config(corpus, tmp_path)))
    plan = stream.sources[0].plan
    blob = pickle.dumps(stream)
    assert len(blob) < plan.starts.nbytes  # paths travel, not the arrays
    copy = pickle.loads(blob)
    assert isinstance(copy.sources[0].plan.starts.base, np.memmap)
    ids = np.arange(stream.pass_length)
    assert np.array_equal(copy.read(0, ids)[0], stream.read(0, ids)[0])


def test_a_rewritten_index_beside_unchanged_tokens_gets_a_new_plan(tmp_path: Path) -> None:
    """Only the Megatron ``.idx`` changes (the ``.bin`` keeps its bytes and its time): the
    plan is keyed by the index's version too, so the new documents are packed."""
    tokens = (np.arange(600) % 97 + 2).astype(np.int32)

    def write(lengths: list[int]) -> None:
        write_megatron_documents(tmp_path / "data" / "doc", tokens, lengths)

    cfg = {
        "seq_len": 16,
        "pad_token_id": 1,
        "sources": [{"name": "d", "path": str(tmp_path / "data" / "doc.bin")}],
        "sampling": {"mode": "packed", "shuffle": False, "cache_dir": str(tmp_path / "plans")},
    }
    write([40] * 15)
    binary = tmp_path / "data" / "doc.bin"
    times = (binary.stat().st_atime_ns, binary.stat().st_mtime_ns)
    before = rows(cfg)
    write([7, 33] * 15)  # the same 600 tokens, other documents
    os.utime(binary, ns=times)  # the token file looks untouched
    fresh = dict(cfg, sampling=dict(cfg["sampling"], cache_dir=str(tmp_path / "fresh")))
    after = rows(cfg)
    assert np.array_equal(after, rows(fresh))
    assert after.shape != before.shape or not np.array_equal(after, before)
