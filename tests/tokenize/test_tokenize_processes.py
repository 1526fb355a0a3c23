"""``streamload tokenize`` as a process: its workers die with it, and one run holds a
destination at a time (issue 22 items 11 and 12).

The runs are real ``python -m streamload tokenize`` subprocesses; children are found in
``/proc`` (every ``/proc/<pid>/stat`` whose parent field is the run), as psutil is not a
dependency.
"""

from __future__ import annotations

import fcntl
import json
import multiprocessing
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from streamload.cli.main import main
from streamload.tokenize.lock import DestinationLock
from tests.tokenize.test_tokenize import read_documents, sentences, tokenizer_path  # noqa: F401

pytestmark = pytest.mark.skipif(not os.path.isdir("/proc/self"), reason="needs Linux /proc")

FILES, REPEATS = 2, 80
"""Two groups of 80 x 1000 documents (8 MB each): a worker takes many seconds on one, far
longer than the bounds below, so an orphan finishing its group would be seen."""


def write_docs(folder: Path) -> None:
    folder.mkdir()
    lines = "".join(json.dumps({"id": "x", "text": t}) + "\n" for t in sentences(1000, 1))
    for f in range(FILES):
        (folder / f"f{f}.jsonl").write_bytes(lines.encode() * REPEATS)


def arguments(tok: str, docs: Path, dst: Path) -> list[str]:
    return ["tokenize", "--documents", str(docs / "*.jsonl"), "--destination", str(dst),
            "--tokenizer", tok, "--eos-token-id", "0", "--processes", "2",
            "--files-per-process", "1", "--batch-size", "1", "--ring-size", "1",
            "--no-progress"]  # fmt: skip


def _stat(pid: int) -> tuple[str, int] | None:
    """(state, parent pid) of a process, or ``None`` when it is gone."""
    try:
        with open(f"/proc/{pid}/stat", encoding="utf-8") as fh:
            text = fh.read()
    except OSError:
        return None
    fields = text[text.rindex(")") + 2 :].split()  # the name may hold spaces and parentheses
    return fields[0], int(fields[1])


def children(pid: int) -> list[int]:
    """Live child processes of ``pid`` (a scan of ``/proc/*/stat``)."""
    found = []
    for name in os.listdir("/proc"):
        stat = _stat(int(name)) if name.isdigit() else None
        if stat is not None and stat[1] == pid and stat[0] != "Z":
            found.append(int(name))
    return found


def alive(pid: int) -> bool:
    stat = _stat(pid)
    return stat is not None and stat[0] != "Z"  # a zombie has exited (its reaper is init)


def is_worker(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as fh:
            return b"spawn_main" in fh.read()
    except OSError:
        return False


def wait_for_work(proc: subprocess.Popen, staging: Path, count: int) -> list[int]:
    """The run's children once ``count`` of them are pool workers writing a group (each
    group's staging folder is made by its worker when it starts)."""
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and proc.poll() is None:
        kids = children(proc.pid)
        busy = staging.is_dir() and len(os.listdir(staging)) >= count
        if busy and sum(map(is_worker, kids)) >= count:
            return kids
        time.sleep(0.01)
    raise AssertionError(f"the run (exit {proc.poll()}) never had {count} busy workers")


def start(args: list[str]) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "streamload", *args],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )


def gone_within(pids: list[int], seconds: float) -> list[int]:
    """The processes of ``pids`` still alive after waiting up to ``seconds`` for them."""
    deadline = time.monotonic() + seconds
    while any(map(alive, pids)) and time.monotonic() < deadline:
        time.sleep(0.05)
    left = [p for p in pids if alive(p)]
    for pid in left:  # pragma: no cover - the failure being tested: do not leak them
        os.kill(pid, signal.SIGKILL)
    return left


@pytest.mark.slow
def test_kill_9_takes_the_workers_along_and_frees_the_destination(
    tokenizer_path: str,  # noqa: F811
    tmp_path: Path,
    capsys: pytest.CaptureFixture,
) -> None:
    docs, dst = tmp_path / "docs", tmp_path / "out"
    write_docs(docs)
    args = arguments(tokenizer_path, docs, dst)
    proc = start(args)
    try:
        kids = wait_for_work(proc, dst / ".streamload-tokenize" / "staging", 2)
        # item 12: while it runs, a second run into the destination is refused at once
        assert main(args) == 2
        err = capsys.readouterr().err
        assert f"{dst}: another streamload tokenize run (pid {proc.pid} on " in err
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    # item 11: each worker was in the middle of a group; none finishes it as an orphan
    assert gone_within(kids, 3) == [], "orphans of the killed run still running"
    # the kernel dropped the dead run's lock: the next run may take it
    DestinationLock(str(dst / ".streamload-tokenize"), str(dst), 0).acquire().release()


