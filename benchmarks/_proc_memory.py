"""Memory of process trees, read from ``/proc`` so that shared pages are not counted twice.

``/proc/PID/smaps_rollup`` gives a process's ``Pss`` (proportional set size: each resident
page divided by the number of processes that map it) and its private pages (``USS`` =
``Private_Clean + Private_Dirty``). Summing ``Pss`` over every process of a host adds up to
the memory really used, where summing ``Rss`` counts ``libtorch``'s pages, the page cache of
the memory-mapped shards and shared-memory slots once per process that maps them.
``/proc/PID/status`` ``VmHWM`` is the kernel's own peak ``Rss`` of a process (exact, not
sampled).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import psutil

__all__ = ["TreePeak", "read_rollup", "sample_tree"]

KIB = 1024
ROLLUP_KEYS = ("Rss", "Pss", "Pss_Shmem", "Private_Clean", "Private_Dirty")


def read_rollup(pid: int) -> dict[str, int]:
    """``Rss``, ``Pss``, ``Pss_Shmem``, ``USS`` and ``VmHWM`` of a process, in bytes (empty
    when it is gone or unreadable)."""
    out: dict[str, int] = {}
    try:
        rollup = Path(f"/proc/{pid}/smaps_rollup").read_text()
        status = Path(f"/proc/{pid}/status").read_text()
    except (FileNotFoundError, ProcessLookupError, PermissionError):
        return out
    for line in rollup.splitlines()[1:]:
        key, _, value = line.partition(":")
        if key in ROLLUP_KEYS:
            out[key] = int(value.split()[0]) * KIB
    for line in status.splitlines():
        if line.startswith("VmHWM:"):
            out["VmHWM"] = int(line.split()[1]) * KIB
    out["USS"] = out.pop("Private_Clean", 0) + out.pop("Private_Dirty", 0)
    return out


@dataclass
class TreePeak:
    """The peaks of one process tree (a rank and its worker processes), in bytes."""

    pss: int = 0
    """Largest sum of ``Pss`` over the tree at one sample."""
    uss: int = 0
    """Largest sum of ``USS`` over the tree at one sample."""
    shared: int = 0
    """At the ``Pss`` peak: the tree's ``Rss`` minus its ``USS``, counted in full (libraries,
    shard pages, shared-memory slots that other processes map too)."""
    shmem: int = 0
    """Largest sum of ``Pss_Shmem`` (shared-memory batch slots of process workers)."""
    main_hwm: int = 0
    """``VmHWM`` of the tree's root (the rank's own peak ``Rss``)."""
    processes: int = 0
    """Most processes seen in the tree at one sample."""
    pids: set[int] = field(default_factory=set)


def sample_tree(root: int, peak: TreePeak, skip: tuple[str, ...] = ("resource_tracker",)) -> None:
    """Read the tree under ``root`` once and raise its peaks (``skip``: helper processes
    named in their command line, e.g. multiprocessing's resource tracker)."""
    try:
        family = [psutil.Process(root), *psutil.Process(root).children(recursive=True)]
    except psutil.NoSuchProcess:
        return
    total = dict.fromkeys(("Rss", "Pss", "Pss_Shmem", "USS"), 0)
    seen = 0
    for proc in family:
        try:
            if proc.pid != root and any(s in " ".join(proc.cmdline()) for s in skip):
                continue
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
        values = read_rollup(proc.pid)
        if not values:
            continue
        seen += 1
        peak.pids.add(proc.pid)
        for key in total:
            total[key] += values.get(key, 0)
        if proc.pid == root:
            peak.main_hwm = max(peak.main_hwm, values.get("VmHWM", 0))
    if total["Pss"] > peak.pss:
        peak.pss, peak.shared = total["Pss"], total["Rss"] - total["USS"]
    peak.uss = max(peak.uss, total["USS"])
    peak.shmem = max(peak.shmem, total["Pss_Shmem"])
    peak.processes = max(peak.processes, seen)
