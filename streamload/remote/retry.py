"""The one retry policy of remote calls: reads, listings and metadata requests alike.

Every attempt runs on a daemon thread and is waited for at most ``storage.timeout`` seconds
(:mod:`streamload.remote.bounded`); a failed or timed-out attempt is retried up to
``storage.retries`` times after an exponential backoff from ``storage.backoff``, doubling per
retry up to ``MAX_BACKOFF``, with 50-100 % jitter so clients that failed together do not retry
together. The client libraries' own retries are turned off where streamload builds their file
systems (:mod:`streamload.remote.clients`), so this loop is the only one and a call ends, one
way or another, within :func:`request_budget` seconds.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from typing import Any, TypeVar

from streamload.config.storage import StorageConfig
from streamload.errors import (
    PROGRAMMING_ERRORS,
    ConfigError,
    RemoteReadError,
    RemoteStallError,
    StreamloadError,
)
from streamload.remote.bounded import CallTimedOut, DaemonPool, call_within, shared_pool
from streamload.remote.stats import RemoteStats

__all__ = [
    "MAX_BACKOFF",
    "PERMANENT_ERRORS",
    "BadAnswer",
    "call_with_retries",
    "request_budget",
    "retry_pause",
    "retrying",
]

T = TypeVar("T")

MAX_BACKOFF = 10.0
"""Seconds a retry waits at most (before jitter)."""

PERMANENT_ERRORS = (FileNotFoundError, PermissionError, IsADirectoryError, NotADirectoryError)
"""Errors no retry can fix (fsspec maps 404 and 403 to the first two)."""


class BadAnswer(Exception):
    """An answer the caller's check refused (a truncated body): retried like a failure."""


def retry_pause(backoff: float, retry: int) -> None:
    """Wait before retry number ``retry`` (1, 2, ...): ``backoff`` doubling per retry, capped at
    ``MAX_BACKOFF``, jittered to 50-100% (clients failing together do not retry together)."""
    time.sleep(min(MAX_BACKOFF, backoff * 2 ** (retry - 1)) * random.uniform(0.5, 1.0))


def request_budget(config: StorageConfig) -> float:
    """Seconds one remote call takes at most before it fails (or is skipped): every attempt's
    ``timeout`` plus the longest backoffs between them."""
    waits = (min(MAX_BACKOFF, config.backoff * 2 ** (r - 1)) for r in range(1, config.retries + 1))
    return (config.retries + 1) * config.timeout + sum(waits)


def call_with_retries(
    config: StorageConfig,
    url: str,
    what: str,
    fn: Callable[..., Any],
    *args: Any,
    pool: DaemonPool | None,
    stats: RemoteStats | None = None,
    check: Callable[[Any], T] | None = None,
    permanent: Callable[[BaseException], StreamloadError] | None = None,
) -> Any:
    """``fn(*args)`` (validated by ``check`` when given), each attempt bounded by ``config.timeout``
    and retried ``config.retries`` times; counted in ``stats`` (requests, retries, timeouts,
    errors).

    Args:
        config: Timeout, retries and backoff.
        url: What the errors name.
        what: The part of it (``"bytes [0, 64)"``), or ``""``.
        fn: One attempt.
        *args: Its arguments.
        pool: Where attempts run, each bounded by ``config.timeout`` (``None``: in the
            calling thread, unbounded: local files).
        stats: Counters, if any.
        check: Validates an answer (raises :class:`BadAnswer` to retry).
        permanent: The error raised at once for a missing or denied object (default: a
            ``RemoteReadError`` naming it).

    Raises:
        RemoteStallError: no attempt got an answer within ``storage.timeout``.
        RemoteReadError: every attempt failed (or the object is missing or denied).
        StreamloadError: what ``fn`` raised on purpose (a corrupt header), at once.
    """
    attempts = config.retries + 1
    timeouts = 0
    last = "no attempt"
    for attempt in range(attempts):
        if attempt:
            _count(stats, "retries")
            retry_pause(config.backoff, attempt)
        _count(stats, "requests")
        try:
            result = fn(*args) if pool is None else call_within(pool, config.timeout, fn, *args)
            return check(result) if check is not None else result
        except (StreamloadError, *PROGRAMMING_ERRORS):
            raise  # a corrupt header stays corrupt; a nested read already retried
        except Exception as exc:  # network, server and client errors are retried
            counter, last = _failed_attempt(exc, config, url, what, permanent)
            if counter is not None:
                _count(stats, counter)
            timeouts += counter == "timeouts"
    kind = RemoteStallError if timeouts == attempts else RemoteReadError
    raise kind(
        f"{url}: {what + ' ' if what else ''}still failing after {attempts} attempts "
        f"(storage.retries = "
        f"{config.retries}, storage.timeout = {config.timeout} s); last failure: {last}"
    )