@pytest.mark.slow
def test_a_killed_worker_fails_the_run_at_once(
    tokenizer_path: str,  # noqa: F811
    tmp_path: Path,
) -> None:
    """The other direction: a worker killed mid-group (the OOM killer) used to leave the run
    waiting forever for its result, the pool starting replacements."""
    docs, dst = tmp_path / "docs", tmp_path / "out"
    write_docs(docs)
    proc = start(arguments(tokenizer_path, docs, dst))
    try:
        kids = wait_for_work(proc, dst / ".streamload-tokenize" / "staging", 2)
        victim = next(k for k in kids if is_worker(k))
        os.kill(victim, signal.SIGKILL)
        _, err = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 2, err
    assert f"a tokenize worker process died (pid {victim} killed by SIGKILL)" in err
    assert gone_within(kids, 3) == []
    assert not list((dst / ".streamload-tokenize" / "done").iterdir())


@pytest.mark.slow
def test_a_bad_line_in_one_group_stops_every_worker(
    tokenizer_path: str,  # noqa: F811
    tmp_path: Path,
    capsys: pytest.CaptureFixture,
) -> None:
    """An error in one worker's group fails the run naming the line and stops the other
    workers at once (they are not left to finish their groups)."""
    docs = tmp_path / "docs"
    docs.mkdir()
    lines = "".join(json.dumps({"id": "x", "text": t}) + "\n" for t in sentences(50, 2))
    (docs / "a.jsonl").write_text(lines + '{"id": "bad", "text": \n')
    (docs / "b.jsonl").write_text(lines * 2000)  # a long group
    children = set(multiprocessing.active_children())  # an earlier test's, not this run's
    before = time.monotonic()
    assert main(arguments(tokenizer_path, docs, tmp_path / "out")) == 2
    assert f"{docs / 'a.jsonl'}: line 51 is not valid JSON" in capsys.readouterr().err
    assert set(multiprocessing.active_children()) <= children
    assert time.monotonic() - before < 60  # generous: the long group is not waited for
    assert not list((tmp_path / "out").glob("part-*"))


def test_a_second_run_is_refused_while_the_lock_is_held(
    tokenizer_path: str,  # noqa: F811
    tmp_path: Path,
    capsys: pytest.CaptureFixture,
) -> None:
    """The lock is ``DEST/.streamload-tokenize/lock-{shard}`` under ``flock``: held here by
    the test, a run refuses the destination (naming the holder's pid) and touches nothing."""
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "a.jsonl").write_text('{"id": "1", "text": "the fox"}\n')
    dst = tmp_path / "out"
    base = ["tokenize", "--documents", str(tmp_path / "docs" / "a.jsonl"), "--destination",
            str(dst), "--tokenizer", tokenizer_path, "--eos-token-id", "0", "--no-progress",
            "--num-shards", "2", "--shard-index"]  # fmt: skip
    lock = dst / ".streamload-tokenize" / "lock-0"
    lock.parent.mkdir(parents=True)
    with open(lock, "w") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
        fh.write("4242\n")
        fh.flush()
        assert main([*base, "0"]) == 2
        err = capsys.readouterr().err
        assert f"{dst}: another streamload tokenize run (pid 4242) is writing" in err
        assert not list(dst.glob("part-*"))
        # another machine's shard takes another lock: it runs meanwhile
        assert main([*base, "1"]) == 0
    assert main([*base, "0"]) == 0  # released
    assert len(read_documents(dst, "dolma")) == 1


def test_machines_starting_together_claim_the_destination_one_at_a_time(
    tokenizer_path: str,  # noqa: F811
    tmp_path: Path,
) -> None:
    """``run.json`` is written or checked under ``run.lock``: a machine that starts while
    another writes its record checks that record (here a conflicting one) instead of
    writing its own over it."""
    import threading

    from streamload.errors import ConfigError
    from streamload.tokenize import TokenizeConfig, plan_run

    (tmp_path / "a.jsonl").write_text('{"id": "1", "text": "the fox"}\n')
    dst = tmp_path / "out"
    config = TokenizeConfig(documents=(str(tmp_path / "a.jsonl"),), destination=str(dst),
                            tokenizer=tokenizer_path, eos_token_id=0, shard_index=1,
                            num_shards=2)  # fmt: skip
    meta = dst / ".streamload-tokenize"
    meta.mkdir(parents=True)
    errors: list[BaseException] = []

    def plan() -> None:
        try:
            plan_run(config)
        except BaseException as exc:
            errors.append(exc)

    with open(meta / "run.lock", "w") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)  # the other machine, writing its record
        thread = threading.Thread(target=plan)
        thread.start()
        thread.join(0.3)
        (meta / "run.json").write_text(json.dumps({"dtype": "int32"}))
    thread.join(30)
    assert len(errors) == 1 and isinstance(errors[0], ConfigError), errors
    assert "holds a tokenize run whose config is" in str(errors[0])
    assert json.loads((meta / "run.json").read_text()) == {"dtype": "int32"}
