"""Fill a text cache: every input file tokenized by exactly one process, the others waiting.

:func:`ensure_cache` is called by every process that needs a text source (each rank of a
job, a CLI command, ``streamload prepare``). The input files are dealt to the ``world``
ranks by size (:func:`deal`: largest first, each to the least loaded rank; the same deal on
every rank, since it depends on the listing only), and each rank tokenizes its own files
first. Then:

* **Local cache** (a folder every process of a host, or every host of a shared file system,
  sees): each file is claimed with an exclusive ``flock`` on ``.locks/<file key>``
  while it is built, so a file is tokenized by one process even when processes start
  without a process group (all with ``world = 1``). A rank that finishes its own files
  takes the others' unclaimed files, from the end of the list (work stealing), and then
  waits on the locks of the files still being built (having finished its own builds first:
  a claim is never held while waiting on another, so two processes cannot wait on each
  other). A lock whose holder died is free again and its file is built by the waiter (who
  first removes the dead build's staging folder); a holder that failed on a bad row left an
  error marker, and the waiter fails with its message instead of reading the file again.
* **Remote cache** (``s3://…``: no locks): a rank clears its files' error markers of
  earlier runs, builds its own files, then lists the folder (one listing a round, rounds
  1 s growing to 10 s apart) until the others' markers are there, failing with the
  builder's message when one left an error marker (a new one: an earlier run's, there
  before, is being rebuilt).

With ``processes > 1`` files are tokenized in spawned worker processes (each given
``cores / processes`` tokenizer threads), the locks held by the calling process.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import hashlib
import heapq
import multiprocessing
import os
import shutil
import socket
import time
from collections.abc import Callable, Sequence
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass, field
from typing import Any

from streamload.errors import FormatError, WorkerDiedError
from streamload.tokenize import text_wait
from streamload.tokenize.lock import try_exclusive
from streamload.tokenize.text_cache import TextCache, TextInput
from streamload.util.lifeline import exit_with_parent

__all__ = ["BuildReport", "deal", "discard_staging", "ensure_cache"]


@dataclass
class BuildReport:
    """What :func:`ensure_cache` found and did, and every file's marker in input order."""

    markers: list[dict[str, Any]] = field(default_factory=list)
    built: int = 0
    seconds: float = 0.0

    def total(self, key: str) -> int:
        """A marker count summed over the files (``documents``, ``tokens``, ``bad``…)."""
        return sum(int(m.get(key, 0)) for m in self.markers)


ProgressFn = Callable[[int, int, int], None]
"""Called with (files, documents, tokens) done since the last call."""


def deal(sizes: Sequence[int], world: int) -> list[int]:
    """The rank that tokenizes each file: largest first, each to the least loaded rank
    (ties: the lower rank; equal sizes keep input order; an empty file weighs 1 byte).

    A heap of (load, rank) finds the least loaded rank, so 10^4 files on 1,000 ranks take
    milliseconds on every rank, not seconds.
    """
    owner = [0] * len(sizes)
    loads = [(0, rank) for rank in range(world)]  # sorted: already a heap
    for i in sorted(range(len(sizes)), key=lambda i: (-sizes[i], i)):
        load, rank = loads[0]
        owner[i] = rank
        heapq.heapreplace(loads, (load + max(1, sizes[i]), rank))
    return owner


def manifest_digest(cache: TextCache, inputs: Sequence[TextInput]) -> str:
    """The key of an input list's manifest (every file key, in order)."""
    keys = "\n".join(cache.file_key(i) for i in inputs)
    return hashlib.sha256(keys.encode()).hexdigest()[:32]


