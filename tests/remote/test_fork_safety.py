"""A forked child starts its remote state afresh even when a parent thread held a lock at the
fork: the store registry's, and the one fsspec takes to create its IO loop (which fsspec's own
at-fork hook leaves as it was). Without that, a forked loader worker waited for ever for its
first fetch (a ``RemoteStallError`` after ``storage.stall_timeout``)."""

from __future__ import annotations

import os
import signal
import sys
import threading
from collections.abc import Callable

import fsspec.asyn
import pytest

from streamload.remote.store import RemoteStore

pytestmark = pytest.mark.skipif(
    sys.platform == "win32" or not hasattr(os, "fork"), reason="needs fork"
)


def child_status_forked_while_held(lock: threading.Lock, in_child: Callable[[], None]) -> int:
    """Fork while another thread holds ``lock``; the child's exit status after ``in_child``
    (killed by SIGALRM after 5 s if it hangs)."""
    held, release = threading.Event(), threading.Event()

    def hold() -> None:
        with lock:
            held.set()
            release.wait()

    thread = threading.Thread(target=hold, daemon=True)
    thread.start()
    held.wait()
    pid = os.fork()
    if pid == 0:  # pragma: no cover (the child)
        signal.alarm(5)
        code = 1
        try:
            in_child()
            code = 0
        finally:
            os._exit(code)
    release.set()
    thread.join()
    _, status = os.waitpid(pid, 0)
    return status


def test_child_of_a_fork_during_a_store_lookup_gets_the_registry() -> None:
    def lookup() -> None:
        with RemoteStore._registry_lock:
            assert not RemoteStore._registry

    assert child_status_forked_while_held(RemoteStore._registry_lock, lookup) == 0


def test_child_of_a_fork_during_fsspec_loop_creation_gets_a_loop() -> None:
    fsspec.asyn.get_loop()
    assert child_status_forked_while_held(fsspec.asyn.get_lock(), fsspec.asyn.get_loop) == 0
