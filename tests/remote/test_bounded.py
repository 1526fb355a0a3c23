"""Bounded calls (:mod:`streamload.remote.bounded`), the one retry loop
(:mod:`streamload.remote.retry`) and the hold on stalled objects
(:mod:`streamload.remote.stalls`), with real threads and calls that really hang."""

from __future__ import annotations

import random
import threading
import time

import pytest

from streamload.config.storage import StorageConfig
from streamload.errors import ConfigError, RemoteReadError, RemoteStallError
from streamload.remote.bounded import CallTimedOut, DaemonPool, call_within
from streamload.remote.retry import call_with_retries, request_budget, retrying
from streamload.remote.stalls import StalledObjects
from streamload.remote.stats import RemoteStats


@pytest.fixture
def release() -> threading.Event:
    """Set at the end of the test: calls that 'hang' wait on it."""
    event = threading.Event()
    yield event
    event.set()


def test_an_abandoned_call_gives_its_place_to_the_next(release: threading.Event) -> None:
    pool = DaemonPool(1, "test-pool")
    with pytest.raises(CallTimedOut):
        call_within(pool, 0.05, release.wait)
    assert call_within(pool, 5.0, lambda: 42) == 42  # not queued behind the hung call
    hung = [t for t in threading.enumerate() if t.name.startswith("test-pool")]
    assert hung and all(t.daemon for t in hung)  # never joined at exit


def test_a_call_that_never_started_never_runs(release: threading.Event) -> None:
    pool = DaemonPool(1, "test-queue")
    ran: list[int] = []
    pool.submit(release.wait)  # occupies the only thread (nobody abandons it)
    with pytest.raises(CallTimedOut):
        call_within(pool, 0.05, ran.append, 1)
    release.set()
    assert call_within(pool, 5.0, lambda: 7) == 7
    assert ran == []


def test_errors_and_own_timeouts_reach_the_caller() -> None:
    pool = DaemonPool(2, "test-errors")

    def timed_out() -> None:
        raise TimeoutError("the client's own")

    with pytest.raises(TimeoutError, match="the client's own") as caught:
        call_within(pool, 5.0, timed_out)
    assert not isinstance(caught.value, CallTimedOut)
    with pytest.raises(KeyError):
        call_within(pool, 5.0, {}.__getitem__, "x")


def test_many_calls_from_many_threads_all_answer() -> None:
    """Seeded: 400 calls from 8 threads on a pool of 3, some abandoned while running."""
    pool = DaemonPool(3, "test-many")
    rng = random.Random(0)
    delays = [rng.choice([0.0, 0.0, 0.0, 0.02]) for _ in range(400)]
    results: dict[int, object] = {}

    def work(i: int) -> int:
        time.sleep(delays[i])
        return i * i

    def client(part: range) -> None:
        for i in part:
            try:
                results[i] = call_within(pool, 0.01 if delays[i] else 5.0, work, i)
            except CallTimedOut:
                results[i] = "abandoned"

    threads = [threading.Thread(target=client, args=(range(k, 400, 8),)) for k in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert all(results[i] == i * i for i in range(400) if not delays[i])
    assert len(results) == 400
    pool.shutdown()
    with pytest.raises(RuntimeError):
        pool.submit(int)


def test_one_budget_end_to_end(release: threading.Event) -> None:
    config = StorageConfig(timeout=0.05, retries=2, backoff=0.01)
    stats = RemoteStats()
    pool = DaemonPool(2, "test-budget")
    began = time.monotonic()
    with pytest.raises(RemoteStallError, match=r"^obj: bytes \[0, 4\) still failing after 3"):
        call_with_retries(config, "obj", "bytes [0, 4)", release.wait, pool=pool, stats=stats)
    assert time.monotonic() - began < request_budget(config) + 5.0
    counts = stats.snapshot()
    assert (counts["requests"], counts["retries"], counts["timeouts"]) == (3, 2, 3)
    assert request_budget(config) == pytest.approx(3 * 0.05 + 0.01 + 0.02)


def test_mixed_failures_are_a_read_error_and_missing_paths_a_config_error() -> None:
    answers = iter([TimeoutError("read timed out"), ConnectionResetError("reset")])

    def flaky() -> None:
        raise next(answers)

    config = StorageConfig(timeout=1.0, retries=1, backoff=0.0)
    with pytest.raises(RemoteReadError, match="ConnectionResetError: reset") as caught:
        call_with_retries(config, "u", "", flaky, pool=DaemonPool(1, "test-mixed"))
    assert not isinstance(caught.value, RemoteStallError)

    def missing() -> None:
        raise FileNotFoundError("s3://b/p")

    with pytest.raises(ConfigError, match="listing s3://b/p: FileNotFoundError"):
        retrying(config, "listing s3://b/p", missing)


def test_a_stalled_object_fails_at_once_while_held() -> None:
    config = StorageConfig(timeout=0.3, retries=0, backoff=0.0, stall_timeout=2.0)
    stalls = StalledObjects(config)
    error = RemoteStallError("s3://b/x: bytes [0, 4) still failing after 1 attempts")
    stalls.check("s3://b/x", "bytes [0, 4)")  # never stalled: nothing
    stalls.stalled("s3://b/x", error)
    with pytest.raises(RemoteStallError, match=r"^s3://b/x: metadata: not requested"):
        stalls.check("s3://b/x", "metadata")
    stalls.check("s3://b/y", "metadata")  # other objects are asked
    assert stalls._held["s3://b/x"][1] == pytest.approx(0.3)  # the request budget
    time.sleep(0.31)
    stalls.check("s3://b/x", "bytes [0, 4)")  # the hold ended: ask again
    stalls.stalled("s3://b/x", error)  # ... still nothing: held twice as long
    assert stalls._held["s3://b/x"][1] == pytest.approx(0.6)
    stalls.answered("s3://b/x")
    stalls.check("s3://b/x", "bytes [0, 4)")
