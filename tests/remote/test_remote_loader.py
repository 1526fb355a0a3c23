"""Remote storage against real loopback servers: moto's S3 server (through s3fs), a static
HTTP server honouring ``Range`` (fsspec's HTTP file system), and a fault-injecting proxy.

Every test compares the exact ordered batches read remotely with those read from the local
copy of the same files (docs/remote.md: the same batches, whatever the storage).
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from streamload import ConfigError, LoaderOptions, build_loader
from streamload.errors import RemoteReadError, RemoteStallError
from streamload.testing import assert_batches_equal, assert_resumes_exactly
from streamload.tools.convert import open_writer
from tests.helpers.corpus_factory import Corpus, document_tokens
from tests.helpers.shards import is_mapped
from tests.servers.http import FaultPlan, FaultProxy, RangeFileServer
from tests.servers.s3 import S3Server

pytest.importorskip("moto.server")
pytest.importorskip("s3fs")

FAST = {"retries": 3, "backoff": 0.01, "timeout": 5.0, "stall_warning": 2.0, "stall_timeout": 20.0}
"""Short waits so a broken test fails in seconds."""


@pytest.fixture
def upload(s3: S3Server) -> Callable[[Path], str]:
    """Upload a folder under a fresh prefix; returns its ``s3://`` URL."""

    def run(folder: Path) -> str:
        return s3.upload_folder(folder, "corpora", uuid.uuid4().hex[:12])

    return run


def remote_config(
    corpus: Corpus, url: Any, options: dict[str, Any], cache: Path, **storage: Any
) -> dict[str, Any]:
    """The corpus's config with its source read from ``url`` (``source`` and ``sampling``
    keys go to those tables, the rest to ``[storage]``)."""
    source = {"path": url, "storage_options": options, **storage.pop("source", {})}
    sampling = storage.pop("sampling", {})
    return corpus.config(
        seq_len=16,
        source=source,
        sampling=sampling,
        storage={"cache_dir": str(cache), **FAST, **storage},
    )


def batches(config: dict[str, Any], **kwargs: Any) -> list[dict[str, torch.Tensor]]:
    with build_loader(config, batch_size=4, **kwargs) as loader:
        return list(loader)


@pytest.mark.filterwarnings("ignore:each pass")
@pytest.mark.parametrize("workers", [0, 2])
def test_s3_batches_equal_local(
    make_corpus: Callable[..., Corpus], upload: Callable[[Path], str], s3: S3Server,
    tmp_path: Path, workers: int,
) -> None:  # fmt: skip
    corpus = make_corpus([700, 300, 900, 450])
    url = upload(corpus.folder)
    local = batches(corpus.config(seq_len=16), num_workers=workers)
    config = remote_config(corpus, url, s3.storage_options(), tmp_path / "cache")
    with build_loader(config, batch_size=4, num_workers=workers) as loader:
        remote = list(loader)
        stats = loader.stats()["storage"]["web"]
    assert_batches_equal(local, remote, "s3 vs local")
    assert stats["requests"] > 0 and stats["errors"] == 0
    # A second job hits the disk cache (content-keyed): same batches, no new range requests.
    assert_batches_equal(local, batches(config, num_workers=workers), "from the disk cache")


@pytest.mark.filterwarnings("ignore:each pass")
def test_s3_resumes_exactly(
    make_corpus: Callable[..., Corpus], upload: Callable[[Path], str], s3: S3Server,
    tmp_path: Path,
) -> None:  # fmt: skip
    corpus = make_corpus([500, 600, 400])
    config = remote_config(corpus, upload(corpus.folder), s3.storage_options(), tmp_path / "c")
    assert_resumes_exactly(
        lambda: build_loader(config, batch_size=4, num_workers=2),
        make_resumed=lambda: build_loader(corpus.config(seq_len=16), batch_size=4),
        save_points=[0, 1, 5, 17],
        passes=2,
    )


