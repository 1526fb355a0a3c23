"""The range client (``storage.client``): presigned GETs over pooled HTTP connections or
fsspec's ``cat_file``, against moto's S3 server and a static HTTP server on loopback.

Both clients give the batches of the local copy; an object replaced after start-up is an error
naming it (``If-Match`` where the store honours it, the answer's ``ETag`` where it does not);
a store that refuses presigned URLs falls back to fsspec under ``"auto"`` and is an error under
``"http"``.
"""

from __future__ import annotations

import logging
import os
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from streamload import ConfigError, build_loader
from streamload.config.storage import StorageConfig
from streamload.errors import RemoteReadError
from streamload.remote.http_client import http_client_for
from streamload.remote.store import RemoteStore
from streamload.testing import assert_batches_equal
from tests.helpers.corpus_factory import Corpus
from tests.servers.http import FaultPlan, FaultProxy, RangeFileServer
from tests.servers.s3 import S3Server

pytest.importorskip("moto.server")
pytest.importorskip("s3fs")
pytestmark = pytest.mark.filterwarnings("ignore:each pass")

FAST = {"retries": 2, "backoff": 0.01, "timeout": 5.0, "stall_warning": 2.0, "stall_timeout": 20.0}


def _config(corpus: Corpus, url: Any, options: dict[str, Any], cache: Path, client: str,
            **source: Any) -> dict[str, Any]:  # fmt: skip
    storage = {"cache_dir": str(cache), "client": client, **FAST}
    source = {"path": url, "storage_options": options, **source}
    return corpus.config(seq_len=16, source=source, storage=storage)


def _batches(config: dict[str, Any], **kwargs: Any) -> list[dict[str, torch.Tensor]]:
    with build_loader(config, batch_size=4, **kwargs) as loader:
        return list(loader)


def _http_clients(cache: Path) -> list[bool]:
    """Per store of this process using ``cache``: does it read through the HTTP client?"""
    stores = [s for s in RemoteStore.all_stores() if s.config.cache_dir == str(cache)]
    return [store.fetcher.http is not None for store in stores]


@pytest.mark.parametrize("client", ["http", "fsspec", "auto"])
def test_clients_read_the_local_batches(
    make_corpus: Callable[..., Corpus], s3: S3Server, tmp_path: Path, client: str
) -> None:
    corpus = make_corpus([700, 300, 900])
    url = s3.upload_folder(corpus.folder, "corpora", uuid.uuid4().hex[:12])
    config = _config(corpus, url, s3.storage_options(), tmp_path / "cache", client)
    with build_loader(config, batch_size=4) as loader:
        remote = list(loader)
        stats = loader.stats()["storage"]["web"]
        uses_http = _http_clients(tmp_path / "cache")
    assert_batches_equal(_batches(corpus.config(seq_len=16)), remote, f"client {client}")
    assert stats["requests"] > 0 and stats["errors"] == 0
    assert uses_http == [client != "fsspec"]


@pytest.mark.parametrize("workers", [0, 2])
def test_replaced_s3_object_is_named(
    make_corpus: Callable[..., Corpus], s3: S3Server, tmp_path: Path, workers: int
) -> None:
    corpus = make_corpus([500, 400, 600], fmt="raw")
    url = s3.upload_folder(corpus.folder, "corpora", uuid.uuid4().hex[:12])
    config = _config(corpus, url, s3.storage_options(), tmp_path / "c", "auto", format="raw")
    loader = build_loader(config, batch_size=4, num_workers=workers)  # lists the ETags
    bucket, prefix = url.removeprefix("s3://").split("/", 1)
    same_size = np.zeros_like(corpus.tokens[1]).tobytes()
    s3.client().put_object(Bucket=bucket, Key=f"{prefix}/shard_00001.bin", Body=same_size)
    with pytest.raises(RemoteReadError, match=rf"{url}/shard_00001.bin: the object changed"):
        list(loader)  # moto honours If-Match: 412


