"""Worker processes that die with their parent: a killed ``streamload tokenize`` leaves no
orphans writing into its destination.

A spawned pool worker would otherwise finish its group after its parent was killed (a group
can take hours), burning CPU and writing files that a restarted run is rewriting. Two
mechanisms, both armed when a worker starts:

* Linux: ``prctl(PR_SET_PDEATHSIG, SIGKILL)``: the kernel kills the worker the moment its
  parent exits, even by ``kill -9``; checked against a parent that died before it was armed.
* Everywhere: a daemon thread waits on the parent's sentinel (readable once the parent is
  gone) and polls ``os.getppid()`` (the worker is reparented when its parent dies), then
  ends the process with ``os._exit`` within :data:`POLL_SECONDS`.
"""

from __future__ import annotations

import ctypes
import multiprocessing
import os
import signal
import sys
import threading
from multiprocessing.connection import wait

__all__ = ["ORPHAN_EXIT_CODE", "POLL_SECONDS", "exit_with_parent"]

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
