"""Whole remote files in the disk cache, downloaded as concurrent byte ranges written in place.

A token file read whole (``storage.whole_shard_size``) and every companion file (Megatron
``.idx``, datatrove ``.ds.index``, dolma ``.csv.gz``) is downloaded once into the disk cache
and memory-mapped from there (:class:`WholeFiles`, one per store). The file is cut into ranges
of ``PART_BYTES``; each is fetched on the store's bounded pool (retries, timeouts and counting
as for any request) and written at its offset into a temporary file beside its final name,
which is renamed into place once every range has arrived. So memory holds at most one range
per request in flight, never the whole file; a reader sees the whole file or none; a crash
leaves only a temporary file (the cache's next scan removes it); and the file counts in
``storage.cache_size`` like any block.

One object is downloaded at most once at a time per process (readers and the planner's
prefetch join the download in flight); processes sharing the cache may each download it, and
the last rename wins (equal bytes). A file the cache cannot keep (full, read-only) is read by
range instead, and a companion is then copied into ``cache_dir/files/`` (for this process
only when the store gives it no version).
"""

from __future__ import annotations

import atexit
import concurrent.futures
import contextlib
import logging
import os
import threading
import uuid
from collections.abc import Callable
from functools import partial
from typing import Any

from streamload.config.storage import StorageConfig
from streamload.errors import FormatError
from streamload.remote.block_cache import DiskBlockCache
from streamload.remote.fetch import RangeFetcher
from streamload.remote.handle import RemoteObject
from streamload.remote.stats import RemoteStats
from streamload.remote.versions import object_version
from streamload.remote.watchdog import wait_watched
from streamload.util.files import write_atomic

__all__ = ["PART_BYTES", "WholeDownload", "WholeFiles"]

_LOG = logging.getLogger("streamload.remote")

PART_BYTES = 8 << 20
"""Bytes per range request of a whole-file download."""

Fetch = Callable[[RemoteObject, int, int], bytes]
"""Bytes ``[start, end)`` of an object, with the storage's retries (``RangeFetcher.fetch``)."""