def test_replaced_http_object_is_named(make_corpus: Callable[..., Corpus], tmp_path: Path) -> None:
    corpus = make_corpus([500, 400, 600], fmt="raw")
    with RangeFileServer(corpus.folder) as server:
        urls = [f"{server.url}/{p.name}" for p in corpus.paths]
        config = _config(corpus, urls, {}, tmp_path / "c", "auto", format="raw")
        assert_batches_equal(_batches(corpus.config(seq_len=16)), _batches(config), "http")
        config["storage"]["cache_dir"] = str(tmp_path / "empty")  # (cached bytes are the
        loader = build_loader(config, batch_size=4)  # listed version: they stay readable)
        path = corpus.paths[2]
        stat = path.stat()
        path.write_bytes(np.zeros_like(corpus.tokens[2]).tobytes())
        os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns + 10**9))  # a new ETag
        with pytest.raises(RemoteReadError, match=rf"{urls[2]}: the object changed.*ETag"):
            list(loader)  # the server ignores If-Match: the answer's ETag tells


@pytest.mark.slow
def test_refused_signature_falls_back_to_fsspec(
    make_corpus: Callable[..., Corpus], s3: S3Server, tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:  # fmt: skip
    corpus = make_corpus([600, 500, 700])
    url = s3.upload_folder(corpus.folder, "corpora", uuid.uuid4().hex[:12])
    local = _batches(corpus.config(seq_len=16))
    plan = FaultPlan(fail_paths=("Signature=",), fail_status=403)  # presigned GETs only
    with FaultProxy(s3.endpoint, plan) as proxy:
        options = s3.storage_options(proxy.endpoint)
        auto = _config(corpus, url, options, tmp_path / "a", "auto")
        with caplog.at_level(logging.WARNING, "streamload.remote"):
            assert_batches_equal(local, _batches(auto), "fallback to fsspec")
        assert "presigned range GETs refused" in caplog.text
        strict = _config(corpus, url, options, tmp_path / "h", "http")
        with pytest.raises(ConfigError, match=r"storage.client = 'http' but .*403"):
            _batches(strict)


def test_client_choice() -> None:
    def choice(protocol: str, client: str, **options: Any) -> bool:
        config = StorageConfig(client=client)
        return http_client_for(None, protocol, options, config) is not None

    assert choice("s3", "auto") and choice("https", "auto", headers={"a": "b"})
    assert not choice("s3", "auto", requester_pays=True)
    assert not choice("s3", "auto", s3_additional_kwargs={"SSECustomerKey": "k"})
    assert not choice("https", "auto", client_kwargs={"auth": "x"})
    assert not choice("gs", "auto") and choice("gs", "http")
    assert not choice("s3", "fsspec")
    with pytest.raises(ConfigError, match=r"storage.client = 'http' cannot read memory://"):
        choice("memory", "http")
    with pytest.raises(ConfigError, match=r"storage.client"):
        StorageConfig(client="curl")


@pytest.mark.slow
def test_one_denied_object_is_that_objects_error_not_the_clients(
    make_corpus: Callable[..., Corpus], s3: S3Server, tmp_path: Path
) -> None:
    """A 403 on one object (to fsspec too) is not a refused signature: under ``on_error =
    "skip"`` every client skips the same samples and keeps its client; under ``"raise"`` it is
    a RemoteReadError naming the object."""
    corpus = make_corpus([600, 500, 700], fmt="raw")
    url = s3.upload_folder(corpus.folder, "corpora", uuid.uuid4().hex[:12])
    plan = FaultPlan(fail_paths=("shard_00001.bin",), fail_status=403)
    got, skipped = {}, {}
    with FaultProxy(s3.endpoint, plan) as proxy:
        options = s3.storage_options(proxy.endpoint)
        for client in ("fsspec", "http", "auto"):
            cache = tmp_path / client
            config = _config(corpus, url, options, cache, client, format="raw", on_error="skip")
            with build_loader(config, batch_size=4) as loader:
                got[client] = list(loader)
                skipped[client] = loader.stats()["storage"]["web"]["skipped_samples"]
                assert _http_clients(cache) == [client != "fsspec"], client
            config = _config(corpus, url, options, tmp_path / f"r-{client}", client, format="raw")
            denied = rf"{url}/shard_00001.bin: cannot read .*PermissionError"
            with pytest.raises(RemoteReadError, match=denied):
                _batches(config)
    assert skipped["fsspec"] > 0 and skipped["http"] == skipped["auto"] == skipped["fsspec"]
    assert_batches_equal(got["fsspec"], got["http"], "http client, one object denied")
    assert_batches_equal(got["fsspec"], got["auto"], "auto client, one object denied")