def _write_format(folder: Path, fmt: str, tokens: np.ndarray, eos: int) -> None:
    """Three shards of ``fmt`` holding the documents of ``tokens`` (each ends with EOS)."""
    ends = np.flatnonzero(tokens == eos) + 1
    docs = np.split(tokens, ends[:-1])
    names = {"megatron": "shard_{}", "modalities": "shard_{}.pbin", "dolma": "part-{}-00000.npy",
             "datatrove": "shard_{}.ds"}  # fmt: skip
    folder.mkdir(parents=True)
    for part, chunk in enumerate(np.array_split(np.arange(len(docs)), 3)):
        with open_writer(fmt, str(folder / names[fmt].format(part)), np.dtype("uint16")) as w:
            for i in chunk.tolist():
                w.add_document(docs[i])


@pytest.mark.filterwarnings("ignore:each pass")
@pytest.mark.parametrize("fmt", ["megatron", "modalities", "dolma", "datatrove"])
def test_formats_with_indexes_read_remotely(
    fmt: str, upload: Callable[[Path], str], s3: S3Server, tmp_path: Path,
    make_corpus: Callable[..., Corpus],
) -> None:  # fmt: skip
    tokens = document_tokens(3000, eos_token_id=0, vocab_size=1000, mean_doc_len=20.0, seed=3)
    folder = tmp_path / fmt
    _write_format(folder, fmt, tokens.astype(np.uint16), 0)
    base = make_corpus([10])  # only for its config helper
    local_cfg = {**base.config(seq_len=16, packing={"masks": True}),
                 "sources": [{"name": "web", "path": str(folder), "format": fmt}]}  # fmt: skip
    remote_cfg = {**local_cfg, "storage": {"cache_dir": str(tmp_path / "cache"), **FAST},
                  "sources": [{"name": "web", "path": upload(folder), "format": fmt,
                               "storage_options": s3.storage_options()}]}  # fmt: skip
    local = batches(local_cfg)
    assert_batches_equal(local, batches(remote_cfg), f"{fmt}: s3 vs local")
    assert "doc_ids" in local[0]


@pytest.mark.filterwarnings("ignore:each pass")
def test_http_range_reads(make_corpus: Callable[..., Corpus], tmp_path: Path) -> None:
    corpus = make_corpus([600, 500, 700], fmt="raw")
    with RangeFileServer(corpus.folder) as server:
        urls = [f"{server.url}/{p.name}" for p in corpus.paths]
        config = remote_config(corpus, urls, {}, tmp_path / "cache", source={"format": "raw"})
        assert_batches_equal(batches(corpus.config(seq_len=16)), batches(config), "http")


@pytest.mark.slow
@pytest.mark.filterwarnings("ignore:each pass")
def test_faults_retried_without_loss(
    make_corpus: Callable[..., Corpus], upload: Callable[[Path], str], s3: S3Server,
    tmp_path: Path,
) -> None:  # fmt: skip
    corpus = make_corpus([900, 800, 1000, 700])
    url = upload(corpus.folder)
    plan = FaultPlan(latency=0.1, error_rate=0.05, truncate_rate=0.02, max_faults=40, seed=1)
    with FaultProxy(s3.endpoint, plan) as proxy:
        options = s3.storage_options(
            proxy.endpoint, config_kwargs={"retries": {"total_max_attempts": 1}}
        )
        config = remote_config(
            corpus, url, options, tmp_path / "cache", coalesce_gap=0, max_concurrency=8
        )
        with build_loader(config, batch_size=4, num_workers=2) as loader:
            remote = list(loader)
            stats = loader.stats()["storage"]["web"]
    assert_batches_equal(batches(corpus.config(seq_len=16)), remote, "through faults")
    assert plan.injected["errors"] > 0
    assert stats["retries"] > 0 and stats["errors"] + stats["truncated"] > 0


@pytest.mark.filterwarnings("ignore:each pass")
def test_unreadable_object_is_named(
    make_corpus: Callable[..., Corpus], upload: Callable[[Path], str], s3: S3Server,
    tmp_path: Path,
) -> None:  # fmt: skip
    corpus = make_corpus([500, 400, 600], fmt="raw")
    url = upload(corpus.folder)
    config = remote_config(corpus, url, s3.storage_options(), tmp_path / "cache",
                           source={"format": "raw"})  # fmt: skip
    loader = build_loader(config, batch_size=4)
    bucket, prefix = url.removeprefix("s3://").split("/", 1)
    s3.client().delete_object(Bucket=bucket, Key=f"{prefix}/shard_00001.bin")
    with pytest.raises(RemoteReadError, match=rf"{url}/shard_00001.bin"):
        list(loader)


