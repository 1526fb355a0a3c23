"""The stall watchdog: wait for a fetched piece, warn while it is late, fail when it stalls.

A reader waiting for one piece logs a warning on the ``streamload.remote`` logger every
``storage.stall_warning`` seconds naming the object, the byte range and the wait so far, and
raises :class:`RemoteStallError` naming them after ``storage.stall_timeout`` seconds.
"""

from __future__ import annotations

import concurrent.futures
import logging
import time
from typing import TypeVar

from streamload.config.storage import StorageConfig
from streamload.errors import RemoteStallError
from streamload.remote.stats import RemoteStats

__all__ = ["wait_watched"]

T = TypeVar("T")

_LOG = logging.getLogger("streamload.remote")


def wait_watched(
    future: concurrent.futures.Future[T],
    where: tuple[str, int, int],
    cfg: StorageConfig,
    stats: RemoteStats,
    since: float | None = None,
) -> T:
    """The future's result (bytes, or a cached file's path); ``where`` (URL, first byte, end
    byte) names it in warnings and errors. ``since`` (``time.monotonic()``, default now) is
    when the reader last saw the object make progress: a reader waiting for several pieces
    restarts the clock at each arrival, so after one stall the pieces still missing fail at
    once instead of each waiting ``stall_timeout`` again; a piece that has arrived is
    returned even after the deadline.

    Raises:
        RemoteStallError: nothing arrived within ``cfg.stall_timeout`` seconds of ``since``.
    """
    url, start, end = where
    began = time.monotonic() if since is None else since
    while True:
        left = max(0.0, cfg.stall_timeout - (time.monotonic() - began))
        tick = min(left, cfg.stall_warning) if cfg.stall_warning else left
        try:
            return future.result(timeout=tick)
        except concurrent.futures.TimeoutError:
            waited = time.monotonic() - began
            if waited >= cfg.stall_timeout:
                raise RemoteStallError(
                    f"{url}: waited {waited:.1f} s for bytes [{start}, {end}) "
                    f"(storage.stall_timeout = {cfg.stall_timeout} s); the store is stalled "
                    "or unreachable"
                ) from None
            stats.add("stall_warnings")
            _LOG.warning(
                "streamload: waiting %.1f s so far for %s bytes [%d, %d) (error at "
                "storage.stall_timeout = %s s)",
                waited, url, start, end, cfg.stall_timeout,
            )  # fmt: skip
