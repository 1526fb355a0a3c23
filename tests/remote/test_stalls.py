"""Stores that accept the connection and never answer (or answer the headers and never the
body), and stores that always fail: every remote call (listing, metadata, header and token
reads) ends within the request budget (``storage.timeout`` per attempt, ``storage.retries``
further attempts and their backoffs; docs/remote.md "Faults") with an error naming the URL,
or is skipped where ``on_error = "skip"`` defines skipping; a process that met a stalled read
exits at once; and the client libraries' own retries do not multiply ours.

The stalls come from :class:`tests.servers.stall.StallingProxy` in front of moto's S3 server
and of a static HTTP server, on loopback. Limits are liveness bounds (the budget plus a
generous slack for start-up and a loaded machine; before the fix these calls hung for minutes),
never speed assertions.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import textwrap
import threading
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from streamload import LoaderOptions, build_loader
from streamload.errors import RemoteReadError, RemoteStallError
from tests.helpers.corpus_factory import Corpus
from tests.servers.s3 import S3Server
from tests.servers.stall import StallingProxy, StallPlan

pytest.importorskip("moto.server")
pytest.importorskip("s3fs")

pytestmark = [pytest.mark.slow, pytest.mark.filterwarnings("ignore:each pass")]

STALL = {"timeout": 2.0, "retries": 1, "backoff": 0.01, "stall_warning": 0.0,
         "stall_timeout": 300.0}  # fmt: skip
"""Two attempts of two seconds: the watchdog (300 s) is not what ends a stalled call. One
second was too short for a healthy read through the proxy under the suite's load: a
clean-clone run skipped the healthy shard too."""
BUDGET = 2 * 2.0 + 0.01
"""The request budget of ``STALL``: attempts x timeout + backoffs."""
SLACK = 20.0
"""Start-up, process workers and a loaded 2-core machine (the bug: over 240 s)."""
NO_BOTO_RETRIES = {"retries": {"total_max_attempts": 1}}


def within(limit: float, action: Callable[[], Any]) -> Any:
    """``action()``'s result (or its exception), failing the test if it runs past ``limit``
    seconds (it is left running in a daemon thread: the store hangs)."""
    result: list[Any] = []

    def run() -> None:
        try:
            result.append(("ok", action()))
        except BaseException as exc:  # handed to the test's thread
            result.append(("error", exc))

    thread = threading.Thread(target=run, daemon=True, name="test-within")
    thread.start()
    thread.join(limit)
    if not result:
        pytest.fail(f"still waiting after {limit:.0f} s (request budget {BUDGET} s)")
    kind, value = result[0]
    if kind == "error":
        raise value
    return value


def s3_config(corpus: Corpus, url: str, options: dict[str, Any], cache: Path, **kw: Any) -> dict:
    """The corpus read from ``url`` with the ``STALL`` budget (``source`` keys to the source,
    the rest to ``[storage]``)."""
    source = {"path": url, "storage_options": options, **kw.pop("source", {})}
    storage = {"cache_dir": str(cache), **STALL, **kw}
    return corpus.config(seq_len=16, source=source, storage=storage)


def upload(s3: S3Server, corpus: Corpus) -> str:
    return s3.upload_folder(corpus.folder, "corpora", uuid.uuid4().hex[:12])


@pytest.mark.parametrize(("mode", "on_error"), [("request", "raise"), ("body", "skip")])
def test_a_stalled_s3_listing_fails_within_the_budget(
    make_corpus: Callable[..., Corpus], s3: S3Server, tmp_path: Path, mode: str, on_error: str
) -> None:
    """Start-up listing calls (no ``Range``) stall: the loader fails naming the path, under
    either ``on_error`` (a listing is never skipped: it decides what the source is)."""
    corpus = make_corpus([600, 500])
    url = upload(s3, corpus)
    plan = StallPlan(ranged=False, mode=mode)
    with StallingProxy(s3.endpoint, plan) as proxy:
        options = s3.storage_options(proxy.endpoint)
        config = s3_config(corpus, url, options, tmp_path / "c", source={"on_error": on_error})
        began = time.monotonic()
        with pytest.raises(RemoteStallError, match=re.escape(url.removeprefix("s3://"))):
            within(BUDGET + SLACK, lambda: build_loader(config, batch_size=4))
        assert time.monotonic() - began < BUDGET + SLACK
    assert plan.stalled


@pytest.mark.parametrize("on_error", ["raise", "skip"])
def test_a_stalled_header_read_fails_or_skips_the_shard(
    make_corpus: Callable[..., Corpus], s3: S3Server, tmp_path: Path, on_error: str
) -> None:
    """The start-up header read of one NPY shard answers its headers, never its body."""
    corpus = make_corpus([600, 500, 700])
    url = upload(s3, corpus)
    plan = StallPlan(paths=("shard_00001.npy",), ranged=True, mode="body")
    with StallingProxy(s3.endpoint, plan) as proxy:
        options = s3.storage_options(proxy.endpoint)
        config = s3_config(corpus, url, options, tmp_path / "c", source={"on_error": on_error})
        if on_error == "raise":
            with pytest.raises(RemoteReadError, match=rf"{url}/shard_00001\.npy"):
                within(BUDGET + SLACK, lambda: build_loader(config, batch_size=4))
        else:
            with pytest.warns(UserWarning, match=r"skipping .*shard_00001\.npy"):
                loader = within(BUDGET + SLACK, lambda: build_loader(config, batch_size=4))
            assert loader.stats()["storage"]["web"]["skipped_shards"] == 1
            loader.close()
    assert plan.stalled


@pytest.mark.parametrize(
    ("client", "on_error", "workers"),
    [("fsspec", "raise", 0), ("fsspec", "skip", 2), ("http", "skip", 0), ("http", "raise", 2)],
)
def test_stalled_token_reads_end_within_the_budget(
    make_corpus: Callable[..., Corpus], s3: S3Server, tmp_path: Path,
    client: str, on_error: str, workers: int,
) -> None:  # fmt: skip
    """Range reads of one raw shard never answer (fsspec's client) or stall their body (the
    HTTP client): ``raise`` fails naming the shard, ``skip`` delivers every batch with that
    shard's samples skipped; with 0 and 2 process workers."""
    corpus = make_corpus([600, 500], fmt="raw")
    url = upload(s3, corpus)
    mode = "request" if client == "fsspec" else "body"
    plan = StallPlan(paths=("shard_00001.bin",), ranged=True, mode=mode)
    with StallingProxy(s3.endpoint, plan) as proxy:
        options = s3.storage_options(proxy.endpoint)
        source = {"format": "raw", "on_error": on_error}
        config = s3_config(corpus, url, options, tmp_path / "c", source=source, client=client)
        loader_options = LoaderOptions(worker_type="process", chunk_batches=64)
        loader = build_loader(config, batch_size=4, num_workers=workers, options=loader_options)
        with loader:
            if on_error == "raise":
                with pytest.raises(RemoteReadError, match=rf"{url}/shard_00001\.bin"):
                    within(BUDGET + SLACK, lambda: list(loader))
            else:
                got = within(BUDGET + SLACK, lambda: list(loader))
                skipped = sum(int(b["labels"].eq(-100).all(dim=1).sum()) for b in got)
                assert skipped > 0
                assert list(loader.stats()["storage"]["web"]["skipped"]) == [
                    f"{url}/shard_00001.bin"
                ]
    assert plan.stalled


