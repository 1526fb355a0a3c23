"""Atomic file output: write under a temporary name beside the target, rename when complete.

An interrupted writer leaves only a hidden ``.NAME.XXXX.tmp`` file that no listing takes for a
shard (listings skip hidden files, and ``.tmp`` is no token suffix).
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from collections.abc import Iterator

__all__ = ["atomic_output"]


@contextlib.contextmanager
def atomic_output(path: str | os.PathLike[str]) -> Iterator[str]:
    """Yield a temporary path beside ``path``; rename it onto ``path`` if the block succeeds."""
    target = os.fspath(path)
    folder = os.path.dirname(os.path.abspath(target))
    os.makedirs(folder, exist_ok=True)
    # ".name.XXXX.tmp": hidden, and no token suffix, so no listing takes it for a shard
    fd, tmp = tempfile.mkstemp(prefix=f".{os.path.basename(target)}.", suffix=".tmp", dir=folder)
    os.close(fd)
    try:
        yield tmp
        os.replace(tmp, target)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
