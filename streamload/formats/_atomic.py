"""Atomic file output: write under a temporary name beside the target, rename when complete.

An interrupted writer leaves only a hidden ``.NAME.XXXX.tmp`` file that no listing takes for a
shard (listings skip hidden files, and ``.tmp`` is no token suffix).
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from collections.abc import Iterator
from typing import Any, TypeVar

__all__ = ["StackWriter", "atomic_output", "temp_beside"]


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


_FILE_MODE = 0o666 & ~_umask()
"""What ``open(path, "w")`` would give: the outputs must be as readable as the tools' own."""


def temp_beside(path: str | os.PathLike[str]) -> str:
    """Create an empty hidden ``.NAME.XXXX.tmp`` beside ``path`` (usual permissions)."""
    folder, name = os.path.split(os.path.abspath(os.fspath(path)))
    os.makedirs(folder, exist_ok=True)
    # hidden, and no token suffix, so no listing takes a half-written file for a shard
    fd, tmp = tempfile.mkstemp(prefix=f".{name}.", suffix=".tmp", dir=folder)
    os.close(fd)
    os.chmod(tmp, _FILE_MODE)  # mkstemp makes 0600; a dataset is meant to be shared
    return tmp


@contextlib.contextmanager
def atomic_output(path: str | os.PathLike[str]) -> Iterator[str]:
    """Yield a temporary path beside ``path``; rename it onto ``path`` if the block succeeds."""
    target = os.fspath(path)
    tmp = temp_beside(target)
    try:
        yield tmp
        os.replace(tmp, target)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


_W = TypeVar("_W", bound="StackWriter")


class StackWriter:
    """The context-manager life of a writer whose temporary outputs sit in ``self._stack``.

    On success ``close()`` finishes and renames the outputs; on an exception inside the block
    the stack unwinds, deleting the temporary files, and nothing looks complete.
    """

    _closed: bool
    _stack: Any  # a contextlib.ExitStack of the temporary outputs (None before any)

    def close(self) -> None:  # pragma: no cover - every writer defines it
        raise NotImplementedError

    def __enter__(self: _W) -> _W:
        return self

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        if exc_type is None:
            self.close()
        elif not self._closed:
            self._closed = True
            if self._stack is not None:
                self._stack.__exit__(exc_type, exc, tb)