_CHILD = textwrap.dedent(
    """
    import json, sys, time
    from streamload import build_loader

    try:
        with build_loader(json.loads(sys.argv[1]), batch_size=4) as loader:
            print("batches", sum(1 for _ in loader), flush=True)
    except Exception as exc:
        print("error", type(exc).__name__, exc, flush=True)
    print("done", time.monotonic(), flush=True)
    """
)


@pytest.mark.slow
@pytest.mark.parametrize("on_error", ["raise", "skip"])
def test_a_process_that_met_a_stalled_read_exits_at_once(
    make_corpus: Callable[..., Corpus], s3: S3Server, tmp_path: Path, on_error: str
) -> None:
    """A real Python process reads through fsspec from a store whose range reads never
    answer: it gets its error (or skips), and then exits within seconds, although the
    abandoned requests still hang (the store stays stalled until the process is gone)."""
    corpus = make_corpus([600, 500], fmt="raw")
    url = upload(s3, corpus)
    plan = StallPlan(paths=("shard_00001.bin",), ranged=True)
    with StallingProxy(s3.endpoint, plan) as proxy:
        options = s3.storage_options(proxy.endpoint)
        source = {"format": "raw", "on_error": on_error}
        config = s3_config(corpus, url, options, tmp_path / "c", source=source, client="fsspec")
        child = subprocess.Popen(
            [sys.executable, "-c", _CHILD, json.dumps(config)],
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        )  # fmt: skip
        try:
            out, _ = child.communicate(timeout=BUDGET + SLACK + 10)
        except subprocess.TimeoutExpired:
            child.kill()
            out, _ = child.communicate()
            pytest.fail(f"the process did not exit; its output:\n{out}")
        exited = time.monotonic()
    lines = out.splitlines()
    done = float(lines[-1].split()[1]) if lines and lines[-1].startswith("done") else exited
    want = "batches" if on_error == "skip" else rf"error Remote(Read|Stall)Error {url}/shard_00001"
    assert any(re.match(want, line) for line in lines), out
    assert exited - done < 5.0, f"exited {exited - done:.1f} s after its last line"
    assert plan.stalled


