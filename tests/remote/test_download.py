"""Whole files in the disk cache (``streamload.remote.download``): token files read whole
(``storage.whole_shard_size``) and companion indexes arrive as concurrent ranges written in
place, once per process, count in ``cache_size``, leave nothing behind when they fail, and
fall back to range reads when the cache cannot keep them. Against moto's S3 server."""

from __future__ import annotations

import math
import threading
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from streamload import build_loader, load_config
from streamload.config import StorageConfig
from streamload.errors import RemoteReadError
from streamload.formats.base import token_array
from streamload.remote.handle import RemoteObject, StorageHandle
from streamload.remote.versions import object_version
from streamload.streams.interface import SampleStream
from streamload.testing import assert_batches_equal
from streamload.tools.convert import open_writer
from tests.helpers.corpus_factory import Corpus, document_tokens
from tests.servers.http import FaultPlan, FaultProxy
from tests.servers.s3 import S3Server

pytest.importorskip("moto.server")
s3fs = pytest.importorskip("s3fs")
pytestmark = pytest.mark.filterwarnings("ignore:each pass")

FAST = {"retries": 2, "backoff": 0.01, "timeout": 5.0, "stall_warning": 2.0, "stall_timeout": 20.0}


def _put(s3: S3Server, data: bytes) -> str:
    client = s3.client()
    if "whole" not in [b["Name"] for b in client.list_buckets().get("Buckets", [])]:
        client.create_bucket(Bucket="whole")
    key = f"{uuid.uuid4().hex[:12]}/blob.bin"
    client.put_object(Bucket="whole", Key=key, Body=data)
    return f"s3://whole/{key}"


def _store_and_object(options: dict[str, Any], cache: Path, url: str) -> tuple[Any, RemoteObject]:
    config = StorageConfig(cache_dir=str(cache), whole_shard_size=1 << 20, **FAST)
    store = StorageHandle("s3", options, config).store()
    info = store.fs.info(url)
    return store, RemoteObject(url, int(info["size"]), object_version(info))


def _leftovers(cache: Path) -> list[str]:
    return [p.name for p in cache.rglob("*") if p.is_file() and p.name.startswith(".tmp-")]


def test_a_whole_file_arrives_in_ranges_written_in_place(s3: S3Server, tmp_path: Path) -> None:
    data = np.random.default_rng(0).bytes(50_000)
    store, obj = _store_and_object(s3.storage_options(), tmp_path, _put(s3, data))
    store.whole.part = 4096
    before = store.stats.snapshot()
    path = store.whole.token_file(obj)
    after = store.stats.snapshot()
    assert path is not None and Path(path).read_bytes() == data
    late = after["timeouts"] - before["timeouts"]  # retried requests on a loaded machine
    assert after["requests"] - before["requests"] - late == math.ceil(50_000 / 4096)
    assert after["fetched_blocks"] - before["fetched_blocks"] == 1
    assert store.disk.usage() == 50_000  # counted in cache_size like any block
    assert _leftovers(tmp_path) == []
    assert store.whole.token_file(obj) == path  # cached: no further request
    assert store.stats.snapshot()["requests"] == after["requests"]


