"""The catalog cache (``streamload.catalog.store``) over remote objects: a second start-up
over the same objects reads no header and describes every shard exactly as describing again
would; a replaced object is described again (its entry rebuilt, the change named); nothing
is cached without a disk cache, or when a shard was skipped. Against moto's S3 server."""

from __future__ import annotations

import dataclasses
import logging
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from streamload import build_loader, load_config
from streamload.catalog.sources import describe_sources
from streamload.catalog.store import SCHEMA
from streamload.errors import ConfigError
from streamload.formats.base import ShardInfo
from streamload.remote.store import RemoteStore
from streamload.testing import assert_batches_equal
from tests.helpers.corpus_factory import Corpus, document_tokens
from tests.remote.test_remote_loader import _write_format
from tests.servers.http import FaultPlan, FaultProxy
from tests.servers.s3 import S3Server
from tests.streams.test_megatron_limits import read_only

pytest.importorskip("moto.server")
pytestmark = pytest.mark.filterwarnings("ignore:each pass")

FAST = {"retries": 2, "backoff": 0.01, "timeout": 5.0, "stall_warning": 2.0, "stall_timeout": 20.0}


def _config(url: str, s3: S3Server, cache: Path, **source: Any) -> dict[str, Any]:
    return {"seq_len": 16, "seed": 0, "eos_token_id": 0, "vocab_size": 1000,
            "packing": {"masks": True},
            "storage": {"cache_dir": str(cache), **FAST},
            "sources": [{"name": "w", "path": url, "storage_options": s3.storage_options(),
                         **source}]}  # fmt: skip


def _requests(cache: Path) -> int:
    return sum(
        s.stats.snapshot()["requests"]
        for s in RemoteStore.all_stores()
        if s.config.cache_dir == str(cache)
    )


def _describe(config: dict[str, Any]) -> tuple[ShardInfo, ...]:
    (catalog,) = describe_sources(load_config(config))
    return catalog.shards


def _fields(shard: ShardInfo) -> dict[str, Any]:
    return {
        f.name: getattr(shard, f.name) for f in dataclasses.fields(shard) if f.name != "storage"
    }


@pytest.mark.parametrize("fmt", ["megatron", "modalities", "dolma", "datatrove", "npy"])
def test_a_second_start_up_reads_no_header(fmt: str, s3: S3Server, tmp_path: Path) -> None:
    folder = tmp_path / fmt
    if fmt == "npy":
        folder.mkdir()
        for i in range(3):
            np.save(folder / f"shard_{i}.npy", np.arange(700 + i, dtype=np.uint16) % 999 + 1)
    else:
        tokens = document_tokens(3000, eos_token_id=0, vocab_size=1000, mean_doc_len=20.0, seed=3)
        _write_format(folder, fmt, tokens.astype(np.uint16), 0)
    url = s3.upload_folder(folder, "catalog", uuid.uuid4().hex[:12])
    cache = tmp_path / "cache"
    config = _config(url, s3, cache)
    first = _describe(config)
    described = _requests(cache)
    assert described > 0
    again = _describe(config)
    assert _requests(cache) == described  # no header read: all from the catalog cache
    assert [_fields(s) for s in again] == [_fields(s) for s in first]
    assert all(s.storage is not None for s in again)
    assert len(list((cache / "catalog").glob("*-description.json"))) == 1
    local = {**config, "sources": [{"name": "w", "path": str(folder)}]}
    with build_loader(local, batch_size=4) as a, build_loader(config, batch_size=4) as b:
        assert_batches_equal(list(a), list(b), f"{fmt}: cached catalog vs local")


