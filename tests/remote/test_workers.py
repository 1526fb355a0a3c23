"""Storage counters of process workers reach ``loader.stats()["storage"]`` (docs/remote.md,
"Statistics"): the counters are the sum of the training process and its loader workers.

Each test runs the same job with 0 workers and with 2 process workers against moto's S3
server (through the fault proxy where faults are needed) and compares what is exactly
comparable: ``storage.prefetch_batches = 0`` makes the workers read every token window
themselves (not the training process's lookahead), and exact window reads fetch each window
once per pass whoever reads it, so requests and bytes of a cold cache are equal; skipped
samples and retries are equal to what the fault proxy did.
"""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import pytest

from streamload import LoaderOptions, build_loader
from tests.helpers.corpus_factory import Corpus
from tests.servers.http import FaultPlan, FaultProxy
from tests.servers.s3 import S3Server

pytest.importorskip("moto.server")
pytest.importorskip("s3fs")

pytestmark = [pytest.mark.slow, pytest.mark.filterwarnings("ignore:each pass")]

FAST = {"retries": 3, "backoff": 0.01, "timeout": 5.0, "stall_warning": 2.0, "stall_timeout": 20.0}
NO_BOTO_RETRIES = {"retries": {"total_max_attempts": 1}}
"""Every retry is ours (counted), none hidden inside botocore."""


def remote_config(
    corpus: Corpus, url: str, options: dict[str, Any], cache: Path, **source: Any
) -> dict[str, Any]:
    """The corpus read from ``url``, workers reading their own windows, a fresh cache."""
    return corpus.config(
        seq_len=16,
        source={"path": url, "storage_options": options, **source},
        sampling={"cross_shard": False},
        storage={"cache_dir": str(cache), "prefetch_batches": 0, **FAST},
    )


def run_passes(config: dict[str, Any], workers: int, passes: int = 1) -> list[dict[str, Any]]:
    """``stats()["storage"]["web"]`` after each full pass (a new ``iter()`` each, so new
    worker processes each)."""
    options = LoaderOptions(worker_type="process", chunk_batches=2)
    seen = []
    with build_loader(config, batch_size=4, num_workers=workers, options=options) as loader:
        for _ in range(passes):
            assert len(list(loader)) > 0
            seen.append(loader.stats()["storage"]["web"])
    return seen


def test_requests_and_bytes_of_workers_are_counted(
    make_corpus: Any, s3: S3Server, tmp_path: Path
) -> None:
    corpus = make_corpus([700, 300, 900, 450])
    url = s3.upload_folder(corpus.folder, "corpora", uuid.uuid4().hex[:12])
    counts = {}
    for workers in (0, 2):
        config = remote_config(corpus, url, s3.storage_options(), tmp_path / f"c{workers}")
        (counts[workers],) = run_passes(config, workers)
    zero, two = counts[0], counts[2]
    assert zero["requests"] > 0 and zero["bytes"] > 0

    # Retries (a loaded loopback server may answer a 5xx or time out) add requests; the
    # requests that got their bytes, and the bytes, are the same with and without workers.
    def first(c: dict) -> tuple[int, int]:
        return c["requests"] - c["retries"], c["bytes"]

    assert first(two) == first(zero)
    assert two["fetched_blocks"] == zero["fetched_blocks"]


def test_skipped_samples_of_workers_are_counted_every_pass(
    make_corpus: Any, s3: S3Server, tmp_path: Path
) -> None:
    corpus = make_corpus([500, 400, 600], fmt="raw")
    url = s3.upload_folder(corpus.folder, "corpora", uuid.uuid4().hex[:12])
    plan = FaultPlan(fail_paths=("shard_00001.bin",))  # 403: not retried
    counts = {}
    with FaultProxy(s3.endpoint, plan) as proxy:
        options = s3.storage_options(proxy.endpoint, config_kwargs=NO_BOTO_RETRIES)
        for workers in (0, 2):
            config = remote_config(
                corpus, url, options, tmp_path / f"c{workers}", format="raw", on_error="skip"
            )
            counts[workers] = run_passes(config, workers, passes=2)
    per_pass = (400 - 1) // 16  # the windows of the unreadable shard, once per pass
    assert [s["skipped_samples"] for s in counts[0]] == [per_pass, 2 * per_pass]
    assert [s["skipped_samples"] for s in counts[2]] == [per_pass, 2 * per_pass]
    for seen in counts[2]:
        assert list(seen["skipped"]) == [f"{url}/shard_00001.bin"]
        assert seen["skipped"] == counts[0][0]["skipped"]  # the same reason


def test_retries_of_workers_are_counted(make_corpus: Any, s3: S3Server, tmp_path: Path) -> None:
    corpus = make_corpus([900, 800, 1000, 700])
    url = s3.upload_folder(corpus.folder, "corpora", uuid.uuid4().hex[:12])
    counts = {}
    for workers in (0, 2):
        # The first faults hit the start-up header reads (one after another, in the training
        # process, retried inside s3fs); the rest hit token reads, each retried once by us.
        plan = FaultPlan(error_rate=0.25, max_faults=12, seed=3)
        with FaultProxy(s3.endpoint, plan) as proxy:
            options = s3.storage_options(proxy.endpoint, config_kwargs=NO_BOTO_RETRIES)
            config = remote_config(corpus, url, options, tmp_path / f"c{workers}")
            config["storage"]["coalesce_gap"] = 0  # many requests: every fault is injected
            (counts[workers],) = run_passes(config, workers)
        assert plan.injected["errors"] == plan.max_faults
    zero, two = counts[0], counts[2]

    # A request slower than the timeout on a loaded machine is retried too: it adds to
    # requests, retries and timeouts, not to errors. The injected faults are the rest.
    def faults(c: dict) -> dict[str, int]:
        late = c["timeouts"]
        return {
            "retries": c["retries"] - late,
            "errors": c["errors"],
            "requests": c["requests"] - late,
            "bytes": c["bytes"],
        }

    assert zero["retries"] > 0 and faults(zero)["errors"] == faults(zero)["retries"]
    assert faults(two)["errors"] == faults(two)["retries"]
    assert faults(two)["bytes"] == faults(zero)["bytes"]
    # Which request a fault lands on depends on timing once workers read: a fault that hits
    # a worker's metadata request is retried inside s3fs, not by us, so it is not ours to
    # count (CI, full suite: 1 or 2 of 12 moved there). Uncounted worker retries would lose
    # every fault of a token read instead: most of them.
    assert -1 <= faults(zero)["errors"] - faults(two)["errors"] <= 3, (zero, two)
    assert faults(two)["errors"] * 2 >= faults(zero)["errors"]