def ensure_cache(
    cache: TextCache,
    inputs: Sequence[TextInput],
    *,
    rank: int = 0,
    world: int = 1,
    processes: int = 1,
    progress: ProgressFn | None = None,
    poll: float = 1.0,
) -> BuildReport:
    """Make sure every input is in the cache (tokenizing this rank's share, and any file no
    other process is building); returns the markers in input order.

    Raises:
        FormatError: a bad row or an unreadable input (here or in the process that built it).
        WorkerDiedError: a worker process of the pool died (``processes > 1``).
    """
    start = time.monotonic()
    report = BuildReport()
    digest = manifest_digest(cache, inputs)
    found = cache.read_manifest(digest)
    if found is not None and len(found) == len(inputs) and text_wait.present(cache, found):
        report.markers = found
        return report
    markers = text_wait.markers_of(cache, inputs)
    missing = [i for i, m in enumerate(markers) if m is None]
    if missing:
        cache.dtype  # noqa: B018 - a dtype that cannot hold the ids fails before any work
        start_bar = getattr(progress, "start", None)
        if start_bar is not None:
            start_bar(len(missing))
        owner = deal([i.size for i in inputs], world)
        mine = [i for i in missing if owner[i] == rank]
        if not cache.local:  # an earlier run's failure must not fail the ranks waiting now
            for i in mine:
                cache.clear_error(inputs[i])
        others = [i for i in reversed(missing) if owner[i] != rank]
        # failures already recorded are an earlier run's: only a new one ends a wait
        seen = text_wait.failures(cache, inputs, others) if not cache.local else {}
        builder = _Builder(cache, inputs, markers, processes, progress)
        with builder:
            builder.run(mine + others if cache.local else mine)
        report.built = builder.built
        if not cache.local:
            text_wait.poll_markers(cache, inputs, markers, seen, poll)
    report.markers = [m for m in markers if m is not None]
    assert len(report.markers) == len(inputs)
    if missing or found is None:
        cache.write_manifest(digest, report.markers)
    report.seconds = time.monotonic() - start
    return report


