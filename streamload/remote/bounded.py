"""Calls bounded in time, on threads the interpreter never waits for.

A request to a store that accepts the connection and never answers blocks its thread for as
long as the client library lets it (aiohttp's default is 300 s, and botocore and s3fs retry
inside that) or forever. So every remote call runs on a :class:`DaemonPool` thread and is
waited for at most ``storage.timeout`` seconds (:func:`call_within`). A call that does not
return in time is *abandoned*: its caller moves on (retries, fails or skips); if it had not
started it never will; if it is running, its thread stops counting against the pool's size
(a replacement serves the queue) and ends whenever the library gives up. Pool threads are
daemon threads, so a process whose work is done exits even while abandoned calls still hang.

Why not :class:`concurrent.futures.ThreadPoolExecutor`: its workers are joined at interpreter
exit (``threading._register_atexit``), so one abandoned request kept a finished job's process
alive for as long as the request hung (minutes, or for ever), and each hung worker kept its
slot, so a few stalls starved the pool. No maintained library offers a daemon thread pool
with abandonment; this one is a queue and a counter.
"""

from __future__ import annotations

import concurrent.futures
import os
import queue
import threading
from collections.abc import Callable
from typing import Any, TypeVar

__all__ = ["CallTimedOut", "DaemonPool", "call_within", "shared_pool"]

T = TypeVar("T")


class CallTimedOut(TimeoutError):
    """A bounded call gave no answer within its time (it was abandoned)."""


class _Work:
    __slots__ = ("abandoned", "args", "fn", "future", "kwargs")

    def __init__(
        self, fn: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> None:
        self.future: concurrent.futures.Future[Any] = concurrent.futures.Future()
        self.fn, self.args, self.kwargs = fn, args, kwargs
        self.abandoned = False


class DaemonPool:
    """A thread pool of daemon threads whose abandoned calls stop counting against its size.

    Args:
        max_workers: Threads running calls nobody abandoned, at most.
        name: Prefix of the threads' names.
    """

    def __init__(self, max_workers: int, name: str) -> None:
        if max_workers < 1:
            raise ValueError(f"max_workers = {max_workers} must be >= 1")
        self.max_workers = max_workers
        self.name = name
        self._queue: queue.SimpleQueue[_Work | None] = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._running: dict[concurrent.futures.Future[Any], _Work] = {}
        self._threads = 0  # alive
        self._waiting = 0  # blocked on the queue
        self._queued = 0  # put, not yet taken
        self._abandoned = 0  # threads still running an abandoned call
        self._spawned = 0
        self._closed = False

    def submit(
        self, fn: Callable[..., T], /, *args: Any, **kwargs: Any
    ) -> concurrent.futures.Future[T]:
        """Run ``fn(*args, **kwargs)`` on a pool thread; its future.

        Raises:
            RuntimeError: the pool was shut down.
        """
        work = _Work(fn, args, kwargs)
        with self._lock:
            if self._closed:
                raise RuntimeError(f"{self.name}: cannot submit after shutdown")
            self._queued += 1
            self._queue.put(work)
            self._grow()
        return work.future

    def abandon(self, future: concurrent.futures.Future[Any]) -> None:
        """The caller stopped waiting for ``future``: cancel it if it has not started, else
        stop counting its thread (a replacement takes queued work)."""
        if future.cancel():
            return
        with self._lock:
            work = self._running.get(future)
            if work is None or work.abandoned:
                return  # finished meanwhile
            work.abandoned = True
            self._abandoned += 1
            self._grow()

    def shutdown(self) -> None:
        """Cancel queued calls and let idle threads end (running calls finish in the
        background; nothing waits for them)."""
        with self._lock:
            self._closed = True
            threads = self._threads
        while True:
            try:
                work = self._queue.get_nowait()
            except queue.Empty:
                break
            if work is not None:
                work.future.cancel()
        for _ in range(threads):
            self._queue.put(None)

    def _grow(self) -> None:
        """Start a thread if queued work has none waiting for it and the pool has room
        (called with the lock held)."""
        counted = self._threads - self._abandoned
        if self._queued > self._waiting and counted < self.max_workers:
            self._threads += 1
            self._spawned += 1
            name = f"{self.name}_{self._spawned}"
            threading.Thread(target=self._serve, name=name, daemon=True).start()

    def _serve(self) -> None:
        while True:
            with self._lock:
                self._waiting += 1
            work = self._queue.get()
            with self._lock:
                self._waiting -= 1
                if work is None:
                    self._threads -= 1
                    return
                self._queued -= 1
                self._running[work.future] = work  # before it runs: abandon() must find it
            if work.future.set_running_or_notify_cancel():
                self._run(work)
            with self._lock:
                del self._running[work.future]
                if work.abandoned:
                    self._abandoned -= 1
                if self._closed or self._threads - self._abandoned > self.max_workers:
                    self._threads -= 1  # a replacement took this thread's place
                    return

    @staticmethod
    def _run(work: _Work) -> None:
        try:
            result = work.fn(*work.args, **work.kwargs)
        except BaseException as exc:  # handed to the caller through the future
            work.future.set_exception(exc)
        else:
            work.future.set_result(result)


def call_within(pool: DaemonPool, timeout: float, fn: Callable[..., T], /, *args: Any) -> T:
    """``fn(*args)`` run on ``pool``, waited for at most ``timeout`` seconds.

    Raises:
        CallTimedOut: no answer in time (the call is abandoned: see :class:`DaemonPool`).
        Exception: whatever ``fn`` raised.
    """
    future = pool.submit(fn, *args)
    try:
        return future.result(timeout=timeout)
    except concurrent.futures.TimeoutError:
        if not future.done():
            pool.abandon(future)
            raise CallTimedOut(f"no answer within {timeout} s") from None
    # Done after all: its result, or the TimeoutError fn raised itself (the caller's to judge).
    return future.result()


_SHARED: list[DaemonPool] = []
_SHARED_LOCK = threading.Lock()


def _forget_shared() -> None:
    # Threads do not survive a fork, and the lock may have been held by one of them.
    global _SHARED_LOCK
    _SHARED_LOCK = threading.Lock()
    _SHARED.clear()


os.register_at_fork(after_in_child=_forget_shared)


def shared_pool() -> DaemonPool:
    """This process's pool for start-up calls (listings, folder metadata); a forked child
    makes its own."""
    with _SHARED_LOCK:
        if not _SHARED:
            _SHARED.append(DaemonPool(32, "streamload-call"))
        return _SHARED[0]
