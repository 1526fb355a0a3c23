"""Remote requests with a timeout, retries and exponential backoff.

Every request runs in a thread of a bounded pool and is waited for with ``storage.timeout``;
a request that does not answer in time is abandoned (its thread finishes in the background)
and retried, so a hung connection costs one timeout, not the job. Errors that retrying cannot
fix (missing object, access denied) fail at once; everything else (connection resets, 5xx,
throttling, truncated bodies) is retried ``storage.retries`` times, the wait doubling from
``storage.backoff`` (with jitter, capped at ``listing.MAX_BACKOFF``: :func:`listing.retry_pause`).
"""

from __future__ import annotations

import concurrent.futures
import logging
from collections.abc import Callable
from typing import Any, TypeVar

from streamload.config.storage import RangeClient, StorageConfig
from streamload.errors import PROGRAMMING_ERRORS, ConfigError, FormatError, RemoteReadError
from streamload.remote.handle import RemoteObject
from streamload.remote.http_client import HttpRangeClient, SignatureRefused
from streamload.remote.retry import retry_pause
from streamload.remote.stats import RemoteStats

__all__ = ["PERMANENT_ERRORS", "RangeFetcher"]

PERMANENT_ERRORS = (FileNotFoundError, PermissionError, IsADirectoryError, NotADirectoryError)
"""Errors no retry can fix (fsspec maps 404 and 403 to the first two)."""

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
        # Twice the concurrency: abandoned (timed-out) requests may still hold a thread.
        self._pool = concurrent.futures.ThreadPoolExecutor(
            max_workers=2 * config.max_concurrency, thread_name_prefix="streamload-request"
        )

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
        """Run ``fn(*args, **kwargs)`` with the timeout and retries; ``check`` validates."""
        attempts = self.config.retries + 1
        last = "no attempt"
        for attempt in range(attempts):
            if attempt:
                self.stats.add("retries")
                retry_pause(self.config.backoff, attempt)
            self.stats.add("requests")
            future = self._pool.submit(fn, *args, **kwargs)
            try:
                result = future.result(timeout=self.config.timeout)
                return check(result) if check is not None else result
            except concurrent.futures.TimeoutError:
                self.stats.add("timeouts")
                last = f"no answer within storage.timeout = {self.config.timeout} s"
            except PERMANENT_ERRORS as exc:
                raise RemoteReadError(
                    f"{url}: cannot read {what}: {type(exc).__name__}: {exc}; the object is "
                    "missing or not readable with these storage_options"
                ) from exc
            except (FormatError, ConfigError, RemoteReadError, *PROGRAMMING_ERRORS):
                raise  # a corrupt header stays corrupt; a nested read already retried
            except _Truncated as exc:
                last = str(exc)
            except Exception as exc:  # network, server and client errors are retried
                self.stats.add("errors")
                last = f"{type(exc).__name__}: {exc}"
        raise RemoteReadError(
            f"{url}: {what} still unreadable after {attempts} attempts "
            f"(storage.retries = {self.config.retries}); last failure: {last}"
        )

    def close(self) -> None:
        """Stop accepting requests (running ones finish in the background)."""
        self._pool.shutdown(wait=False, cancel_futures=True)
        if self.http is not None:
            self.http.close()


class _Truncated(Exception):
    """A response shorter than the requested range."""
