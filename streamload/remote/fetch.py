"""Remote requests with a timeout, retries and exponential backoff.

Every request runs on a daemon thread of a bounded pool (:mod:`streamload.remote.bounded`)
and is waited for with ``storage.timeout``; a request that does not answer in time is
abandoned (its thread no longer counts against the pool, and the process never waits for it
to exit) and retried, so a hung connection costs one timeout, not the job. Errors that
retrying cannot fix (missing object, access denied) fail at once; everything else
(connection resets, 5xx, throttling, truncated bodies) is retried ``storage.retries`` times,
the wait doubling from ``storage.backoff`` (:func:`streamload.remote.retry.call_with_retries`:
the one retry loop); when no attempt got an answer, the error is a ``RemoteStallError`` and
the object is held as stalled for a while (:mod:`streamload.remote.stalls`).
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable
from typing import Any, TypeVar

from streamload.config.storage import RangeClient, StorageConfig
from streamload.errors import ConfigError, RemoteReadError, RemoteStallError
from streamload.remote.bounded import DaemonPool
from streamload.remote.handle import RemoteObject
from streamload.remote.http_client import HttpRangeClient, SignatureRefused
from streamload.remote.retry import PERMANENT_ERRORS, BadAnswer, call_with_retries
from streamload.remote.stalls import StalledObjects
from streamload.remote.stats import RemoteStats

__all__ = ["PERMANENT_ERRORS", "RangeFetcher"]

T = TypeVar("T")
_LOG = logging.getLogger("streamload.remote")


class RangeFetcher:
    """Byte ranges and metadata of remote objects, through one fsspec file system.

    Args:
        fs: The fsspec file system (metadata; ranges too when there is no ``http`` client).
        config: Timeouts, retries, backoff and concurrency.
        stats: Where requests, retries and faults are counted.
        http: The pooled HTTP client for ranges (:mod:`streamload.remote.http_client`).
    """

    def __init__(
        self,
        fs: Any,
        config: StorageConfig,
        stats: RemoteStats,
        http: HttpRangeClient | None = None,
    ) -> None:
        self.fs = fs
        self.config = config
        self.stats = stats
        self.http = http
        # Twice the concurrency: header reads at start-up and companion metadata run beside
        # the range reads (abandoned requests do not count: bounded.DaemonPool).
        self._pool = DaemonPool(2 * config.max_concurrency, "streamload-request")
        self.stalls = StalledObjects(config)
        """Objects that stopped answering, failed at once for a while."""

    def fetch(self, obj: RemoteObject, start: int, end: int) -> bytes:
        """Bytes ``[start, end)`` of ``obj``; a shorter answer counts as a failed attempt.

        Raises:
            RemoteReadError: the object is missing, denied or changed, or every attempt failed.
            ConfigError: ``storage.client = "http"`` and the store refused a presigned URL.
        """
        what = f"bytes [{start}, {end})"

        def check(data: Any) -> bytes:
            if len(data) != end - start:
                self.stats.add("truncated")
                raise _Truncated(f"got {len(data)} of {end - start} bytes (truncated response)")
            self.stats.add("bytes", len(data))
            return bytes(data)

        return self.call(obj.url, what, self._range, obj, start, end, check=check)

    def _range(self, obj: RemoteObject, start: int, end: int) -> bytes:
        http = self.http
        if http is not None:
            try:
                return http.get(obj, start, end)
            except SignatureRefused as exc:
                return self._refused(obj, start, end, exc)
        return self.fs.cat_file(obj.url, start=start, end=end)

    def _refused(self, obj: RemoteObject, start: int, end: int, exc: SignatureRefused) -> bytes:
        """A presigned GET was refused (or could not be signed). The file system reads the same
        range: refused too, the object itself is denied (its ``PermissionError`` goes to the
        caller: an error naming it, or skipped under ``on_error = "skip"``); read, the store
        refuses presigned URLs: an error under ``client = "http"``, and under ``"auto"`` this
        storage reads through fsspec from now on (one warning)."""
        try:
            data = self.fs.cat_file(obj.url, start=start, end=end)
        except PermissionError as denied:
            raise PermissionError(f"{denied} (and a presigned GET: {exc})") from denied
        if self.config.client is not RangeClient.AUTO:
            raise ConfigError(
                f"{obj.url}: storage.client = 'http' but {exc}; use 'auto' or 'fsspec'"
            ) from exc
        if self.http is not None:
            self.http = None
            _LOG.warning(
                "streamload: %s: presigned range GETs refused (%s); this storage reads through "
                "fsspec from now on (storage.client = 'fsspec' skips the attempt)",
                obj.url,
                exc,
            )
        return data

    def info(self, url: str) -> dict[str, Any]:
        """The file system's ``info`` of ``url`` (size, ETag...), with retries."""
        return self.call(url, "metadata", self.fs.info, url)

    def call(
        self,
        url: str,
        what: str,
        fn: Callable[..., Any],
        *args: Any,
        check: Callable[[Any], T] | None = None,
        **kwargs: Any,
    ) -> Any:
        """Run ``fn(*args, **kwargs)`` with the timeout and retries; ``check`` validates.

        Raises:
            RemoteStallError: no attempt answered within ``storage.timeout``, or the object
                is held as stalled (:mod:`streamload.remote.stalls`).
            RemoteReadError: the object is missing or denied, or every attempt failed.
            StreamloadError: what ``fn`` raised on purpose (a corrupt header), at once.
        """
        self.stalls.check(url, what)
        call = functools.partial(fn, **kwargs) if kwargs else fn
        try:
            result = call_with_retries(
                self.config, url, what, call, *args, pool=self._pool, stats=self.stats, check=check
            )
        except RemoteStallError as exc:
            self.stalls.stalled(url, exc)
            raise
        except RemoteReadError:
            self.stalls.answered(url)
            raise
        self.stalls.answered(url)
        return result

    def close(self) -> None:
        """Stop accepting requests (running ones finish in the background)."""
        self._pool.shutdown()
        if self.http is not None:
            self.http.close()


class _Truncated(BadAnswer):
    """A response shorter than the requested range."""
