"""Count a process's filesystem operations by kind and by area (corpus, cache, other).

Install :func:`install` in a fresh process **before** importing streamload, so that every
module that later calls ``os.stat`` (directly, through ``os.path.exists``/``isfile``/
``getsize``/``getmtime``, ``pathlib.Path.stat`` or fsspec's local file system) goes through
the wrappers. Counted:

* ``stat``, ``lstat``, ``fstat``, ``access``, ``scandir``, ``listdir``: wrappers around the
  ``os`` functions (``os.path.*`` look them up at call time, so they are counted here too);
  ``listed``: the entries a ``scandir`` returned (``os.DirEntry.stat()`` cannot be wrapped;
  on Linux it is one ``stat`` syscall per entry, so fsspec's ``ls(detail=True)`` costs one
  per listed entry; :class:`Syscalls` counts the kernel's calls to check); ``names``: what a
  ``listdir`` returned;
* ``open`` (``builtins.open``, ``io.open``, ``os.open``, ``io.open_code``), ``mmap``, ``glob``,
  ``rename``, ``remove``, ``mkdir``: the interpreter's audit events (``sys.addaudithook``);
  ``open_write`` is an open for writing, creating or appending.

Each operation is filed under an area by its path: ``data`` (below the corpus root),
``cache`` (below the cache root), ``other`` (anything else but Python's own modules, which the
import system opens and which are not counted). An operation on a file descriptor (``fstat``)
is filed under ``fd``.

Example::

    counter = install(data_root="/tmp/corpus", cache_root="/tmp/cache")
    import streamload  # noqa: E402
    counter.reset()
    ...  # the work to count
    print(counter.snapshot())  # {"data": {"stat": 10, "open": 5}, "cache": {...}, ...}
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
from collections.abc import Callable
from typing import Any

__all__ = ["METADATA_KINDS", "OpCounter", "Syscalls", "install", "metadata_ops"]

METADATA_KINDS = ("stat", "lstat", "access", "scandir", "listdir", "listed", "open", "glob")
"""Kinds that are a metadata request on a shared filesystem (Lustre/GPFS: one MDS round trip
each; object stores: a HEAD or LIST). ``listed`` counts the entries a ``scandir`` returned:
fsspec's ``ls(detail=True)`` stats each one through ``DirEntry.stat``, which no wrapper sees
(``strace`` shows one ``newfstatat`` per entry). Not counted: ``names`` (what ``listdir``
returned: directory blocks read, no stat), ``fstat``/``mmap`` (on an open file), the writes."""

_WRAPPED = ("stat", "lstat", "fstat", "access", "scandir", "listdir")
_AUDITED = {
    "open": "open",
    "mmap.__new__": "mmap",
    "glob.glob": "glob",
    "os.rename": "rename",
    "os.remove": "remove",
    "os.mkdir": "mkdir",
}
_WRITES = ("open_write", "rename", "mkdir")
_WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_APPEND
_CODE_SUFFIXES = (".py", ".pyc", ".so", ".pth")


class OpCounter:
    """Counts per (area, kind); thread-safe; off until :meth:`reset` is called."""

    def __init__(self, data_root: str, cache_root: str) -> None:
        self._roots = [
            ("data", os.path.abspath(data_root) + os.sep),
            ("cache", os.path.abspath(cache_root) + os.sep),
        ]
        self._counts: dict[tuple[str, str], int] = {}
        self._written: dict[str, int] = {}
        self._lock = threading.Lock()
        self.active = False

    def reset(self) -> None:
        """Forget the counts so far and start counting."""
        with self._lock:
            self._counts.clear()
            self._written.clear()
        self.active = True

    def area(self, path: Any) -> str | None:
        """``data``, ``cache``, ``other``, ``fd``, or ``None`` for Python's own modules."""
        if isinstance(path, int):
            return "fd"
        try:
            text = os.fsdecode(os.fspath(path))
        except TypeError:
            return "other"
        absolute = os.path.abspath(text)
        for name, root in self._roots:
            if absolute.startswith(root) or absolute + os.sep == root:
                return name
        return None if text.endswith(_CODE_SUFFIXES) else "other"

    def add(self, path: Any, kind: str, count: int = 1) -> None:
        """Count ``count`` operations of ``kind`` on ``path`` (when counting)."""
        if not self.active:
            return
        area = self.area(path)
        if area is None:
            return
        with self._lock:
            self._counts[area, kind] = self._counts.get((area, kind), 0) + count
            if area == "cache" and kind in _WRITES:
                key = f"{self._top_folder(path)}:{kind}"
                self._written[key] = self._written.get(key, 0) + 1

    def _top_folder(self, path: Any) -> str:
        relative = os.path.relpath(os.path.abspath(os.fsdecode(path)), self._roots[1][1])
        return relative.split(os.sep, 1)[0] if os.sep in relative else "."

    def written(self) -> dict[str, int]:
        """Writes per ``"<top folder of the cache>:<kind>"`` (``open_write``, ``rename``,
        ``mkdir``): a ``rename`` into ``catalog``, ``plans`` or ``megatron`` publishes a
        built cache entry (written under a temporary name, then renamed); an ``open_write``
        alone may be a lock file."""
        with self._lock:
            return dict(sorted(self._written.items()))

    def snapshot(self) -> dict[str, dict[str, int]]:
        """The counts so far as ``{area: {kind: count}}``."""
        with self._lock:
            items = sorted(self._counts.items())
        out: dict[str, dict[str, int]] = {}
        for (area, kind), count in items:
            out.setdefault(area, {})[kind] = count
        return out


