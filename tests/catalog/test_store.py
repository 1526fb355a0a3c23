"""The shard catalog (``streamload.catalog.store``): built once, mapped by every process,
checked by one listing per folder (never a stat per file), what changed named, a shard
rewritten in place refused at its first opening; ``trust_catalog`` lists nothing."""

from __future__ import annotations

import logging
import multiprocessing
import os
import pickle
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from streamload.catalog import sources
from streamload.catalog.sources import describe_source
from streamload.config import SourceConfig
from streamload.config.storage import StorageConfig
from streamload.errors import ConfigError, FormatError
from streamload.streams.shard_set import ShardSet
from tests.helpers.corpus_factory import Corpus


def _folder(tmp_path: Path, count: int) -> Path:
    folder = tmp_path / "data"
    folder.mkdir()
    for i in range(count):
        np.save(folder / f"s_{i:04d}.npy", np.arange(1, 20 + i, dtype=np.uint16))
    return folder


def _describe(folder: Path, cache: Path, **storage: Any) -> Any:
    config = StorageConfig(cache_dir=str(cache), **storage)
    return describe_source(SourceConfig(name="s", path=str(folder)), storage=config)


@pytest.fixture
def described(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[str]]:
    """The paths whose headers are read (describe_shard calls), in order."""
    calls: list[str] = []
    real = sources.describe_shard

    def counting(fs: Any, listed: Any, *args: Any) -> Any:
        calls.append(listed.path)
        return real(fs, listed, *args)

    monkeypatch.setattr(sources, "describe_shard", counting)
    yield calls


def test_a_warm_start_maps_the_catalog_and_reads_no_header(
    tmp_path: Path, described: list[str]
) -> None:
    folder = _folder(tmp_path, 30)
    first = _describe(folder, tmp_path / "cache")
    assert len(described) == 30
    again = _describe(folder, tmp_path / "cache")
    assert len(described) == 30  # nothing described again
    assert isinstance(again.shards.num_tokens, np.memmap)  # mapped from the cache
    assert list(again.shards) == list(first.shards)
    assert again.fingerprint() == first.fingerprint()
    copy = pickle.loads(pickle.dumps(again.shards))  # a worker process maps it again
    assert isinstance(copy.num_tokens, np.memmap) and list(copy) == list(first.shards)


def test_the_check_is_one_listing_per_folder_not_a_stat_per_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    folder = _folder(tmp_path, 200)
    _describe(folder, tmp_path / "cache")
    counts = {"stat": 0, "listdir": 0, "scandir": 0}

    def counted(name: str, real: Callable[..., Any]) -> Callable[..., Any]:
        def call(*args: Any, **kwargs: Any) -> Any:
            counts[name] += 1
            return real(*args, **kwargs)

        return call

    for name in counts:
        monkeypatch.setattr(os, name, counted(name, getattr(os, name)))
    _describe(folder, tmp_path / "cache")
    assert counts["listdir"] + counts["scandir"] <= 2
    assert counts["stat"] < 40  # the folder, its index files, the cache's own files: not 200


@pytest.mark.parametrize("change", ["added", "removed", "replaced"])
def test_what_changed_is_named_and_described_again(
    change: str, tmp_path: Path, caplog: pytest.LogCaptureFixture, described: list[str]
) -> None:
    folder = _folder(tmp_path, 5)
    _describe(folder, tmp_path / "cache")
    if change == "added":
        np.save(folder / "s_0009.npy", np.arange(1, 50, dtype=np.uint16))
    elif change == "removed":
        (folder / "s_0002.npy").unlink()
    else:  # a new file renamed over the old one: the usual way of replacing a file
        np.save(tmp_path / "new.npy", np.arange(1, 90, dtype=np.uint16))
        os.replace(tmp_path / "new.npy", folder / "s_0002.npy")
    with caplog.at_level(logging.WARNING, logger="streamload.catalog"):
        again = _describe(folder, tmp_path / "cache")
    (message,) = [r.getMessage() for r in caplog.records]
    expected = {
        "added": "added s_0009.npy",
        "removed": "removed s_0002.npy",
        "replaced": "was modified",
    }[change]
    assert "out of date" in message and expected in message and str(folder) in message
    assert len(described) == 5 + len(again.shards)
    fresh = _describe(folder, tmp_path / "fresh")
    assert list(again.shards) == list(fresh.shards)


