"""The build lock of the Megatron index cache: a lock nobody will release never makes a job
wait its ``WAIT_SECONDS``; a live builder's lock is waited on, with a log line saying so."""

from __future__ import annotations

import logging
import os
import socket
import threading
import time
from pathlib import Path

import numpy as np
import pytest

from streamload.util import index_cache
from streamload.util.index_cache import cache_key, load_or_build

ARRAYS = {"x": np.arange(7, dtype=np.int32)}


def _lock(folder: Path, description: dict[str, int]) -> Path:
    return folder / f"{cache_key(description)}-streamload-megatron.lock"


def _never() -> dict[str, np.ndarray]:
    raise AssertionError("built although a live builder holds the lock")


@pytest.fixture
def short_wait(monkeypatch: pytest.MonkeyPatch) -> float:
    """Without the fix the waiter builds after WAIT_SECONDS: keep that short but well above
    the bound the tests assert, so the failure is clear and quick."""
    monkeypatch.setattr(index_cache, "WAIT_SECONDS", 30.0)
    return 30.0


@pytest.mark.slow
def test_an_empty_lock_is_taken_over_within_seconds(
    short_wait: float, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A builder killed between creating its lock and writing its owner leaves an empty
    lock: a real one, made just now, is taken over once the short grace period is over."""
    description = {"case": "empty"}
    lock = _lock(tmp_path, description)
    lock.touch()
    started = time.monotonic()
    with caplog.at_level(logging.INFO, logger="streamload.megatron"):
        got, _ = load_or_build(str(tmp_path), description, lambda: ARRAYS)
    waited = time.monotonic() - started
    assert waited < 10.0 < short_wait, f"waited {waited:.1f} s on a lock nobody holds"
    assert waited >= index_cache.LOCK_GRACE_SECONDS  # a just-made lock may be live
    np.testing.assert_array_equal(got["x"], ARRAYS["x"])
    assert not lock.exists()
    assert any(str(lock) in r.getMessage() for r in caplog.records)  # said why it waited


@pytest.mark.parametrize("content", ["", "garbage", "\x00\x00\x00", "host-only", "h 12 x", "h -3"])
def test_an_unreadable_old_lock_is_taken_over_at_once(
    content: str, short_wait: float, tmp_path: Path
) -> None:
    description = {"case": content}
    lock = _lock(tmp_path, description)
    lock.write_text(content)
    past = time.time() - 60
    os.utime(lock, (past, past))
    started = time.monotonic()
    got, _ = load_or_build(str(tmp_path), description, lambda: ARRAYS)
    assert time.monotonic() - started < 2.0
    np.testing.assert_array_equal(got["x"], ARRAYS["x"])
    assert not lock.exists()


def test_a_just_created_empty_lock_is_a_live_builder(tmp_path: Path) -> None:
    """Within the grace period an empty lock may be a builder that has not written its name
    yet: the waiter takes that builder's files instead of building."""
    description = {"case": "live"}
    lock = _lock(tmp_path, description)
    lock.touch()

    def builder() -> None:
        time.sleep(0.3)
        index_cache._Entry(tmp_path, cache_key(description), index_cache.MEGATRON).save(
            description, ARRAYS
        )
        lock.unlink()

    thread = threading.Thread(target=builder)
    thread.start()
    got, files = load_or_build(str(tmp_path), description, _never)
    thread.join()
    np.testing.assert_array_equal(got["x"], ARRAYS["x"])
    assert files is not None


def test_waiting_on_a_live_builder_is_logged(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    description = {"case": "logged"}
    lock = _lock(tmp_path, description)
    lock.write_text(f"{socket.gethostname()} {os.getpid()}")  # alive: this very process

    def builder() -> None:
        time.sleep(0.3)
        index_cache._Entry(tmp_path, cache_key(description), index_cache.MEGATRON).save(
            description, ARRAYS
        )

    thread = threading.Thread(target=builder)
    thread.start()
    with caplog.at_level(logging.INFO, logger="streamload.megatron"):
        load_or_build(str(tmp_path), description, _never)
    thread.join()
    messages = [r.getMessage() for r in caplog.records if r.name == "streamload.megatron"]
    assert any(str(lock) in m and f"pid {os.getpid()}" in m for m in messages), messages
