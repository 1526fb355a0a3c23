"""The one retry policy of remote calls: reads, listings and metadata requests alike.

Exponential backoff from ``storage.backoff``, doubling per retry up to ``MAX_BACKOFF``, with
50-100 % jitter so clients that failed together do not retry together.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from typing import Any, TypeVar

from streamload.config.storage import StorageConfig
from streamload.errors import PROGRAMMING_ERRORS, ConfigError, RemoteReadError, StreamloadError

__all__ = ["MAX_BACKOFF", "retry_pause", "retrying"]

T = TypeVar("T")

MAX_BACKOFF = 10.0
"""Seconds a retry waits at most (before jitter)."""


def retry_pause(backoff: float, retry: int) -> None:
    """Wait before retry number ``retry`` (1, 2, ...): ``backoff`` doubling per retry, capped at
    ``MAX_BACKOFF``, jittered to 50-100% (clients failing together do not retry together)."""
    time.sleep(min(MAX_BACKOFF, backoff * 2 ** (retry - 1)) * random.uniform(0.5, 1.0))


def retrying(storage: StorageConfig | None, what: str, fn: Callable[..., T], *args: Any) -> T:
    """``fn(*args)`` (a listing or metadata call at start-up), retried on transient errors
    like any remote request (``storage.retries``, ``backoff``): one 503 must not fail a job.

    Raises:
        ConfigError, FormatError: at once (a missing path stays missing).
        RemoteReadError: every attempt failed; names ``what``, the attempts and the cause.
    """
    attempts = 1 + (storage.retries if storage is not None else 0)
    backoff = storage.backoff if storage is not None else 0.0
    for attempt in range(attempts):
        try:
            return fn(*args)
        except (StreamloadError, *PROGRAMMING_ERRORS):
            raise
        except (FileNotFoundError, PermissionError) as exc:  # no retry changes these
            raise ConfigError(
                f"{what}: {type(exc).__name__}: {exc} (missing, or not readable with these "
                "storage_options)"
            ) from exc
        except Exception as exc:
            if attempt + 1 == attempts:
                raise RemoteReadError(
                    f"{what}: still failing after {attempts} attempts (storage.retries = "
                    f"{attempts - 1}); last failure: {type(exc).__name__}: {exc}"
                ) from exc
            retry_pause(backoff, attempt + 1)
    raise AssertionError("unreachable")