def test_a_shard_rewritten_in_place_is_refused_when_opened(tmp_path: Path) -> None:
    folder = _folder(tmp_path, 3)
    first = _describe(folder, tmp_path / "cache")
    np.save(folder / "s_0001.npy", np.arange(1, 40, dtype=np.uint16))  # in place: no listing
    served = _describe(folder, tmp_path / "cache")
    assert served.fingerprint() == first.fingerprint()
    shards = ShardSet(served.shards)
    shards.shard(0)  # unchanged: opens
    with pytest.raises(FormatError, match=r"s_0001\.npy changed since the catalog was built"):
        shards.shard(1)
    again = _describe(folder, tmp_path / "cache")  # the stale entry was removed
    assert again.fingerprint() != first.fingerprint()
    assert again.shards[1].num_tokens == 39


def test_trust_catalog_lists_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    folder = _folder(tmp_path, 4)
    first = _describe(folder, tmp_path / "cache")
    np.save(folder / "s_0009.npy", np.arange(1, 50, dtype=np.uint16))

    def no_listing(*args: Any) -> Any:
        raise AssertionError("listed")

    monkeypatch.setattr(os, "listdir", no_listing)
    trusted = _describe(folder, tmp_path / "cache", trust_catalog=True)
    assert list(trusted.shards) == list(first.shards)  # the new file is not seen: trusted
    with pytest.raises(ConfigError, match=r"storage\.trust_catalog = 'yes' must be true/false"):
        StorageConfig(trust_catalog="yes")


def test_nothing_is_cached_without_a_disk_cache(
    make_corpus: Callable[..., Corpus], tmp_path: Path, described: list[str]
) -> None:
    corpus = make_corpus([100, 100])
    _describe(corpus.folder, tmp_path / "cache", cache_size=0)
    _describe(corpus.folder, tmp_path / "cache", cache_size=0)
    assert len(described) == 4
    assert not list((tmp_path / "cache").rglob("*-description.json"))


def _describe_in_child(args: tuple[str, str], queue: Any) -> None:
    folder, cache = args
    calls = []
    real = sources.describe_shard

    def counting(fs: Any, listed: Any, *rest: Any) -> Any:
        calls.append(listed.path)
        return real(fs, listed, *rest)

    sources.describe_shard = counting  # type: ignore[assignment]
    catalog = _describe(Path(folder), Path(cache))
    queue.put((len(calls), catalog.fingerprint()))


@pytest.mark.slow
def test_processes_starting_together_build_the_catalog_once(tmp_path: Path) -> None:
    folder = _folder(tmp_path, 60)
    context = multiprocessing.get_context("spawn")
    queue = context.Queue()
    args = (str(folder), str(tmp_path / "cache"))
    children = [context.Process(target=_describe_in_child, args=(args, queue)) for _ in range(4)]
    for child in children:
        child.start()
    results = [queue.get(timeout=180) for _ in children]
    for child in children:
        child.join(timeout=60)
        assert child.exitcode == 0
    assert sorted(calls for calls, _ in results) == [0, 0, 0, 60]  # one builder
    assert len({fingerprint for _, fingerprint in results}) == 1


_CHANGES = st.lists(
    st.tuples(st.sampled_from(["add", "remove", "replace", "none"]), st.integers(0, 10**6)),
    min_size=1,
    max_size=6,
)


@settings(
    max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(sizes=st.lists(st.integers(2, 60), min_size=1, max_size=12), changes=_CHANGES)
def test_a_cached_catalog_always_equals_a_fresh_description(
    tmp_path_factory: pytest.TempPathFactory, sizes: list[int], changes: list[tuple[str, int]]
) -> None:
    """Whatever files are added, removed or replaced (by a rename, as writers do) between two
    starts, the catalog a start uses equals describing the folder afresh."""
    root = tmp_path_factory.mktemp("changes")
    folder, cache = root / "data", root / "cache"
    folder.mkdir()
    for i, size in enumerate(sizes):
        np.save(folder / f"s_{i:04d}.npy", np.arange(1, size + 1, dtype=np.uint16))
    source = SourceConfig(name="s", path=str(folder))
    storage = StorageConfig(cache_dir=str(cache))
    for change, seed in changes:
        time.sleep(0.02)  # file times tick with the kernel's coarse clock (a few ms)
        names = sorted(p.name for p in folder.iterdir())
        if change == "add":
            np.save(
                folder / f"s_{1000 + seed % 1000:04d}.npy",
                np.arange(1, 7 + seed % 50, dtype=np.uint16),
            )
        elif change == "remove" and len(names) > 1:
            (folder / names[seed % len(names)]).unlink()
        elif change == "replace":
            np.save(root / "new.npy", np.arange(1, 3 + seed % 70, dtype=np.uint16))
            os.replace(root / "new.npy", folder / names[seed % len(names)])
        cached = describe_source(source, storage=storage)
        fresh = describe_source(source, storage=storage, fresh=True)
        assert list(cached.shards) == list(fresh.shards)
        assert cached.fingerprint() == fresh.fingerprint()