@pytest.mark.filterwarnings("ignore:each pass")
def test_unreadable_object_skipped_and_counted(
    make_corpus: Callable[..., Corpus], upload: Callable[[Path], str], s3: S3Server,
    tmp_path: Path, caplog: pytest.LogCaptureFixture,
) -> None:  # fmt: skip
    corpus = make_corpus([500, 400, 600], fmt="raw")
    url = upload(corpus.folder)
    config = remote_config(corpus, url, s3.storage_options(), tmp_path / "cache",
                           source={"format": "raw", "on_error": "skip"},
                           sampling={"cross_shard": False})  # fmt: skip
    local = batches(corpus.config(seq_len=16, sampling={"cross_shard": False}))
    loader = build_loader(config, batch_size=4)
    bucket, prefix = url.removeprefix("s3://").split("/", 1)
    s3.client().delete_object(Bucket=bucket, Key=f"{prefix}/shard_00001.bin")
    with caplog.at_level(logging.WARNING, "streamload.remote"):
        remote = list(loader)
    stats = loader.stats()["storage"]["web"]
    assert len(remote) == len(local)
    skipped = 0
    in_shard_1 = set(corpus.tokens[1][:-1].tolist())
    for want, got in zip(local, remote, strict=True):
        lost = (got["labels"] == -100).all(dim=-1)
        skipped += int(lost.sum())
        assert torch.equal(got["input_ids"][~lost], want["input_ids"][~lost])
        assert torch.equal(got["sample_index"], want["sample_index"])
        for row in want["input_ids"][lost]:  # exactly the windows of the deleted shard
            assert set(row.tolist()) <= in_shard_1
    assert skipped == (400 - 1) // 16 == stats["skipped_samples"]
    assert f"{url}/shard_00001.bin" in stats["skipped"]
    assert "shard_00001.bin" in caplog.text


@pytest.mark.filterwarnings("ignore:each pass")
def test_unreadable_header_skips_the_shard(
    make_corpus: Callable[..., Corpus], upload: Callable[[Path], str], s3: S3Server,
    tmp_path: Path,
) -> None:  # fmt: skip
    corpus = make_corpus([500, 400, 600])
    url = upload(corpus.folder)
    plan = FaultPlan(fail_paths=("shard_00001.npy",))
    with FaultProxy(s3.endpoint, plan) as proxy:
        no_retries = {"retries": {"total_max_attempts": 1}}
        options = s3.storage_options(proxy.endpoint, config_kwargs=no_retries)
        config = remote_config(corpus, url, options, tmp_path / "c", retries=1)
        with pytest.raises(RemoteReadError, match=r"shard_00001\.npy"):
            build_loader(config, batch_size=4)
        config["sources"][0]["on_error"] = "skip"
        with pytest.warns(UserWarning, match="skipping .*shard_00001.npy"):
            loader = build_loader(config, batch_size=4)
        assert loader.stats()["storage"]["web"]["skipped_shards"] == 1
        assert [s.relpath for s in loader.stream.sources[0].catalog.shards] == [
            "shard_00000.npy", "shard_00002.npy"
        ]  # fmt: skip


