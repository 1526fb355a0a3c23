"""Worker pools stop, and their threads end, before the interpreter shuts down.

Why: when a script returns, CPython ends the daemon threads still running by calling
``pthread_exit`` in each one the next time it takes the GIL. A loader's worker thread is
often inside C++ code with the GIL released at that moment (numpy's hash-based ``unique``, a
torch kernel); ``pthread_exit`` then unwinds through a ``noexcept`` C++ frame and the C++
runtime calls ``std::terminate``: ``terminate called without an active exception`` and
SIGABRT (exit code 134) after the script's last line — 2 to 11 runs in 40 of a script that
takes a few batches from a loader with thread workers and returns (issue 36, item 6).

So every pool registers here when it starts its workers (:func:`stop_at_exit`), and every
worker thread too (its pool may be garbage-collected while the thread finishes its last
item). One ``atexit`` hook, which runs before the interpreter ends daemon threads, stops
every pool of this process that is still running (a thread worker finishes the item it is
computing and ends; a process worker is terminated) and then joins every worker thread,
for at most :data:`EXIT_SECONDS` in all. Threads stay daemons: a worker stuck beyond that
(a remote read that never answers) must not keep a finished job alive for ever.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import threading
import time
import weakref
from collections.abc import Iterable
from typing import Protocol

__all__ = ["EXIT_SECONDS", "StoppablePool", "stop_at_exit", "stop_pools_now"]

EXIT_SECONDS = 30.0
"""At most this long, in all, is spent at exit waiting for worker threads to finish their
current item."""


class StoppablePool(Protocol):
    """A pool the exit hook can stop."""

    def stop_without_draining(self) -> None:
        """Stop every worker now: no further item starts; results are not awaited."""


# Weak: registering must not keep a pool or a finished thread alive. Keyed by the pid
# that registered it: a process forked from this one (a ``fork`` worker, a user's
# ``os.fork``) inherits these sets, and must never stop, let alone terminate, the pools of
# its parent.
_pools: weakref.WeakKeyDictionary[StoppablePool, int] = weakref.WeakKeyDictionary()
_threads: weakref.WeakKeyDictionary[threading.Thread, int] = weakref.WeakKeyDictionary()


def stop_at_exit(pool: StoppablePool, threads: Iterable[threading.Thread] = ()) -> None:
    """Stop ``pool`` and join ``threads`` (its worker threads) when the interpreter exits,
    unless they are gone by then."""
    pid = os.getpid()
    _pools[pool] = pid
    for thread in threads:
        _threads[thread] = pid


def stop_pools_now(timeout: float = EXIT_SECONDS) -> None:
    """Stop every registered pool of this process and join its worker threads (at most
    ``timeout`` seconds in all). Runs at exit; callable earlier (tests)."""
    pid = os.getpid()
    for pool, owner in list(_pools.items()):
        if owner == pid:
            with contextlib.suppress(Exception):  # a half-built pool must not stop the rest
                pool.stop_without_draining()
    deadline = time.monotonic() + timeout
    for thread, owner in list(_threads.items()):
        if owner == pid and thread is not threading.current_thread():
            thread.join(timeout=max(0.0, deadline - time.monotonic()))


# Hooks run last-registered first, so this one runs before multiprocessing's (registered
# when it was imported, before this module): process workers are already stopped when it
# joins its children and queue threads.
atexit.register(stop_pools_now)
