"""The disk block cache: size limit, LRU eviction, crash leftovers, several processes sharing
it; and the ``[storage]`` table (validated, never in the fingerprint)."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import time
import uuid
from collections.abc import Callable
from pathlib import Path

import pytest
from _s3 import S3Server
from conftest import Corpus

from streamload import build_loader
from streamload.config import DataConfig, StorageConfig
from streamload.errors import ConfigError
from streamload.remote import DiskBlockCache, RemoteStore
from streamload.remote.block_cache import STALE_TEMP_SECONDS
from streamload.testing import assert_batches_equal

pytest.importorskip("moto.server")


def test_eviction_keeps_the_limit_and_the_recent_blocks(tmp_path: Path) -> None:
    cache = DiskBlockCache(str(tmp_path), limit=10 * 100)
    for i in range(8):
        cache.put(f"{i:02d}key", bytes([i]) * 100)
        time.sleep(0.01)  # distinct mtimes
    assert cache.get("00key", 100) == bytes([0]) * 100  # touched: now the most recent
    for i in range(8, 14):
        cache.put(f"{i:02d}key", bytes([i]) * 100)
        time.sleep(0.01)
        assert cache.usage() <= cache.limit
    assert cache.get("00key", 100) is not None
    assert cache.get("01key", 100) is None  # the least recently used went first
    assert cache.get("13key", 100) == bytes([13]) * 100


def test_crash_leftovers_are_removed_and_partial_blocks_ignored(tmp_path: Path) -> None:
    cache = DiskBlockCache(str(tmp_path), limit=1000)
    cache.put("abcd", b"x" * 10)
    stale = Path(cache.path("abcd")).parent / ".tmp-abcd-999-dead"
    stale.write_bytes(b"half")
    old = time.time() - STALE_TEMP_SECONDS - 1
    os.utime(stale, (old, old))
    cache.evict()
    assert not stale.exists()
    assert cache.get("abcd", 11) is None  # a block of the wrong length is a miss


def _upload(s3: S3Server, corpus: Corpus) -> str:
    return s3.upload_folder(corpus.folder, "cache-tests", uuid.uuid4().hex[:12])


@pytest.mark.filterwarnings("ignore:each pass")
def test_loader_respects_the_cache_limit(
    make_corpus: Callable[..., Corpus], s3: S3Server, tmp_path: Path
) -> None:
    corpus = make_corpus([900, 700, 800])
    limit = 4096
    config = corpus.config(
        seq_len=16,
        source={"path": _upload(s3, corpus), "storage_options": s3.storage_options()},
        storage={
            "cache_dir": str(tmp_path),
            "cache_size": limit,
            "block_size": 1024,
            "memory_size": 0,
        },
    )
    with build_loader(config, batch_size=4) as loader:
        remote = list(loader)
        stats = loader.stats()["storage"]["web"]
    assert_batches_equal(list(build_loader(corpus.config(seq_len=16), batch_size=4)), remote)
    assert stats["evicted_blocks"] > 0
    assert all(store.drain() for store in RemoteStore.all_stores())  # prefetches still landing
    assert DiskBlockCache(str(tmp_path), limit).usage() <= limit


_CHILD = """
import hashlib, json, sys
from streamload import build_loader
config = json.loads(sys.argv[1])
digest = hashlib.sha256()
with build_loader(config, batch_size=4, num_workers=2) as loader:
    for batch in loader:
        digest.update(batch["input_ids"].numpy().tobytes())
print(digest.hexdigest())
"""


@pytest.mark.slow
@pytest.mark.filterwarnings("ignore:each pass")
def test_two_processes_share_one_cache(
    make_corpus: Callable[..., Corpus], s3: S3Server, tmp_path: Path
) -> None:
    corpus = make_corpus([1500, 1200, 1300])
    limit = 8192
    config = corpus.config(
        seq_len=16,
        source={"path": _upload(s3, corpus), "storage_options": s3.storage_options()},
        storage={"cache_dir": str(tmp_path), "cache_size": limit, "block_size": 1024},
    )
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).parents[1])}
    children = [
        subprocess.Popen(
            [sys.executable, "-c", _CHILD, json.dumps(config)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
        )
        for _ in range(2)
    ]
    outputs = [child.communicate(timeout=120) for child in children]
    assert [c.returncode for c in children] == [0, 0], [err for _, err in outputs]
    digest = hashlib.sha256()
    for batch in build_loader(corpus.config(seq_len=16), batch_size=4):
        digest.update(batch["input_ids"].numpy().tobytes())
    assert [out.strip() for out, _ in outputs] == [digest.hexdigest()] * 2
    cache = DiskBlockCache(str(tmp_path), limit)
    cache.evict()  # what another process wrote after one's last scan
    assert cache.usage() <= limit
    assert not list(Path(cache.root).rglob(".tmp-*"))  # no leftovers


def test_storage_table_is_validated() -> None:
    with pytest.raises(ConfigError, match=r"storage\.block_size"):
        StorageConfig(block_size=0)
    with pytest.raises(ConfigError, match=r"storage\.timeout"):
        StorageConfig(timeout=-1)
    with pytest.raises(ConfigError, match="storage: unknown key"):
        DataConfig.from_dict({"seq_len": 4, "sources": [{"name": "a", "path": "x"}],
                              "storage": {"blocksize": 1}})  # fmt: skip
    with pytest.raises(ConfigError, match="on_error"):
        DataConfig.from_dict({"seq_len": 4, "sources": [{"name": "a", "path": "x",
                                                         "on_error": "ignore"}]})  # fmt: skip


@pytest.mark.filterwarnings("ignore:each pass")
def test_storage_options_are_not_in_the_fingerprint(
    make_corpus: Callable[..., Corpus], s3: S3Server, tmp_path: Path
) -> None:
    corpus = make_corpus([500, 400])
    url = _upload(s3, corpus)

    def make(**storage: object) -> object:
        source = {"path": url, "storage_options": s3.storage_options()}
        config = corpus.config(seq_len=16, source=source, storage=storage)
        return build_loader(config, batch_size=4)

    first = make(cache_dir=str(tmp_path / "a"), prefetch_batches=2)
    it = iter(first)  # type: ignore[call-overload]
    next(it)
    state = first.state_dict()  # type: ignore[attr-defined]
    local = build_loader(corpus.config(seq_len=16), batch_size=4)
    other = make(cache_dir=str(tmp_path / "b"), block_size=4096, max_concurrency=2)
    other.load_state_dict(state)  # type: ignore[attr-defined]
    local.load_state_dict(state)
    assert state["fingerprint"] == local.state_dict()["fingerprint"]
    assert_batches_equal(list(local), list(other))  # type: ignore[call-overload]
