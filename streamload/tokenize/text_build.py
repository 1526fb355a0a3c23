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
  waits on the locks of the files still being built; a lock whose holder died is free again
  and its file is built by the waiter.
* **Remote cache** (``s3://…``: no locks): a rank clears its files' error markers of
  earlier runs, builds its own files, then lists the folder (one listing a round, rounds
  1 s growing to 10 s apart) until the others' markers are there, failing with the
  builder's message when one left an error marker.

With ``processes > 1`` files are tokenized in spawned worker processes (each given
``cores / processes`` tokenizer threads), the locks held by the calling process.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import hashlib
import logging
import multiprocessing
import os
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from streamload.errors import FormatError
from streamload.tokenize.lock import try_exclusive
from streamload.tokenize.text_cache import TextCache, TextInput
from streamload.util.lifeline import exit_with_parent

__all__ = ["BuildReport", "deal", "ensure_cache"]

_LOG = logging.getLogger("streamload.text")

POLL_MAX = 10.0
"""Seconds between two looks of a rank waiting on other ranks' files, at most."""

WAIT_NOTICE = 60.0
"""Seconds between the log lines of a process waiting on other processes' files."""


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
    (ties: the lower rank; equal sizes keep input order)."""
    owner = [0] * len(sizes)
    loads = [0] * world
    for i in sorted(range(len(sizes)), key=lambda i: (-sizes[i], i)):
        rank = min(range(world), key=lambda r: (loads[r], r))
        owner[i] = rank
        loads[rank] += max(1, sizes[i])
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
    """
    start = time.monotonic()
    report = BuildReport()
    digest = manifest_digest(cache, inputs)
    found = cache.read_manifest(digest)
    if found is not None and len(found) == len(inputs):
        report.markers = found
        return report
    markers: list[dict[str, Any] | None] = [cache.marker(i) for i in inputs]
    missing = [i for i, m in enumerate(markers) if m is None]
    if missing:
        start_bar = getattr(progress, "start", None)
        if start_bar is not None:
            start_bar(len(missing))
        owner = deal([i.size for i in inputs], world)
        mine = [i for i in missing if owner[i] == rank]
        if not cache.local:  # an earlier run's failure must not fail the ranks waiting now
            for i in mine:
                cache.clear_error(inputs[i])
        others = [i for i in reversed(missing) if owner[i] != rank]
        builder = _Builder(cache, inputs, markers, processes, progress)
        with builder:
            builder.run(mine + others if cache.local else mine)
        report.built = builder.built
        if not cache.local:
            _poll(cache, inputs, markers, others, poll)
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
        """Start building file ``i`` unless it is done; ``False``: another process holds it."""
        if self.markers[i] is not None:
            return True
        while len(self.running) >= self.limit:
            self._finish_one()
        lock = _file_lock(self.cache, self.inputs[i], blocking)
        if not lock.__enter__():
            return False
        try:
            self.markers[i] = self.cache.marker(self.inputs[i])  # built while we looked
            if self.markers[i] is not None:
                lock.__exit__(None, None, None)
                return True
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


def _poll(
    cache: TextCache,
    inputs: Sequence[TextInput],
    markers: list[dict[str, Any] | None],
    others: list[int],
    poll: float,
) -> None:
    """Wait until the files other ranks build have their markers (remote caches): one
    listing of the folder a round, each marker read once it is listed, the rounds further
    apart while the wait lasts (up to :data:`POLL_MAX` seconds)."""
    pending = [i for i in others if markers[i] is None]
    notice = time.monotonic() + WAIT_NOTICE
    while pending:
        names, still = cache.names(), []
        for i in pending:
            key = cache.file_key(inputs[i])
            if f"{key}.json" in names:
                markers[i] = cache.marker(inputs[i])
            elif f"{key}.error.json" in names and (message := cache.error(inputs[i])):
                raise FormatError(message)
            if markers[i] is None:
                still.append(i)
        pending = still
        if pending:
            if time.monotonic() > notice:
                _LOG.info(
                    "waiting for %d files other ranks tokenize into %s (first: %s)",
                    len(pending), cache.url, inputs[pending[0]].url,
                )  # fmt: skip
                notice = time.monotonic() + WAIT_NOTICE
            time.sleep(poll)
            poll = min(POLL_MAX, poll * 1.5)


def _init_worker(threads: int, parent_pid: int) -> None:
    exit_with_parent(parent_pid)  # a killed job leaves no orphan finishing its file
    os.environ["RAYON_NUM_THREADS"] = str(threads)  # read by the tokenizer's thread pool


def _build(cache: TextCache, item: TextInput) -> dict[str, Any]:
    return cache.build(item)