@pytest.mark.slow
@pytest.mark.filterwarnings("ignore:each pass")
def test_stall_watchdog_names_the_object(
    make_corpus: Callable[..., Corpus], upload: Callable[[Path], str], s3: S3Server,
    tmp_path: Path, caplog: pytest.LogCaptureFixture,
) -> None:  # fmt: skip
    corpus = make_corpus([500, 400], fmt="raw")
    url = upload(corpus.folder)
    # Generous times: on a loaded machine a read of the fast shard may wait well over a second
    # for the CPU (moto and the proxy run in this process), and must not trip the timeout.
    plan = FaultPlan(slow_paths=("shard_00001.bin",), slow_seconds=10.0)
    with FaultProxy(s3.endpoint, plan) as proxy:
        options = s3.storage_options(proxy.endpoint)
        config = remote_config(
            corpus, url, options, tmp_path / "c", source={"format": "raw"},
            stall_warning=0.2, stall_timeout=4.0, prefetch_batches=0,
        )  # fmt: skip
        with (
            caplog.at_level(logging.WARNING, "streamload.remote"),
            pytest.raises(RemoteStallError, match=r"shard_00001\.bin: waited"),
        ):
            list(build_loader(config, batch_size=4))
        assert "shard_00001.bin" in caplog.text and "waiting" in caplog.text


@pytest.mark.filterwarnings("ignore:each pass")
@pytest.mark.parametrize("on_error", [pytest.param("raise", marks=pytest.mark.slow), "skip"])
def test_a_stalled_chunk_fails_after_one_stall_timeout(
    make_corpus: Callable[..., Corpus], upload: Callable[[Path], str], s3: S3Server,
    tmp_path: Path, on_error: str,
) -> None:  # fmt: skip
    """A batch reads 32 windows of the one shard, each its own request; when the store hangs,
    the reader fails (or skips) them all once ``stall_timeout`` passes with nothing arriving,
    not after ``stall_timeout`` per window (until the pieces land after 20 s, here)."""
    corpus = make_corpus([3000], fmt="raw")
    url = upload(corpus.folder)
    plan = FaultPlan(slow_paths=("shard_00000.bin",), slow_seconds=20.0)  # then they land
    with FaultProxy(s3.endpoint, plan) as proxy:
        config = remote_config(
            corpus, url, s3.storage_options(proxy.endpoint), tmp_path / "c",
            source={"format": "raw", "on_error": on_error}, stall_warning=0.5,
            stall_timeout=1.0, prefetch_batches=0, timeout=120.0,
        )  # fmt: skip
        loader = build_loader(config, batch_size=32)
        began = time.monotonic()
        if on_error == "raise":
            with pytest.raises(RemoteStallError, match=r"shard_00000\.bin: waited"):
                next(iter(loader))
        else:
            batch = next(iter(loader))
            assert bool((batch["labels"] == -100).all())
            assert loader.stats()["storage"]["web"]["skipped_samples"] == 32
        assert time.monotonic() - began < 10.0
        loader.close()


@pytest.mark.slow
@pytest.mark.filterwarnings("ignore:each pass")
def test_process_workers_read_remotely(
    make_corpus: Callable[..., Corpus], upload: Callable[[Path], str], s3: S3Server,
    tmp_path: Path,
) -> None:  # fmt: skip
    corpus = make_corpus([700, 500, 600])
    config = remote_config(
        corpus, upload(corpus.folder), s3.storage_options(), tmp_path / "c", whole_shard_size=1200
    )
    options = LoaderOptions(worker_type="process")
    with build_loader(config, batch_size=4, num_workers=2, options=options) as loader:
        remote = list(loader)
    assert_batches_equal(batches(corpus.config(seq_len=16)), remote, "process workers")


@pytest.mark.filterwarnings("ignore:each pass")
def test_whole_small_shards_are_mapped_from_the_cache(
    make_corpus: Callable[..., Corpus], upload: Callable[[Path], str], s3: S3Server,
    tmp_path: Path,
) -> None:  # fmt: skip
    """``whole_shard_size``: one request per shard, then slices of a memory map, as local."""
    from streamload.config import load_config
    from streamload.formats.base import token_array
    from streamload.streams.interface import SampleStream

    corpus = make_corpus([700, 300, 900])
    url = upload(corpus.folder)
    config = remote_config(
        corpus, url, s3.storage_options(), tmp_path / "cache", whole_shard_size=1 << 20
    )
    with build_loader(config, batch_size=4, num_workers=2) as loader:
        remote = list(loader)
        stats = loader.stats()["storage"]["web"]
    assert_batches_equal(batches(corpus.config(seq_len=16)), remote, "whole shards vs local")
    assert stats["fetched_blocks"] == 3  # one piece per shard
    info = SampleStream.from_config(load_config(config)).sources[0].catalog.shards[0]
    local = SampleStream.from_config(load_config(corpus.config(seq_len=16)))
    tokens = token_array(info)
    assert is_mapped(tokens)
    assert np.array_equal(tokens, token_array(local.sources[0].catalog.shards[0]))


