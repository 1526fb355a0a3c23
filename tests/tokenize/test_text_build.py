"""``ensure_cache`` in one process: the deal of files to ranks, claims held by another
process (simulated with a second ``flock`` on the claim file), error markers, staging left by
killed builds, and the polling of a remote cache (``memory://``, ranks as threads).

The multi-process promises (real ranks, kills) are in tests/catalog/test_text_ranks.py.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import threading
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from streamload.errors import FormatError
from streamload.tokenize.lock import try_exclusive
from streamload.tokenize.text_build import deal, ensure_cache
from streamload.tokenize.text_cache import TextCache, TextInput, TextSettings
from tests.catalog.test_text_source import TOKENIZER, write_corpus
from tests.helpers.text_hooks import has_waiter, wait_until


def least_loaded_deal(sizes: Sequence[int], world: int) -> list[int]:
    """The rule spelled out: largest first (ties: input order), each file to the least
    loaded rank (ties: the lower rank), an empty file weighing 1."""
    owner, loads = [0] * len(sizes), [0] * world
    for i in sorted(range(len(sizes)), key=lambda i: (-sizes[i], i)):
        rank = min(range(world), key=lambda r: (loads[r], r))
        owner[i] = rank
        loads[rank] += max(1, sizes[i])
    return owner


@settings(max_examples=300, deadline=None)
@given(st.lists(st.integers(0, 10**9), max_size=60), st.integers(1, 40))
def test_deal_gives_every_file_one_rank_with_balanced_loads(sizes: list[int], world: int) -> None:
    owner = deal(sizes, world)
    assert len(owner) == len(sizes) and all(0 <= r < world for r in owner)
    assert owner == deal(list(sizes), world) == least_loaded_deal(sizes, world)
    weights = [max(1, s) for s in sizes]
    loads = [
        sum(w for w, r in zip(weights, owner, strict=True) if r == rank) for rank in range(world)
    ]
    assert max(loads) - min(loads) <= max(weights, default=0)
    assert deal(sizes, 1) == [0] * len(sizes)


def test_deal_of_many_files_on_many_ranks_is_the_same_rule() -> None:
    sizes = [(i * 7919) % 100_003 for i in range(3000)]
    assert deal(sizes, 300) == least_loaded_deal(sizes, 300)
    assert sorted(set(deal(sizes * 3, 1000))) == list(range(1000))  # 9,000 files: every rank


def cache_of(root: Path, url: str = "") -> TextCache:
    return TextCache(url or str(root / "cache"), TextSettings(TOKENIZER, None, 0))


def inputs_of(paths: list[Path]) -> list[TextInput]:
    return [TextInput(str(p), p.name, p.stat().st_size, str(p.stat().st_mtime_ns)) for p in paths]


def run_in_thread(call: Callable[[], Any]) -> tuple[threading.Thread, dict[str, Any]]:
    result: dict[str, Any] = {}

    def target() -> None:
        try:
            result["value"] = call()
        except BaseException as exc:  # handed to the test thread
            result["error"] = exc

    thread = threading.Thread(target=target, daemon=True)
    thread.start()
    return thread, result


def joined(thread: threading.Thread, result: dict[str, Any]) -> dict[str, Any]:
    thread.join(60)  # a hang guard: a thread still waiting fails the test below
    assert not thread.is_alive(), "ensure_cache is still waiting"
    return result


def builds_counted(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    built: list[str] = []
    write = TextCache._write

    def counting(self: TextCache, item: TextInput, *args: Any) -> dict[str, Any]:
        built.append(item.relpath)
        return write(self, item, *args)

    monkeypatch.setattr(TextCache, "_write", counting)
    return built


def fail_while_held(cache: TextCache, item: TextInput, message: str) -> None:
    """What a holder that failed leaves: an error marker of a new build."""
    record = {"error": message, "built": f"{os.getpid()}-{threading.get_ident()}"}
    cache._put_bytes(cache.file_key(item) + ".error.json", json.dumps(record).encode())


def test_a_waiter_fails_with_the_message_of_the_build_it_waited_on(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cache = cache_of(tmp_path)
    inputs = inputs_of(write_corpus(tmp_path / "in", files=2))
    built = builds_counted(monkeypatch)
    claim = cache.path(f".locks/{cache.file_key(inputs[1])}")
    with try_exclusive(claim, blocking=False) as held:  # another process builds file 1
        assert held
        thread, result = run_in_thread(lambda: ensure_cache(cache, inputs))
        assert wait_until(lambda: has_waiter(claim)), "ensure_cache never waited on the claim"
        fail_while_held(cache, inputs[1], "part_1.jsonl: line 3 is not valid JSON")
    error = joined(thread, result)["error"]
    assert isinstance(error, FormatError)
    assert str(error) == "part_1.jsonl: line 3 is not valid JSON"
    assert built == ["part_0.jsonl"]  # the failed file was not read again


def test_an_earlier_runs_error_marker_is_rebuilt_and_removed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cache = cache_of(tmp_path)
    inputs = inputs_of(write_corpus(tmp_path / "in", files=2))
    fail_while_held(cache, inputs[1], "part_1.jsonl: a transient read error")
    built = builds_counted(monkeypatch)
    report = ensure_cache(cache, inputs)
    assert built == ["part_0.jsonl", "part_1.jsonl"] and report.built == 2
    assert cache.failure(inputs[1]) is None


def test_the_next_holder_removes_what_a_killed_build_staged(tmp_path: Path) -> None:
    cache = cache_of(tmp_path)
    inputs = inputs_of(write_corpus(tmp_path / "in", files=2))
    staging = Path(cache.path(".staging"))
    gone = subprocess.Popen(["true"])  # its pid: a process of this host that has ended
    gone.wait()
    host, key = socket.gethostname(), cache.file_key(inputs[0])
    killed = staging / f".{key}.{host}-{gone.pid}-abcd1234"
    kept = [
        f".{key}.{host}-{os.getpid()}-abcd1234",  # a live writer (flock may not lock)
        f".{key}.elsewhere-1-abcd1234",  # another host's: cannot be checked here
        f".{cache.file_key(inputs[1])[:-1]}x.{host}-1-abcd1234",  # another file's
    ]
    for folder in (killed, *(staging / name for name in kept)):
        folder.mkdir(parents=True)
        (folder / "x-00000.bin").write_bytes(b"\0" * 64)
    ensure_cache(cache, inputs)
    assert sorted(os.listdir(staging)) == sorted(kept)


def test_a_holder_that_died_leaves_its_file_to_the_waiter(tmp_path: Path) -> None:
    cache = cache_of(tmp_path)
    inputs = inputs_of(write_corpus(tmp_path / "in", files=2))
    claim = cache.path(f".locks/{cache.file_key(inputs[0])}")
    with try_exclusive(claim, blocking=False):
        thread, result = run_in_thread(lambda: ensure_cache(cache, inputs))
        assert wait_until(lambda: has_waiter(claim))
    report = joined(thread, result)["value"]  # the claim was dropped without a marker
    assert report.built == 2 and len(report.markers) == 2


def remote(tmp_path: Path, files: int) -> tuple[TextCache, list[TextInput]]:
    cache = cache_of(tmp_path, f"memory://{tmp_path.name}/cache")
    assert not cache.local
    return cache, inputs_of(write_corpus(tmp_path / "in", files=files))


def test_remote_ranks_wait_for_each_other_and_ignore_an_earlier_failure(tmp_path: Path) -> None:
    cache, inputs = remote(tmp_path, 4)
    owner = deal([i.size for i in inputs], 2)
    theirs = inputs[owner.index(0)]
    fail_while_held(cache, theirs, "a failure of an earlier run")  # rank 0 rebuilds it now
    thread, result = run_in_thread(lambda: ensure_cache(cache, inputs, rank=1, world=2, poll=0.01))
    ones = [item for item, rank in zip(inputs, owner, strict=True) if rank == 1]
    assert wait_until(lambda: all(map(cache.marker, ones)))  # rank 1 polls rank 0's files now
    mine = ensure_cache(cache, inputs, rank=0, world=2)
    theirs_report = joined(thread, result)["value"]
    assert mine.built + theirs_report.built == 4 and mine.built and theirs_report.built
    assert theirs_report.markers == mine.markers


def test_a_remote_rank_fails_with_the_owners_message(tmp_path: Path) -> None:
    cache, inputs = remote(tmp_path, 2)
    bad = inputs[deal([i.size for i in inputs], 2).index(0)]
    with open(bad.url, "a") as fh:
        fh.write("{not json\n")
    bad = inputs_of([Path(bad.url)])[0]
    inputs = [bad if i.url == bad.url else i for i in inputs]
    thread, result = run_in_thread(lambda: ensure_cache(cache, inputs, rank=1, world=2, poll=0.01))
    with pytest.raises(FormatError, match=r"line 21 is not valid JSON") as owner_error:
        ensure_cache(cache, inputs, rank=0, world=2)
    error = joined(thread, result)["error"]
    assert isinstance(error, FormatError) and str(error) == str(owner_error.value)


def test_a_build_stopped_before_its_marker_is_redone_byte_identical(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Stopped after its parts were moved into place but before the marker: the file is
    not done (no marker), and the next run writes the same bytes over those parts."""
    cache, clean = cache_of(tmp_path), cache_of(tmp_path, str(tmp_path / "clean"))
    inputs = inputs_of(write_corpus(tmp_path / "in", files=2))
    put = TextCache._put_bytes

    def stop_at_the_marker(self: TextCache, name: str, data: bytes) -> None:
        if name.endswith(".json") and "/" not in name:
            raise KeyboardInterrupt
        put(self, name, data)

    monkeypatch.setattr(TextCache, "_put_bytes", stop_at_the_marker)
    with pytest.raises(KeyboardInterrupt):
        ensure_cache(cache, inputs)
    key = cache.file_key(inputs[0])
    assert sorted(n for n in os.listdir(cache.folder) if n.startswith(key)) == [
        f"{key}-00000.bin",
        f"{key}-00000.idx",
    ]
    assert cache.marker(inputs[0]) is None
    monkeypatch.setattr(TextCache, "_put_bytes", put)
    assert ensure_cache(cache, inputs).built == 2
    ensure_cache(clean, inputs)
    for name in sorted(n for n in os.listdir(clean.folder) if n.endswith((".bin", ".idx"))):
        assert Path(cache.folder, name).read_bytes() == Path(clean.folder, name).read_bytes()
