"""One run per destination and shard at a time: an exclusive ``flock`` held while a run writes.

``DEST/.streamload-tokenize/lock-{shard_index}`` is locked by the run that plans or writes
shard ``shard_index`` of ``DEST`` (machines of a Slurm array take one lock each, so they still
share the destination). A second run of the same shard is refused at once with a
:class:`~streamload.errors.ConfigError` naming the destination and the holder's pid and host,
which the holder writes into the file. The kernel drops the lock when its process dies
(even by ``kill -9``), so no lock is ever stale and nothing has to be cleaned up.

Written here rather than taken from ``filelock``: its ``FileLock`` truncates the file when it
opens it, so a refused run could not read the holder's pid; ``flock`` itself is a few lines.
Where ``fcntl`` is missing (Windows) or the file system refuses ``flock`` (some network
mounts), a run proceeds unlocked with a warning.
"""

from __future__ import annotations

import contextlib
import errno
import os
import socket
import warnings
from collections.abc import Iterator
from typing import Any

from streamload.errors import ConfigError

try:
    import fcntl
except ImportError:  # pragma: no cover - Windows
    fcntl = None  # type: ignore[assignment]

__all__ = ["DestinationLock", "FileClaim", "exclusive", "try_exclusive"]

_UNSUPPORTED = {errno.ENOLCK, errno.EOPNOTSUPP, errno.ENOSYS, errno.EINVAL}
"""``flock`` errors that mean "this file system does not lock", not "someone holds it"."""


class DestinationLock:
    """The exclusive lock of one shard of a destination.

    Args:
        folder: The bookkeeping folder (``DEST/.streamload-tokenize``; created if missing).
        destination: The destination, for messages.
        shard_index: The shard the run writes.

    Use as a context manager, or call :meth:`acquire` and :meth:`release`.
    """

    def __init__(self, folder: str, destination: str, shard_index: int) -> None:
        self.path = os.path.join(folder, f"lock-{shard_index}")
        self.destination = destination
        self.shard_index = shard_index
        self._fd: int | None = None

    def acquire(self) -> DestinationLock:
        """Take the lock, or refuse at once.

        Raises:
            ConfigError: another live run holds this shard of the destination, or the
                destination cannot be written.
        """
        try:
            os.makedirs(os.path.dirname(self.path), exist_ok=True)
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o666)  # never truncate: the pid
        except OSError as exc:  # a file where the folder goes, no permission, read-only…
            raise ConfigError(
                f"{self.destination}: cannot write the run's folder here ({exc}); the "
                "destination must be a folder this user can write"
            ) from exc
        try:
            if not _flock(fd, self.path, blocking=False):
                raise ConfigError(
                    f"{self.destination}: another streamload tokenize run ({_holder(fd)}) is "
                    f"writing shard {self.shard_index} of this destination (it holds "
                    f"{self.path}); wait for it to finish or stop it, or use another destination"
                )
            os.ftruncate(fd, 0)
            os.write(fd, f"{os.getpid()} {socket.gethostname()}\n".encode())
        except BaseException:
            os.close(fd)
            raise
        self._fd = fd
        return self

    def release(self) -> None:
        """Give the lock up (closing the file drops it)."""
        fd, self._fd = self._fd, None
        if fd is not None:
            os.close(fd)

    def __enter__(self) -> DestinationLock:
        return self.acquire()

    def __exit__(self, *exc: Any) -> None:
        self.release()


def _flock(fd: int, path: str, *, blocking: bool) -> bool:
    """Lock ``fd`` exclusively; ``False`` when another holds it (only without ``blocking``)."""
    if fcntl is None:  # pragma: no cover - Windows
        warnings.warn(f"{path}: no flock on this platform; the run is not locked", stacklevel=3)
        return True
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | (0 if blocking else fcntl.LOCK_NB))
    except BlockingIOError:
        return False
    except OSError as exc:
        if exc.errno not in _UNSUPPORTED:
            raise
        warnings.warn(
            f"{path}: the file system does not support flock ({exc.strerror}); the run is not "
            "locked, so make sure no other run writes the same shard of this destination",
            stacklevel=3,
        )
    return True


def _holder(fd: int) -> str:
    """``pid N on HOST`` as the holder wrote it (``pid unknown`` before it has)."""
    try:
        text = os.pread(fd, 200, 0).decode("utf-8", "replace").split()
    except OSError:
        text = []
    if not text:
        return "pid unknown"
    return f"pid {text[0]}" + (f" on {text[1]}" if len(text) > 1 else "")


@contextlib.contextmanager
def exclusive(path: str) -> Iterator[None]:
    """Hold an exclusive ``flock`` on ``path`` for a short critical section, waiting for it
    (two machines claiming one destination at once: one writes ``run.json``, the other
    checks it)."""
    os.makedirs(os.path.dirname(path), exist_ok=True)
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o666)
    try:
        _flock(fd, path, blocking=True)
        yield
    finally:
        os.close(fd)


class FileClaim:
    """An exclusive ``flock`` on ``path`` taken on entering (made with
    :func:`try_exclusive`): ``with claim as held`` gives whether it was taken."""

    def __init__(self, path: str, blocking: bool) -> None:
        self.path = path
        self.blocking = blocking
        self._fd: int | None = None

    def __enter__(self) -> bool:
        os.makedirs(os.path.dirname(self.path), exist_ok=True)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o666)
        try:
            held = _flock(fd, self.path, blocking=self.blocking)
        except BaseException:
            os.close(fd)
            raise
        if not held:
            os.close(fd)
            return False
        self._fd = fd
        return True

    def __exit__(self, *exc: Any) -> None:
        fd, self._fd = self._fd, None
        if fd is not None:
            os.close(fd)  # closing drops the lock


def try_exclusive(path: str, *, blocking: bool) -> FileClaim:
    """A claim on ``path`` for as long as a piece of work runs; without ``blocking`` entering
    it gives ``False`` at once when another process holds it. The kernel drops the lock when
    the holder dies, so a claim is never stale."""
    return FileClaim(path, blocking)