def metadata_ops(snapshot: dict[str, dict[str, int]], areas: tuple[str, ...]) -> int:
    """The metadata operations (:data:`METADATA_KINDS`) of a snapshot in the given areas."""
    return sum(
        count
        for area in areas
        for kind, count in snapshot.get(area, {}).items()
        if kind in METADATA_KINDS
    )


def _wrap(counter: OpCounter, kind: str, func: Callable[..., Any]) -> Callable[..., Any]:
    def counted(path: Any = ".", *args: Any, **kwargs: Any) -> Any:
        counter.add(path, kind)
        return func(path, *args, **kwargs)

    counted.__wrapped__ = func  # type: ignore[attr-defined]
    return counted


class _CountedScandir:
    """A ``scandir`` iterator that counts its entries once, when closed or exhausted."""

    def __init__(self, counter: OpCounter, path: Any, entries: Any) -> None:
        self._counter, self._path, self._entries, self._seen = counter, path, entries, 0

    def __iter__(self) -> _CountedScandir:
        return self

    def __next__(self) -> os.DirEntry[Any]:
        try:
            entry = next(self._entries)
        except StopIteration:
            self.close()
            raise
        self._seen += 1
        return entry

    def __enter__(self) -> _CountedScandir:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Close the listing; count what it returned (once)."""
        self._entries.close()
        if self._seen:
            self._counter.add(self._path, "listed", self._seen)
            self._seen = 0


def _wrap_listing(counter: OpCounter, kind: str, func: Callable[..., Any]) -> Callable[..., Any]:
    def counted(path: Any = ".", *args: Any, **kwargs: Any) -> Any:
        counter.add(path, kind)
        result = func(path, *args, **kwargs)
        if kind == "listdir":  # names only: the kernel reads directory blocks, stats none
            counter.add(path, "names", len(result))
            return result
        return _CountedScandir(counter, path, result)

    counted.__wrapped__ = func  # type: ignore[attr-defined]
    return counted


def _audit_hook(counter: OpCounter) -> Callable[[str, tuple[Any, ...]], None]:
    def hook(event: str, args: tuple[Any, ...]) -> None:
        kind = _AUDITED.get(event)
        if kind is None or not counter.active:
            return
        if kind == "mmap":  # (fileno, length, access, offset): file-backed maps only
            if args and isinstance(args[0], int) and args[0] >= 0:
                counter.add(args[0], "mmap")
            return
        path = args[0] if args else None
        if path is None:
            return
        if kind == "open":
            mode, flags = (args[1], args[2]) if len(args) >= 3 else (None, 0)
            writing = (isinstance(mode, str) and any(c in mode for c in "wax+")) or bool(
                isinstance(flags, int) and flags & _WRITE_FLAGS
            )
            kind = "open_write" if writing else "open"
        elif kind == "rename" and len(args) > 1:
            path = args[1]  # where it lands: a rename into the cache is a cache write
        counter.add(path, kind)

    return hook


def install(data_root: str, cache_root: str) -> OpCounter:
    """Wrap the ``os`` functions and add the audit hook; return the (inactive) counter.

    Call it once per process, before importing the code to measure.
    """
    counter = OpCounter(data_root, cache_root)
    for name in _WRAPPED:
        wrap = _wrap_listing if name in ("scandir", "listdir") else _wrap
        setattr(os, name, wrap(counter, name, getattr(os, name)))
    sys.addaudithook(_audit_hook(counter))
    return counter


_SYSCALL = re.compile(r'^(?:\[pid +\d+\] |\d+ +)?(\w+)\((?:[^"]*?)"((?:[^"\\]|\\.)*)"')
_GETDENTS = re.compile(r"^(?:\[pid +\d+\] |\d+ +)?getdents64\(")


class Syscalls:
    """The kernel's view: ``strace`` attached to this process for a span, every syscall on a
    file name (``%file``: ``openat``, ``newfstatat``, ``statx``, ``access``, ``readlink``...)
    and every ``getdents64`` (a directory read), counted per (area, syscall) as
    :class:`OpCounter` files them; ``fd`` is a call on an open file (``fstat`` is
    ``newfstatat(fd, "")``). Slows every such call: time nothing while it runs.

    Example::

        with Syscalls(counter) as calls:
            ...  # the work
        calls.counts  # {"data": {"newfstatat": 2001, "openat": 4}, "dirents": {...}}
    """

    def __init__(self, counter: OpCounter) -> None:
        self._counter = counter
        self.counts: dict[str, dict[str, int]] = {}
        self._dir = tempfile.mkdtemp(prefix="strace-")
        self._proc: subprocess.Popen[str] | None = None

    def __enter__(self) -> Syscalls:
        if shutil.which("strace") is None:
            return self
        cmd = ["strace", "-f", "-o", os.path.join(self._dir, "trace"), "-e",
               "trace=%file,getdents64", "-p", str(os.getpid())]  # fmt: skip
        self._proc = subprocess.Popen(cmd, stderr=subprocess.PIPE, text=True)
        assert self._proc.stderr is not None
        self._proc.stderr.readline()  # "Process N attached": tracing from here on
        return self

    def __exit__(self, *exc: object) -> None:
        if self._proc is None:
            return
        self._proc.send_signal(signal.SIGINT)
        self._proc.wait()
        with open(os.path.join(self._dir, "trace"), encoding="utf-8", errors="replace") as fh:
            for line in fh:
                self._count(line)
        shutil.rmtree(self._dir, ignore_errors=True)

    def _count(self, line: str) -> None:
        area: str | None
        if _GETDENTS.match(line):
            area, name = "dirents", "getdents64"
        else:
            found = _SYSCALL.match(line)
            if found is None:
                return
            name, path = found.groups()
            area = "fd" if path == "" else self._counter.area(path)
            if area is None:
                return
        kinds = self.counts.setdefault(area, {})
        kinds[name] = kinds.get(name, 0) + 1