def test_a_failing_store_costs_our_attempts_only(
    make_corpus: Callable[..., Corpus], s3: S3Server, tmp_path: Path
) -> None:
    """Every request answered 503: a token read is ``retries + 1`` GETs (s3fs and botocore
    retry nothing inside an attempt), and start-up fails after ``retries + 1`` attempts of
    the listing, not ``retries + 1`` times the client libraries' own retries."""
    from streamload.config.storage import StorageConfig
    from streamload.remote.store import RemoteObject, StorageHandle

    retries = 2
    corpus = make_corpus([600], fmt="raw")
    url = upload(s3, corpus)
    # Every attempt is answered (503) at once; a generous timeout keeps a slow first call of
    # a loaded machine (s3fs/botocore session set-up) from timing out before any request.
    patient = {**STALL, "retries": retries, "timeout": 10.0}
    storage = StorageConfig(cache_dir=str(tmp_path / "c"), **patient)
    plan = StallPlan(mode="fail", ranged=True)
    with StallingProxy(s3.endpoint, plan) as proxy:
        handle = StorageHandle("s3", s3.storage_options(proxy.endpoint), storage)
        store = handle.store()
        obj = RemoteObject(f"{url}/shard_00000.bin", 1200, "")
        for client in (store.fetcher.http, None):
            store.fetcher.http = client
            plan.stalled.clear()
            with pytest.raises(RemoteReadError, match=rf"{url}/shard_00000\.bin"):
                within(BUDGET + SLACK, lambda: store.fetcher.fetch(obj, 0, 64))
            assert len(plan.stalled) == retries + 1, (client, plan.stalled)
    # The listing: count one attempt's requests with no retry, then with ``retries``.
    counts = []
    for attempts in (1, retries + 1):
        plan = StallPlan(mode="fail")
        with StallingProxy(s3.endpoint, plan) as proxy:
            config = s3_config(corpus, url, s3.storage_options(proxy.endpoint), tmp_path / "c",
                               retries=attempts - 1, timeout=10.0,
                               source={"format": "raw"})  # fmt: skip
            with pytest.raises(RemoteReadError, match=re.escape(url.removeprefix("s3://"))):
                within(BUDGET + SLACK, lambda c=config: build_loader(c, batch_size=4))
        counts.append(len(plan.stalled))
    assert counts[1] == (retries + 1) * counts[0] <= (retries + 1) * 4, counts