@pytest.mark.filterwarnings("ignore:each pass")
def test_file_urls_are_local_files(make_corpus: Callable[..., Corpus]) -> None:
    """``file://`` folders, globs and lists are memory-mapped as local paths: same batches,
    and a state saved with one spelling resumes with the other."""
    corpus = make_corpus([700, 500, 600])
    local = corpus.config(seq_len=16)
    want = batches(local)
    spellings = [f"file://{corpus.folder}", f"file://{corpus.folder}/*.npy",
                 [f"file://{p}" for p in corpus.paths]]  # fmt: skip
    for path in spellings:
        config = corpus.config(seq_len=16, source={"path": path})
        with build_loader(config, batch_size=4) as loader:
            it = iter(loader)
            got = [next(it) for _ in range(3)]
            state = loader.state_dict()
            assert not loader.stream.sources[0].shards.remote
        with build_loader(local, batch_size=4) as resumed:
            resumed.load_state_dict(state)
            got += list(resumed)
        assert_batches_equal(want, got, f"file:// {path}")


@pytest.mark.filterwarnings("ignore:each pass")
def test_skip_names_the_shard_that_failed(
    make_corpus: Callable[..., Corpus], upload: Callable[[Path], str], s3: S3Server,
    tmp_path: Path,
) -> None:  # fmt: skip
    """A window straddling a readable shard and a deleted one names the deleted one."""
    corpus = make_corpus([500, 400, 600], fmt="raw")
    url = upload(corpus.folder)
    config = remote_config(corpus, url, s3.storage_options(), tmp_path / "c",
                           source={"format": "raw", "on_error": "skip"})  # fmt: skip
    with build_loader(config, batch_size=4) as loader:
        bucket, key = url.removeprefix("s3://").split("/", 1)
        s3.client().delete_object(Bucket=bucket, Key=f"{key}/shard_00001.bin")
        list(loader)
        stats = loader.stats()["storage"]["web"]
    assert stats["skipped_samples"] > 0
    assert [name.rsplit("/", 1)[-1] for name in stats["skipped"]] == ["shard_00001.bin"]


@pytest.mark.filterwarnings("ignore:each pass")
def test_an_unopenable_shard_costs_its_retries_once_per_chunk(
    make_corpus: Callable[..., Corpus], upload: Callable[[Path], str], s3: S3Server,
    tmp_path: Path,
) -> None:  # fmt: skip
    """Under ``on_error = "skip"`` a shard that cannot be opened (its whole-file download
    answers 503) skips its rows without running the retries again for each row."""
    corpus = make_corpus([600, 600, 600], fmt="raw")
    url = upload(corpus.folder)
    plan = FaultPlan(fail_paths=("shard_00001.bin",), fail_status=503)
    with FaultProxy(s3.endpoint, plan) as proxy:
        options = s3.storage_options(
            proxy.endpoint, config_kwargs={"retries": {"total_max_attempts": 1}}
        )
        config = remote_config(corpus, url, options, tmp_path / "c",
                               source={"format": "raw", "on_error": "skip"},
                               sampling={"cross_shard": False}, whole_shard_size=1 << 20,
                               retries=3, backoff=0.01)  # fmt: skip
        with build_loader(config, batch_size=4) as loader:
            got = list(loader)
            stats = loader.stats()["storage"]["web"]
    skipped = [b["labels"].eq(-100).all(dim=1) for b in got]
    assert stats["skipped_samples"] == int(sum(s.sum() for s in skipped)) > 10
    chunks = len(got)  # at most one chunk per batch
    assert stats["retries"] <= 3 * chunks < 3 * stats["skipped_samples"]


