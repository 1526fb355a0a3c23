"""`RemoteStore` details against a real loopback HTTP server: the store identity is computed
once (and pickles), and disk-cache lookups are made once per piece on each path."""

from __future__ import annotations

import pickle
from collections.abc import Iterator
from pathlib import Path

import pytest

from streamload.config import StorageConfig
from streamload.remote.store import RemoteObject, RemoteStore, StorageHandle
from tests.servers.http import RangeFileServer

pytest.importorskip("aiohttp")


@pytest.fixture()
def served(tmp_path: Path) -> Iterator[tuple[str, bytes]]:
    root = tmp_path / "root"
    root.mkdir()
    data = bytes(range(256)) * 64
    (root / "obj.bin").write_bytes(data)
    with RangeFileServer(root) as server:
        yield f"{server.url}/obj.bin", data


def _store(tmp_path: Path) -> RemoteStore:
    config = StorageConfig(cache_dir=str(tmp_path / "cache"), memory_size=0)
    return RemoteStore(StorageHandle("http", {}, config))


def test_handle_key_is_cached_and_pickles(tmp_path: Path) -> None:
    handle = StorageHandle("http", {"a": 1}, StorageConfig(cache_dir=str(tmp_path)))
    key = handle.key
    assert handle.key is key  # computed once
    copy = pickle.loads(pickle.dumps(handle))
    assert copy.key == key
    assert pickle.loads(pickle.dumps(StorageHandle("http", {}, handle.config))).key != key


def test_disk_pieces_found_once_inline_and_by_prefetch(
    tmp_path: Path, served: tuple[str, bytes]
) -> None:
    url, data = served
    obj = RemoteObject(url, len(data), "v1")
    first = _store(tmp_path)
    assert first.read(obj, 100, 900) == data[100:900]
    assert first.stats.snapshot()["requests"] == 1
    for disk_inline in (True, False):  # reader path and prefetch path
        store = _store(tmp_path)
        lookups: list[str] = []
        assert store.disk is not None
        real_get = store.disk.get

        def counted(key: str, size: int, real_get=real_get, lookups=lookups) -> bytes | None:
            lookups.append(key)
            return real_get(key, size)

        store.disk.get = counted  # type: ignore[method-assign]
        (out,) = store.schedule(obj, [(100, 900)], disk_inline=disk_inline)
        got = out if isinstance(out, bytes) else out.result(timeout=30)
        assert bytes(got) == data[100:900]
        assert store.stats.snapshot()["requests"] == 0
        assert len(lookups) == 1
        lo = 1000 if disk_inline else 2000  # a piece not yet on disk
        (miss,) = store.schedule(obj, [(lo, lo + 100)], disk_inline=disk_inline)
        assert not isinstance(miss, bytes)
        assert miss.result(timeout=30) == data[lo : lo + 100]
        assert len(lookups) == 2  # a miss is looked up once, then fetched
        assert store.stats.snapshot()["requests"] == 1


def test_unversioned_objects_stay_out_of_the_disk_cache(
    served: tuple[str, bytes], tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Without an ETag or mtime a same-size replacement would share the content keys of the
    old bytes, so a later job could read them stale: such pieces are kept in memory only."""
    url, data = served
    store = _store(tmp_path)
    blocks = tmp_path / "cache" / "blocks"
    with caplog.at_level("WARNING", logger="streamload.remote"):
        assert bytes(store.read(RemoteObject(url, len(data), ""), 100, 300)) == data[100:300]
    assert not blocks.exists() or not any(blocks.rglob("*"))
    assert "has no version" in caplog.text and url in caplog.text
    assert bytes(store.read(RemoteObject(url, len(data), "v1"), 100, 300)) == data[100:300]
    assert [p for p in blocks.rglob("*") if p.is_file()]  # versioned pieces are cached
