"""Atomic file output, the one way streamload writes a file that another process may read.

Every writer (format shards and indices, caches, markers, catalogs) writes under a hidden
temporary name beside its target, ``.NAME.XXXXXXXX.tmp``, and renames it onto the target when
complete (``os.replace`` is atomic on POSIX): a reader sees the whole file or none. An
interrupted writer leaves only such a temporary file, which no listing takes for a shard
(listings skip hidden files, and ``.tmp`` is no token suffix) and which :func:`is_temp_name`
recognises for clean-up.

Written here rather than taken from a library: ``atomicwrites`` is archived, and none of the
maintained ones gives hidden names that shard listings skip, the permissions ``open()`` would
give (``mkstemp`` makes 0600; a dataset is meant to be shared), and a two-step form (a temp
file written by several threads at offsets, then published) that the remote cache needs.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import os
import tempfile
from collections.abc import Iterator

__all__ = [
    "atomic_output",
    "file_sha256",
    "is_temp_name",
    "publish",
    "temp_beside",
    "write_atomic",
]

TEMP_SUFFIX = ".tmp"


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


_FILE_MODE = 0o666 & ~_umask()
"""What ``open(path, "w")`` would give: the outputs must be as readable as the tools' own."""


def temp_beside(path: str | os.PathLike[str]) -> str:
    """Create an empty hidden ``.NAME.XXXXXXXX.tmp`` beside ``path`` (its folder is made) with
    the permissions ``open()`` would give, and return its path."""
    folder, name = os.path.split(os.path.abspath(os.fspath(path)))
    os.makedirs(folder, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{name}.", suffix=TEMP_SUFFIX, dir=folder)
    os.close(fd)
    os.chmod(tmp, _FILE_MODE)
    return tmp


def is_temp_name(name: str) -> bool:
    """Whether a file name is one of :func:`temp_beside`'s (a writer's unfinished output)."""
    return name.startswith(".") and name.endswith(TEMP_SUFFIX)


def publish(tmp: str, path: str | os.PathLike[str]) -> None:
    """Rename the finished temporary file ``tmp`` onto ``path`` (atomic); on failure ``tmp``
    is removed and the error raised."""
    try:
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


@contextlib.contextmanager
def atomic_output(path: str | os.PathLike[str]) -> Iterator[str]:
    """Yield a temporary path beside ``path``; rename it onto ``path`` if the block succeeds,
    remove it if the block raises."""
    tmp = temp_beside(path)
    try:
        yield tmp
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    publish(tmp, path)


def write_atomic(path: str | os.PathLike[str], data: bytes | memoryview | str) -> None:
    """Write ``data`` (text as UTF-8) to ``path`` atomically."""
    raw = data.encode("utf-8") if isinstance(data, str) else data
    with atomic_output(path) as tmp, open(tmp, "wb") as fh:
        fh.write(raw)


def file_sha256(path: str) -> str:
    """sha256 of a file's bytes (remembered per path, size and mtime: a source names one
    tokenizer for all its files, and every rank describes them)."""
    stat = os.stat(path)
    return _sha256(os.path.abspath(path), stat.st_size, stat.st_mtime_ns)


@functools.lru_cache(maxsize=64)
def _sha256(path: str, size: int, mtime_ns: int) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()
