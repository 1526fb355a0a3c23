"""``stats()["storage"][source]["skipped_samples"]`` counts delivered samples, once each.

Issue 22: with workers the count was 42-97 for 21 samples delivered skipped, because readers
counted where they read: chunks in flight when a loop stopped, the undelivered rest of a
chunk, and chunks read again after ``iter()`` all added to it. Now a skipped sample is counted
once, when the loader delivers the batch it is in (``streamload.nodes._worker_stats``).

The job: a remote raw corpus whose middle shard (most of the windows) is deleted after
start-up, read under ``on_error = "skip"`` in chunks of 4 batches; the loop stops mid-chunk,
goes on with a new ``iter()`` to the end of the pass, then reads part of the next pass.
"""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest
import torch

from streamload import LoaderOptions, StreamLoader, build_loader
from tests.helpers.corpus import Corpus, write_shards
from tests.servers.s3 import S3Server

pytest.importorskip("moto.server")
pytest.importorskip("s3fs")

pytestmark = [pytest.mark.slow, pytest.mark.filterwarnings("ignore:each pass")]

FAST = {"retries": 2, "backoff": 0.01, "timeout": 5.0, "stall_warning": 2.0, "stall_timeout": 20.0}
STOPS = (6, None, 5)
"""Batches taken by each ``iter()`` (``None``: to the end of the pass)."""
SHARD_1 = (200, 1400)
"""Stream offsets of the deleted shard's tokens (token = its offset in this corpus)."""


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> Corpus:
    return write_shards(tmp_path_factory.mktemp("skip"), [200, 1200, 200], kind="positions",
                        fmt="raw")  # fmt: skip


def job(loader: StreamLoader) -> list[dict[str, torch.Tensor]]:
    """The batches of the job: 6, then a new ``iter()`` to the end of the pass, then 5."""
    got = []
    for stop in STOPS:
        for step, batch in enumerate(loader, 1):
            got.append(batch)
            if step == stop:
                break
    return got


@pytest.mark.parametrize(("workers", "kind"), [(0, "thread"), (2, "thread"), (2, "process")])
def test_each_delivered_skipped_sample_is_counted_once(
    corpus: Corpus, s3: S3Server, tmp_path: Path, workers: int, kind: str
) -> None:
    sampling = {"cross_shard": False}
    options = LoaderOptions(worker_type=kind, chunk_batches=4, prefetch=2)
    with build_loader(corpus.config(16, sampling=sampling), batch_size=4) as loader:
        local = job(loader)
    url = s3.upload_folder(corpus.folder, "corpora", uuid.uuid4().hex[:12])
    config = corpus.config(16, sampling=sampling, storage={"cache_dir": str(tmp_path), **FAST})
    config["sources"][0].update(path=url, storage_options=s3.storage_options(), on_error="skip")
    with build_loader(config, batch_size=4, num_workers=workers, options=options) as loader:
        bucket, prefix = url.removeprefix("s3://").split("/", 1)
        s3.client().delete_object(Bucket=bucket, Key=f"{prefix}/shard_00001.bin")
        remote = job(loader)
        reported = loader.stats()["storage"]["web"]["skipped_samples"]
    assert loader.stats()["storage"]["web"]["skipped_samples"] == reported, "after close too"
    windows = (200 - 1) // 16 + (1200 - 1) // 16 + (200 - 1) // 16  # 12 + 74 + 12
    assert len(remote) == len(local) == windows // 4 + 5  # one pass, 5 batches of the next
    expected = 0
    for step, (want, got) in enumerate(zip(local, remote, strict=True)):
        starts = want["input_ids"][:, 0]
        in_shard_1 = (starts >= SHARD_1[0]) & (starts < SHARD_1[1])
        lost = (got["labels"] == -100).all(dim=-1)
        assert torch.equal(lost, in_shard_1), f"batch {step}: the deleted shard's rows"
        assert torch.equal(got["input_ids"][~lost], want["input_ids"][~lost])
        expected += int(lost.sum())
    assert expected > 74, "a pass and more: shard 1's windows and then some"
    assert reported == expected