def test_concurrent_readers_share_one_download(s3: S3Server, tmp_path: Path) -> None:
    data = np.random.default_rng(1).bytes(40_000)
    store, obj = _store_and_object(s3.storage_options(), tmp_path, _put(s3, data))
    store.whole.part = 4096
    before = store.stats.snapshot()
    start = threading.Barrier(6)
    paths: list[str | None] = []

    def read() -> None:
        start.wait()
        paths.append(store.whole.token_file(obj))

    threads = [threading.Thread(target=read) for _ in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(set(paths)) == 1 and paths[0] is not None
    assert Path(paths[0]).read_bytes() == data
    after = store.stats.snapshot()
    late = after["timeouts"] - before["timeouts"]  # retried requests on a loaded machine
    assert after["requests"] - before["requests"] - late == math.ceil(40_000 / 4096)


def test_a_failed_download_leaves_nothing_and_is_tried_again(s3: S3Server, tmp_path: Path) -> None:
    data = np.random.default_rng(2).bytes(30_000)
    url = _put(s3, data)
    plan = FaultPlan(fail_paths=(url.split("/")[-2],), fail_status=403)
    with FaultProxy(s3.endpoint, plan) as proxy:
        options = s3.storage_options(proxy.endpoint, config_kwargs={"retries": {"max_attempts": 1}})
        store, obj = _store_and_object(options, tmp_path, url)
        store.whole.part = 4096
        with pytest.raises(RemoteReadError, match=r"blob\.bin: cannot read bytes \["):
            store.whole.token_file(obj)
        assert _leftovers(tmp_path) == [] and store.disk.usage() == 0
        plan.fail_paths = ()  # the store answers again: the next reader downloads it
        path = store.whole.token_file(obj)
    assert path is not None and Path(path).read_bytes() == data


def _remote(corpus: Corpus, url: str, s3: S3Server, cache: Path, **storage: Any) -> dict:
    source = {"path": url, "storage_options": s3.storage_options()}
    storage = {"cache_dir": str(cache), **FAST, **storage}
    return corpus.config(seq_len=16, source=source, storage=storage)


def _batches(config: dict[str, Any], workers: int = 0) -> list[dict[str, Any]]:
    with build_loader(config, batch_size=4, num_workers=workers) as loader:
        return list(loader)


def _first_tokens(config: dict[str, Any]) -> Any:
    return token_array(SampleStream.from_config(load_config(config)).sources[0].catalog.shards[0])


def test_a_file_over_half_the_cache_is_read_by_range(
    make_corpus: Callable[..., Corpus], s3: S3Server, tmp_path: Path
) -> None:
    corpus = make_corpus([1100, 300, 900])  # 2.2 KB, 0.6 KB and 1.8 KB of uint16
    url = s3.upload_folder(corpus.folder, "whole", uuid.uuid4().hex[:12])
    config = _remote(corpus, url, s3, tmp_path / "c", whole_shard_size=1 << 20,
                     cache_size=2048, block_size=512)  # fmt: skip
    assert_batches_equal(_batches(corpus.config(seq_len=16)), _batches(config, 2), "by range")
    assert not isinstance(_first_tokens(config), np.ndarray)  # over 1024 bytes: by range
    small = {**config, "storage": {**config["storage"], "cache_size": 1 << 20}}
    assert isinstance(_first_tokens(small), np.ndarray)  # mapped from the cache


def test_an_unwritable_cache_falls_back_to_ranges(
    make_corpus: Callable[..., Corpus], s3: S3Server, tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:  # fmt: skip
    corpus = make_corpus([700, 500, 600])
    url = s3.upload_folder(corpus.folder, "whole", uuid.uuid4().hex[:12])
    cache = tmp_path / "cache"
    cache.mkdir()
    (cache / "blocks").write_bytes(b"")  # a file where the cache's folder should be
    config = _remote(corpus, url, s3, cache, whole_shard_size=1 << 20)
    assert_batches_equal(_batches(corpus.config(seq_len=16)), _batches(config), "no cache")
    assert "cannot cache the whole file" in caplog.text


def _megatron_folder(folder: Path) -> None:
    tokens = document_tokens(3000, eos_token_id=0, vocab_size=1000, mean_doc_len=20.0, seed=5)
    docs = np.split(tokens.astype(np.uint16), np.flatnonzero(tokens == 0)[:-1] + 1)
    folder.mkdir(parents=True)
    for part, chunk in enumerate(np.array_split(np.arange(len(docs)), 3)):
        with open_writer("megatron", str(folder / f"shard_{part}"), np.dtype("uint16")) as w:
            for i in chunk.tolist():
                w.add_document(docs[i])


@pytest.mark.parametrize("cache_size", [1 << 20, 0])
def test_companion_indexes_are_whole_files_of_the_cache(
    make_corpus: Callable[..., Corpus], s3: S3Server, tmp_path: Path, cache_size: int
) -> None:
    folder = tmp_path / "megatron"
    _megatron_folder(folder)
    url = s3.upload_folder(folder, "whole", uuid.uuid4().hex[:12])
    base = make_corpus([10]).config(seq_len=16, packing={"masks": True})
    local = {**base, "sources": [{"name": "m", "path": str(folder), "format": "megatron"}]}
    cache = tmp_path / "cache"
    remote = {**local, "storage": {"cache_dir": str(cache), "cache_size": cache_size, **FAST},
              "sources": [{"name": "m", "path": url, "format": "megatron",
                           "storage_options": s3.storage_options()}]}  # fmt: skip
    assert_batches_equal(_batches(local), _batches(remote), f"cache_size {cache_size}")
    fs = s3fs.S3FileSystem(**s3.storage_options())
    for idx in sorted(folder.glob("*.idx")):
        info = fs.info(f"{url}/{idx.name}")
        key = RemoteObject(f"{url}/{idx.name}", info["size"], object_version(info)).key(
            0, info["size"]
        )
        if cache_size:  # a whole file of the LRU cache, counted in its size
            assert (cache / "blocks" / key[:2] / key).read_bytes() == idx.read_bytes()
        else:  # no disk cache: a copy in files/
            (copy,) = (cache / "files" / key[:2]).glob(f"{key}-*")
            assert copy.read_bytes() == idx.read_bytes()
    assert (cache / "files").exists() == (cache_size == 0)