class WholeDownload:
    """One download of all of ``obj`` into ``cache`` (start it once).

    Args:
        obj: The object as listed (its version keys the cached file).
        cache: The disk cache.
        fetch: Reads a byte range (raises once its retries are spent).
        on_done: Called with whether the file arrived, before the future completes.
        part: Bytes per range request.
    """

    def __init__(
        self,
        obj: RemoteObject,
        cache: DiskBlockCache,
        fetch: Fetch,
        on_done: Callable[[bool], None] | None = None,
        part: int = PART_BYTES,
    ) -> None:
        self.obj = obj
        self.key = obj.key(0, obj.size)
        self.future: concurrent.futures.Future[str] = concurrent.futures.Future()
        self._cache = cache
        self._fetch = fetch
        self._on_done = on_done
        self._spans = [(lo, min(lo + part, obj.size)) for lo in range(0, obj.size, part)]
        self._lock = threading.Lock()
        self._left = len(self._spans)
        self._error: BaseException | None = None
        self._fd = -1
        self._tmp = ""

    def start(self, submit: Callable[[Callable[[], None]], Any]) -> concurrent.futures.Future[str]:
        """Queue every range on ``submit`` (a pool's ``submit``); returns the future of the
        cached file's path (or of the error that stopped the download)."""
        try:
            self._tmp = self._cache.temp_path(self.key)
            self._fd = os.open(self._tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        except OSError as exc:
            self._error = exc
            self._finish()
            return self.future
        if not self._spans:
            self._finish()
        for lo, hi in self._spans:
            submit(partial(self._part, lo, hi))
        return self.future

    def _part(self, lo: int, hi: int) -> None:
        try:
            if self._error is None:  # after a failure the other ranges are not fetched
                _write_at(self._fd, self._fetch(self.obj, lo, hi), lo)
        except BaseException as exc:
            with self._lock:
                self._error = self._error or exc
        with self._lock:
            self._left -= 1
            last = self._left == 0
        if last:
            self._finish()

    def _finish(self) -> None:
        path = None
        if self._fd >= 0:
            with contextlib.suppress(OSError):
                os.close(self._fd)
        if self._error is None:
            try:
                path = self._cache.commit(self.key, self._tmp, self.obj.size)
            except OSError as exc:
                self._error = exc
        if self._error is not None and self._tmp:
            with contextlib.suppress(OSError):
                os.unlink(self._tmp)
        if self._on_done is not None:
            self._on_done(path is not None)
        if path is None:
            assert self._error is not None
            self.future.set_exception(self._error)
        else:
            self.future.set_result(path)


def _write_at(fd: int, data: bytes, offset: int) -> None:
    """Write all of ``data`` at ``offset`` of ``fd`` (``pwrite`` may write less at once)."""
    view = memoryview(data)
    while view.nbytes:
        written = os.pwrite(fd, view, offset)
        view, offset = view[written:], offset + written


class WholeFiles:
    """The whole files of one store: token files read whole, and companion files.

    Args:
        config: The storage's options.
        fetcher: Its range fetcher.
        stats: Its counters (a finished download counts as one ``fetched_blocks``).
        submit: Queues a job on the store's bounded pool.
        disk_for: The disk cache for an object, or ``None`` (no cache, or no version).
    """

    def __init__(
        self,
        config: StorageConfig,
        fetcher: RangeFetcher,
        stats: RemoteStats,
        submit: Callable[[Callable[[], None]], Any],
        disk_for: Callable[[RemoteObject], DiskBlockCache | None],
    ) -> None:
        self.config = config
        self._fetcher = fetcher
        self._stats = stats
        self._submit = submit
        self._disk_for = disk_for
        self._lock = threading.Lock()
        self._running: dict[str, concurrent.futures.Future[str]] = {}
        self._by_range: set[str] = set()  # URLs whose whole file the cache could not keep
        self._private: dict[tuple[str, int], str] = {}  # unversioned companions' files
        self.part = PART_BYTES
        """Bytes per range request of a download."""

    def reads_whole(self, obj: RemoteObject) -> bool:
        """Whether token file ``obj`` is read whole from the disk cache: at most
        ``whole_shard_size`` bytes and half of ``cache_size`` (so it stays cached while in
        use), versioned, and the cache could keep it so far."""
        cfg = self.config
        return (
            0 < obj.size <= min(cfg.whole_shard_size, cfg.cache_size // 2)
            and obj.url not in self._by_range
            and self._disk_for(obj) is not None
        )

    def download(self, obj: RemoteObject, *, touch: bool = False) -> concurrent.futures.Future[str]:
        """The future path of all of ``obj`` in the disk cache (which must exist): done at
        once when cached (``touch``: marked most recently used), else the download in flight
        in this process, else a new :class:`WholeDownload`."""
        disk = self._disk_for(obj)
        assert disk is not None
        key = obj.key(0, obj.size)
        with self._lock:
            running = self._running.get(key)
        if running is not None:
            return running
        path = disk.path(key)
        with contextlib.suppress(OSError):
            if os.path.getsize(path) == obj.size:
                if touch:
                    os.utime(path)
                done: concurrent.futures.Future[str] = concurrent.futures.Future()
                done.set_result(path)
                return done
        done_cb = partial(self._finished, key)
        job = WholeDownload(obj, disk, self._fetcher.fetch, done_cb, self.part)
        with self._lock:
            running = self._running.setdefault(key, job.future)
        if running is job.future:
            job.start(self._submit)
        return running

    def _finished(self, key: str, ok: bool) -> None:
        with self._lock:
            self._running.pop(key, None)
        if ok:
            self._stats.add("fetched_blocks")

    def _wait(self, obj: RemoteObject, future: concurrent.futures.Future[str]) -> str:
        return wait_watched(future, (obj.url, 0, obj.size), self.config, self._stats)

    def token_file(self, obj: RemoteObject) -> str | None:
        """The disk-cache file holding all of token file ``obj`` (downloaded now if needed),
        to be memory-mapped like a local shard; ``None`` when it is read by range instead
        (:meth:`reads_whole` says no, or the cache could not keep it: full, read-only).

        A mapped file that eviction deletes stays readable (POSIX keeps the inode until
        unmapped); its disk space comes back when the shard is closed.

        Raises:
            RemoteReadError: the object stayed unreadable; RemoteStallError: it stalled.
        """
        if not self.reads_whole(obj):
            return None
        try:
            return self._wait(obj, self.download(obj, touch=True))
        except OSError as exc:  # the disk cache cannot keep it: read by range from now on
            self._by_range.add(obj.url)
            _LOG.warning("streamload: %s: cannot cache the whole file (%s); reading it by "
                         "range", obj.url, exc)  # fmt: skip
            return None

    def companion(self, url: str, expected_size: int, version: str | None = None) -> str:
        """A local file holding companion ``url`` (an index, a CSV) to map or parse: a whole
        file of the disk cache (counted in ``cache_size``), else (no disk cache, or the cache
        cannot keep it) a copy in ``cache_dir/files/``; an object without a version is copied
        for this process only (a later job could not tell a same-size replacement). Its size
        and version are asked for at every call and must be those of start-up (``version``:
        as listed then), so a replaced file is an error, never read.

        Raises:
            FormatError: the object's size or version differs from start-up.
            RemoteReadError: it stays unreadable.
        """
        info = self._fetcher.info(url)
        size, now = int(info.get("size") or 0), object_version(info)
        if size != expected_size or (version and now != version):
            was = f"{expected_size} bytes" + (f", version {version}" if version else "")
            raise FormatError(
                f"{url}: object is {size} bytes, version {now or '(none)'}, but was {was} at "
                "start-up; it changed while the loader was running (restart to read it anew)"
            )
        obj = RemoteObject(url, size, now)
        if not now:
            return self._private_copy(obj)
        if self._disk_for(obj) is not None:
            for _ in range(2):  # evicted before it could be opened (a tiny cache): again
                with contextlib.suppress(OSError):
                    path = self._wait(obj, self.download(obj, touch=True))
                    if os.path.exists(path):
                        return path
        return self._copy_into_files(obj)

    def _copy_into_files(self, obj: RemoteObject) -> str:
        key = obj.key(0, obj.size)
        name = obj.url.rsplit("/", 1)[-1]
        path = os.path.join(self.config.cache_root, "files", key[:2], f"{key}-{name}")
        with contextlib.suppress(OSError):
            if os.path.getsize(path) == obj.size:
                return path
        self._write(obj, path)
        return path

    def _private_copy(self, obj: RemoteObject) -> str:
        """A copy of an unversioned object, fetched again at every call (at each open of its
        shard) into one file per object for this process, removed at exit: nothing tells it
        apart from a same-size replacement, so neither a later loader nor a later job may
        reuse it (a map of the previous copy stays valid: the rename keeps its inode)."""
        with self._lock:
            path = self._private.get((obj.url, obj.size))
        if path is None:
            name = obj.url.rsplit("/", 1)[-1]
            folder = os.path.join(self.config.cache_root, "files", "private")
            path = os.path.join(folder, f"{os.getpid()}-{uuid.uuid4().hex[:12]}-{name}")
            atexit.register(_remove, path)
            with self._lock:
                path = self._private.setdefault((obj.url, obj.size), path)
        self._write(obj, path)
        return path

    def _write(self, obj: RemoteObject, path: str) -> None:
        """All of ``obj`` into ``path`` (one request; temp + rename)."""
        data = self._fetcher.fetch(obj, 0, obj.size) if obj.size else b""
        write_atomic(path, data)


def _remove(path: str) -> None:
    with contextlib.suppress(OSError):
        os.unlink(path)