class _Builder:
    """Builds files, each under its lock (local caches), inline or in worker processes."""

    def __init__(
        self,
        cache: TextCache,
        inputs: Sequence[TextInput],
        markers: list[dict[str, Any] | None],
        processes: int,
        progress: ProgressFn | None,
    ) -> None:
        self.cache, self.inputs, self.markers = cache, inputs, markers
        self.progress = progress
        self.built = 0
        self.pool: concurrent.futures.ProcessPoolExecutor | None = None
        if processes > 1:
            ctx = multiprocessing.get_context("spawn")
            threads = max(1, (os.cpu_count() or 1) // processes)
            self.pool = concurrent.futures.ProcessPoolExecutor(
                processes, ctx, initializer=_init_worker, initargs=(threads, os.getpid())
            )
        self.limit = max(1, processes)
        self.running: dict[concurrent.futures.Future[dict[str, Any]], tuple[int, Any]] = {}

    def __enter__(self) -> _Builder:
        return self

    def __exit__(self, *exc: Any) -> None:
        if self.pool is not None and self.running:  # failed: stop the builds still going
            _kill_workers(self.pool)  # before their claims go: another may take them now
        for _, lock in self.running.values():
            lock.__exit__(None, None, None)
        if self.pool is not None:
            self.pool.shutdown(wait=exc[0] is None, cancel_futures=True)

    def run(self, order: list[int]) -> None:
        """Build the files of ``order`` not done yet; wait on those others hold (local)."""
        held: list[int] = []
        for i in order:
            if not self._start(i, blocking=False):
                held.append(i)
        for i in held:  # being built elsewhere: wait for its lock, then build if still missing
            self._start(i, blocking=True)
        while self.running:
            self._finish_one()

    def _start(self, i: int, *, blocking: bool) -> bool:
        """Start building file ``i`` unless it is done; ``False``: another process holds it.

        Raises:
            FormatError: the build this process waited on failed (its error marker's).
        """
        if self.markers[i] is not None:
            return True
        # Before waiting on a claim, finish (and release) every build of ours: a process
        # waiting on B while holding A's claim, with A's holder waiting on B's, is a deadlock.
        while len(self.running) >= (1 if blocking else self.limit):
            self._finish_one()
        item = self.inputs[i]
        seen = self.cache.failure(item) if self.cache.local else None
        lock = _file_lock(self.cache, item, blocking)
        if not lock.__enter__():
            return False
        try:
            self.markers[i] = self.cache.marker(item)  # built while we looked
            if self.markers[i] is not None:
                lock.__exit__(None, None, None)
                return True
            failure = self.cache.failure(item) if self.cache.local else None
            if failure is not None and failure != seen:  # it failed while we waited
                raise FormatError(failure["error"])
            discard_staging(self.cache, item)  # what a killed build left
            self.running[self._submit(i)] = (i, lock)
        except BaseException:
            lock.__exit__(None, None, None)
            raise
        return True

    def _submit(self, i: int) -> concurrent.futures.Future[dict[str, Any]]:
        if self.pool is not None:
            return self.pool.submit(_build, self.cache, self.inputs[i])
        future: concurrent.futures.Future[dict[str, Any]] = concurrent.futures.Future()
        documents = self.progress and (lambda d, t: self.progress(0, d, t))  # type: ignore[misc]
        try:
            future.set_result(self.cache.build(self.inputs[i], documents or None))
        except Exception as exc:
            future.set_exception(exc)
        return future

    def _finish_one(self) -> None:
        done, _ = concurrent.futures.wait(
            self.running, return_when=concurrent.futures.FIRST_COMPLETED
        )
        for future in done:
            i, lock = self.running.pop(future)
            try:
                self.markers[i] = future.result()
            except BrokenProcessPool as exc:  # killed (the OOM killer, a user): not a traceback
                raise WorkerDiedError(
                    f"a tokenizing worker process died (killed, or out of memory) while "
                    f"{self.inputs[i].url} or another file was tokenized into "
                    f"{self.cache.url}; files left without a marker are tokenized again by "
                    "the next run"
                ) from exc
            finally:
                lock.__exit__(None, None, None)
            self.built += 1
            if self.progress is not None:
                marker = self.markers[i] or {}
                inline = self.pool is None  # inline builds already reported their documents
                docs = 0 if inline else int(marker.get("documents", 0))
                self.progress(1, docs, 0 if inline else int(marker.get("tokens", 0)))


def _file_lock(cache: TextCache, item: TextInput, blocking: bool) -> Any:
    """The claim on one file while it is built: a ``flock`` in a local cache; nothing to
    take in a remote one (each rank builds only its own files there)."""
    if not cache.local:
        return contextlib.nullcontext(True)
    path = cache.path(f".locks/{cache.file_key(item)}")
    return try_exclusive(path, blocking=blocking)


def discard_staging(cache: TextCache, item: TextInput) -> None:
    """Remove the staging folders killed builds of ``item`` on this host left in a local
    cache (:meth:`TextCache.build` names them ``.<file key>.<host>-<pid>-<random>``): called
    by the holder of the file's claim; a live writer's folder is kept even where ``flock``
    does not lock, and another host's is left alone."""
    if cache.local:
        prefix = f".{cache.file_key(item)}."
        with contextlib.suppress(OSError):
            for entry in os.scandir(cache.path(".staging")):
                if entry.name.startswith(prefix) and _abandoned(entry.name[len(prefix) :]):
                    shutil.rmtree(entry.path, ignore_errors=True)


def _abandoned(writer: str) -> bool:
    """Whether ``HOST-PID-XXXXXXXX`` names a process of this host that is gone (or a
    zombie: a killed pool worker whose new parent, a container's init, never reaps it)."""
    try:
        host, pid, _ = writer.rsplit("-", 2)
        if host != socket.gethostname() or int(pid) in (0, os.getpid()):
            return False
        os.kill(int(pid), 0)  # signal 0: only whether it exists
        with open(f"/proc/{int(pid)}/stat", encoding="utf-8") as fh:
            return fh.read().rpartition(")")[2].split()[0] == "Z"
    except ProcessLookupError:
        return True
    except (ValueError, OverflowError, OSError, IndexError):  # not such a name; EPERM; no /proc
        return False


def _kill_workers(pool: concurrent.futures.ProcessPoolExecutor) -> None:
    """End a pool's worker processes now (``ProcessPoolExecutor.terminate_workers`` of
    Python 3.14, which older versions lack) and wait until they are gone."""
    processes = list((getattr(pool, "_processes", None) or {}).values())
    for process in processes:
        with contextlib.suppress(OSError, ValueError):
            process.kill()
    for process in processes:
        with contextlib.suppress(OSError, ValueError, AssertionError):
            process.join()


def _init_worker(threads: int, parent_pid: int) -> None:
    exit_with_parent(parent_pid)  # a killed job leaves no orphan finishing its file
    os.environ["RAYON_NUM_THREADS"] = str(threads)  # read by the tokenizer's thread pool


def _build(cache: TextCache, item: TextInput) -> dict[str, Any]:
    return cache.build(item)