def test_a_replaced_object_is_described_again(
    make_corpus: Callable[..., Corpus],
    s3: S3Server,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    corpus = make_corpus([700, 500, 600])
    url = s3.upload_folder(corpus.folder, "catalog", uuid.uuid4().hex[:12])
    cache = tmp_path / "cache"
    config = _config(url, s3, cache)
    first = _describe(config)
    bucket, prefix = url.removeprefix("s3://").split("/", 1)
    np.save(tmp_path / "new.npy", np.arange(900, dtype=np.uint16))
    s3.client().upload_file(str(tmp_path / "new.npy"), bucket, f"{prefix}/shard_00001.npy")
    before = _requests(cache)
    with caplog.at_level(logging.WARNING, logger="streamload.catalog"):
        again = _describe(config)
    assert _requests(cache) > before  # its listing differs: described again
    assert again[1].num_tokens == 900 != first[1].num_tokens
    (named,) = [r.getMessage() for r in caplog.records if "out of date" in r.getMessage()]
    assert "changed shard_00001.npy" in named
    assert len(list((cache / "catalog").glob("*-description.json"))) == 1  # rebuilt in place
    assert [s.num_tokens for s in _describe(config)] == [s.num_tokens for s in again]


def test_nothing_is_cached_without_a_disk_cache_or_after_a_skip(
    make_corpus: Callable[..., Corpus], s3: S3Server, tmp_path: Path
) -> None:
    corpus = make_corpus([700, 500, 600])
    url = s3.upload_folder(corpus.folder, "catalog", uuid.uuid4().hex[:12])
    none = _config(url, s3, tmp_path / "none")
    none["storage"]["cache_size"] = 0
    _describe(none)
    assert not (tmp_path / "none" / "catalog").exists()
    plan = FaultPlan(fail_paths=("shard_00001",), fail_status=403)  # its header unreadable
    with FaultProxy(s3.endpoint, plan) as proxy:
        skipping = _config(url, s3, tmp_path / "skip", on_error="skip")
        skipping["sources"][0]["storage_options"] = s3.storage_options(proxy.endpoint)
        with pytest.warns(UserWarning, match="skipping"):
            assert len(_describe(skipping)) == 2
    assert not list((tmp_path / "skip" / "catalog").glob("*-description.json"))


def test_the_schema_names_the_entry_layout() -> None:
    assert SCHEMA.startswith("streamload-catalog-")


@pytest.mark.parametrize("below", [False, True])
def test_a_cache_dir_that_is_a_file_is_a_config_error(
    below: bool, make_corpus: Callable[..., Corpus], s3: S3Server, tmp_path: Path
) -> None:
    corpus = make_corpus([300, 200])
    url = s3.upload_folder(corpus.folder, "catalog", uuid.uuid4().hex[:12])
    path = tmp_path / "cache"
    path.write_text("not a folder")
    root = path / "below" if below else path
    with pytest.raises(ConfigError, match=rf"storage\.cache_dir = '{root}': {path} is a file"):
        _describe(_config(url, s3, root))


def test_a_read_only_cache_dir_is_read_and_named_once(
    make_corpus: Callable[..., Corpus],
    s3: S3Server,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Entries already there are used; a new one that cannot be written costs only a warning
    (once per folder), never the run."""
    corpus = make_corpus([300, 200])
    url = s3.upload_folder(corpus.folder, "catalog", uuid.uuid4().hex[:12])
    filled, empty = tmp_path / "filled", tmp_path / "empty"
    empty.mkdir()
    first = _describe(_config(url, s3, filled))
    described = _requests(filled)
    with read_only(filled / "catalog"), read_only(empty):
        again = _describe(_config(url, s3, filled))
        assert _requests(filled) == described  # read from the cache: no header read
        with caplog.at_level(logging.WARNING, logger="streamload.remote"):
            fresh = [_describe(_config(url, s3, empty)) for _ in range(2)]
    assert [_fields(s) for s in again] == [_fields(s) for s in first]
    assert (
        [_fields(s) for s in fresh[0]]
        == [_fields(s) for s in first]
        == [_fields(s) for s in fresh[1]]
    )
    named = [r for r in caplog.records if "shard descriptions" in r.getMessage()]
    assert len(named) == 1 and str(empty) in named[0].getMessage()