def _failed_attempt(
    exc: Exception,
    config: StorageConfig,
    url: str,
    what: str,
    permanent: Callable[[BaseException], StreamloadError] | None,
) -> tuple[str | None, str]:
    """The counter (``None``: none) and the description of an attempt that failed with
    ``exc`` and may be retried; raises at once for a missing or denied object (see
    :func:`call_with_retries`)."""
    if isinstance(exc, CallTimedOut):
        return "timeouts", f"no answer within storage.timeout = {config.timeout} s"
    if isinstance(exc, PERMANENT_ERRORS):
        if permanent is not None:
            raise permanent(exc) from exc
        raise RemoteReadError(
            f"{url}: cannot read {what}: {type(exc).__name__}: {exc}; the object is "
            "missing or not readable with these storage_options"
        ) from exc
    if isinstance(exc, BadAnswer):
        return None, str(exc)
    # the client's own limit (storage.timeout) may come first: counted as a timeout
    return ("timeouts" if _timed_out(exc) else "errors"), f"{type(exc).__name__}: {exc}"


def _timed_out(exc: BaseException) -> bool:
    """Whether a client library gave up waiting (aiohttp's and asyncio's timeouts are
    ``TimeoutError``; urllib3's and botocore's ``ReadTimeoutError``, ``ConnectTimeout``...
    are only named so)."""
    return isinstance(exc, TimeoutError) or "timeout" in type(exc).__name__.lower()


def _count(stats: RemoteStats | None, name: str) -> None:
    if stats is not None:
        stats.add(name)


def retrying(storage: StorageConfig | None, what: str, fn: Callable[..., T], *args: Any) -> T:
    """``fn(*args)``, a start-up listing or metadata call, bounded and retried like any remote
    request (:func:`call_with_retries`): one 503 must not fail a job, a stalled store must not
    hang it (``storage`` ``None``: one attempt, the default timeout). When ``args[0]`` is the
    local file system, attempts are retried but not bounded (see :func:`_is_local`).

    Raises:
        ConfigError: the path is missing or denied (no retry changes that).
        RemoteStallError: no attempt got an answer in time; names ``what``.
        RemoteReadError: every attempt failed; names ``what``, the attempts and the cause.
        StreamloadError: what ``fn`` raised on purpose (``FormatError``...), at once.
    """

    def missing(exc: BaseException) -> ConfigError:
        return ConfigError(
            f"{what}: {type(exc).__name__}: {exc} (missing, or not readable with these "
            "storage_options)"
        )

    config = storage if storage is not None else StorageConfig(retries=0)
    pool = None if args and _is_local(args[0]) else shared_pool()
    result: T = call_with_retries(config, what, "", fn, *args, pool=pool, permanent=missing)
    return result


def _is_local(fs: Any) -> bool:
    """Whether ``fs`` is fsspec's local file system (``[storage]`` does not govern local
    files: their calls run unbounded, in the calling thread, as any file access does)."""
    protocol = getattr(fs, "protocol", None)
    protocols = protocol if isinstance(protocol, tuple) else (protocol,)
    return "file" in protocols or "local" in protocols