def test_start_up_reads_only_header_bytes(
    upload: Callable[[Path], str], s3: S3Server, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Sniffing and describing a shard fetch its header plus at most ``HEAD_READAHEAD`` bytes
    (fsspec's default read-ahead, 50 MiB for s3fs, fetched whole shards)."""
    import s3fs.core

    from streamload.catalog.sources import describe_sources
    from streamload.config import load_config
    from streamload.formats.base import HEAD_READAHEAD

    folder = tmp_path / "big"
    folder.mkdir()
    for i in range(2):
        np.save(folder / f"shard_{i}.npy", np.zeros(2_000_000, dtype=np.uint16))  # 4 MB
    url = upload(folder)
    fetched: list[int] = []
    real = s3fs.core.S3File._fetch_range

    def counted(self: Any, start: int, end: int) -> bytes:
        fetched.append(end - start)
        return real(self, start, end)

    monkeypatch.setattr(s3fs.core.S3File, "_fetch_range", counted)
    source = {"name": "w", "path": url, "storage_options": s3.storage_options()}
    describe_sources(load_config({"seq_len": 16, "sources": [source]}))
    assert 0 < sum(fetched) <= 2 * 2 * (HEAD_READAHEAD + 1024)  # sniff + header, per shard


@pytest.mark.filterwarnings("ignore:each pass")
@pytest.mark.parametrize("path", ["{url}/", "{url}/*.bin"])
def test_http_folders_and_globs_list_through_transient_errors(
    make_corpus: Callable[..., Corpus], tmp_path: Path, path: str
) -> None:
    """An HTTP index page lists a folder (sizes asked per file: the page has none); listing
    and metadata calls answered 503 at first are retried like reads."""
    corpus = make_corpus([600, 500, 700], fmt="raw")
    with RangeFileServer(corpus.folder, flaky=2) as server:
        config = remote_config(corpus, path.format(url=server.url), {}, tmp_path / "c",
                               source={"format": "raw"})  # fmt: skip
        assert_batches_equal(batches(corpus.config(seq_len=16)), batches(config), path)
        assert server.flaky == [0]  # both 503s were answered, and retried


def test_a_missing_path_is_named_at_once(tmp_path: Path, s3: S3Server) -> None:
    config = {"seq_len": 16, "storage": {"cache_dir": str(tmp_path), **FAST},
              "sources": [{"name": "w", "path": "s3://nobucket-here/data/",
                           "storage_options": s3.storage_options()}]}  # fmt: skip
    with pytest.raises(
        ConfigError, match=r"source 'w': path 's3://nobucket-here/data/': no such file or folder"
    ):
        build_loader(config, batch_size=4)


@pytest.mark.filterwarnings("ignore:each pass")
def test_skip_covers_an_unreadable_document_index(
    upload: Callable[[Path], str], s3: S3Server, tmp_path: Path,
    make_corpus: Callable[..., Corpus],
) -> None:  # fmt: skip
    """With packing masks, a shard whose .idx is deleted after start-up is skipped like
    unreadable tokens: its samples come with every label -100, counted; the rest as local."""
    tokens = document_tokens(3000, eos_token_id=0, vocab_size=1000, mean_doc_len=20.0, seed=4)
    folder = tmp_path / "m"
    _write_format(folder, "megatron", tokens.astype(np.uint16), 0)
    url = upload(folder)
    base = make_corpus([10]).config(seq_len=16, packing={"masks": True},
                                    sampling={"cross_shard": False})  # fmt: skip
    local = {**base, "sources": [{"name": "w", "path": str(folder), "format": "megatron"}]}
    remote = {**local, "storage": {"cache_dir": str(tmp_path / "c"), **FAST},
              "sources": [{"name": "w", "path": url, "format": "megatron", "on_error": "skip",
                           "storage_options": s3.storage_options()}]}  # fmt: skip
    want = batches(local)
    with build_loader(remote, batch_size=4) as loader:
        bucket, prefix = url.removeprefix("s3://").split("/", 1)
        s3.client().delete_object(Bucket=bucket, Key=f"{prefix}/shard_1.idx")
        got = list(loader)
        stats = loader.stats()["storage"]["w"]
    assert len(got) == len(want)
    skipped = 0
    for a, b in zip(want, got, strict=True):
        for row in range(a["labels"].shape[0]):
            if bool((b["labels"][row] == -100).all()) and not (a["labels"][row] == -100).all():
                skipped += 1
            else:
                for key in ("input_ids", "labels", "doc_ids", "position_ids"):
                    assert torch.equal(a[key][row], b[key][row]), key
    assert skipped == stats["skipped_samples"] > 0
    assert [name.rsplit("/", 1)[-1] for name in stats["skipped"]] == ["shard_1.bin"]


@pytest.mark.filterwarnings("ignore:each pass")
def test_closing_a_loader_frees_its_memory_cache(
    make_corpus: Callable[..., Corpus], upload: Callable[[Path], str], s3: S3Server,
    tmp_path: Path,
) -> None:  # fmt: skip
    from streamload.remote.store import RemoteStore

    corpus = make_corpus([600, 500])
    config = remote_config(corpus, upload(corpus.folder), s3.storage_options(), tmp_path / "c")
    loader = build_loader(config, batch_size=4)
    first = list(loader)
    (store,) = [s for s in RemoteStore.all_stores() if s.config.cache_dir == str(tmp_path / "c")]
    assert store._memory_bytes > 0
    loader.close()
    assert store._memory_bytes == 0 and loader.stats()["storage"]["web"]["requests"] > 0
    with build_loader(corpus.config(seq_len=16), batch_size=4) as local:
        assert_batches_equal(list(local), first, "first pass")
        assert_batches_equal(list(local), list(loader), "second pass, after close")


@pytest.mark.filterwarnings("ignore:each pass")
@pytest.mark.parametrize("workers", [0, pytest.param(2, marks=pytest.mark.slow)])
def test_packed_mode_reads_remotely(
    make_corpus: Callable[..., Corpus], upload: Callable[[Path], str], s3: S3Server,
    tmp_path: Path, workers: int,
) -> None:  # fmt: skip
    """Whole-document samples (item reads in width classes, prefetched as they are read)
    from S3 equal the local ones, with masks."""
    corpus = make_corpus([700, 300, 900])
    packed = {"sampling": {"mode": "packed"}, "pad_token_id": 1, "packing": {"masks": True}}
    local_config = {**corpus.config(seq_len=16), **packed}
    config = {**remote_config(corpus, upload(corpus.folder), s3.storage_options(),
                              tmp_path / "c"), **packed}  # fmt: skip
    options = LoaderOptions(worker_type="process") if workers else None
    local = batches(local_config, num_workers=workers, options=options)
    assert_batches_equal(local, batches(config, num_workers=workers, options=options), "packed")


@pytest.mark.filterwarnings("ignore:each pass")
@pytest.mark.parametrize(("mode", "whole"), [("concat", 0), ("packed", 0), ("concat", 1 << 20)])
def test_s3_loss_masks_equal_local(
    upload: Callable[[Path], str], s3: S3Server, tmp_path: Path, mode: str, whole: int
) -> None:
    """OLMo-core masks beside S3 token files are found in the listing and read by range
    (or whole) in the version listed: the batches equal the local ones, masks applied."""
    from tests.streams.test_loss_masks import _olmo_source, write_olmo

    write_olmo(tmp_path / "sft", [600, 450])
    local_source = _olmo_source(tmp_path / "sft")
    base = {"seq_len": 16, "seed": 1, "eos_token_id": 0, "pad_token_id": 1,
            "sampling": {"mode": mode}}  # fmt: skip
    local = batches({**base, "sources": [local_source]}, num_workers=2)
    bare = batches({**base, "sources": [{**local_source, "label_masks": "none"}]})
    remote_source = {**local_source, "path": upload(tmp_path / "sft"),
                     "storage_options": s3.storage_options()}  # fmt: skip
    storage = {"cache_dir": str(tmp_path / "cache"), **FAST, "whole_shard_size": whole}
    remote = batches({**base, "sources": [remote_source], "storage": storage}, num_workers=2)
    assert_batches_equal(local, remote, "s3 vs local, with loss masks")
    assert any(not torch.equal(a["labels"], b["labels"]) for a, b in zip(local, bare, strict=True))
