"""Worker processes that die with their parent: a killed ``streamload tokenize`` or trainer
leaves no orphans burning CPU or writing into a destination.

A worker would otherwise finish its work after its parent was killed (a tokenize group can
take hours). Two mechanisms:

* Everywhere (:func:`watch_parent`): a daemon thread waits on the parent's sentinel (readable
  once the parent is gone) and polls ``os.getppid()`` (the worker is reparented when its
  parent dies; this also covers forked siblings that keep a copy of the sentinel's other end
  open), then ends the process with ``os._exit`` within :data:`POLL_SECONDS`.
* Linux, with :func:`exit_with_parent` (``streamload tokenize``'s pool):
  ``prctl(PR_SET_PDEATHSIG, SIGKILL)``: the kernel kills the worker the moment its parent
  exits, even by ``kill -9``; checked against a parent that died before it was armed. Not for
  the loader's workers: the signal fires when the parent *thread* that started the worker
  ends, and a loader may be iterated first from a thread that ends before training does.
"""

from __future__ import annotations

import ctypes
import multiprocessing
import os
import signal
import sys
import threading
from multiprocessing.connection import wait

__all__ = ["ORPHAN_EXIT_CODE", "POLL_SECONDS", "exit_with_parent", "watch_parent"]

POLL_SECONDS = 0.25
"""How often the watcher thread checks the parent pid."""
ORPHAN_EXIT_CODE = 75
"""Exit status of a worker that ended because its parent died (``EX_TEMPFAIL``)."""

_PR_SET_PDEATHSIG = 1  # <linux/prctl.h>


def exit_with_parent(parent_pid: int) -> None:
    """Arm this process to exit when ``parent_pid``, its parent, exits (call it first thing
    in a worker).

    Args:
        parent_pid: The pid of the process that started this one.
    """
    if sys.platform.startswith("linux"):
        try:
            libc = ctypes.CDLL(None, use_errno=True)
            libc.prctl(_PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0)
        except (OSError, AttributeError):  # pragma: no cover - a libc without prctl
            pass
    if os.getppid() != parent_pid:  # the parent died before the signal was armed
        os._exit(ORPHAN_EXIT_CODE)
    watch_parent(parent_pid)


def watch_parent(parent_pid: int) -> None:
    """Start a daemon thread that ends this process when ``parent_pid``, its parent, exits
    (within :data:`POLL_SECONDS`).

    Args:
        parent_pid: The pid of the process that started this one.
    """
    threading.Thread(
        target=_watch, args=(parent_pid,), name="streamload-parent-watch", daemon=True
    ).start()


def _watch(parent_pid: int) -> None:
    parent = multiprocessing.parent_process()
    sentinels = [parent.sentinel] if parent is not None else []
    while True:
        if sentinels:
            if wait(sentinels, timeout=POLL_SECONDS):
                os._exit(ORPHAN_EXIT_CODE)
        else:  # pragma: no cover - not started by multiprocessing
            threading.Event().wait(POLL_SECONDS)
        if os.getppid() != parent_pid:
            os._exit(ORPHAN_EXIT_CODE)
