"""Objects that stopped answering: calls to them fail at once for a while.

A call whose every attempt got no answer within ``storage.timeout`` (a ``RemoteStallError``)
marks its object *stalled* for a hold time: the request budget
(:func:`~streamload.remote.retry.request_budget`) the first time, doubling each time a call
made after the hold fails the same way, at most ``max(budget, storage.stall_timeout)``. While
held, every call to the object (range reads, metadata, downloads) raises a
``RemoteStallError`` naming it at once, instead of each waiting out a budget of its own: under
``on_error = "skip"`` a store that accepts connections and never answers costs one budget per
hold, not one per chunk that touches the object. The first call after the hold asks the store
again; any answer (even an error) clears the mark.
"""

from __future__ import annotations

import threading
import time

from streamload.config.storage import StorageConfig
from streamload.errors import RemoteStallError
from streamload.remote.retry import request_budget

__all__ = ["StalledObjects"]


class StalledObjects:
    """The stalled objects of one store (see the module docstring).

    Args:
        config: The storage's timeouts and retries.
    """

    def __init__(self, config: StorageConfig) -> None:
        self.config = config
        self.first_hold = request_budget(config)
        self.max_hold = max(self.first_hold, config.stall_timeout)
        self._lock = threading.Lock()
        self._held: dict[str, tuple[float, float, str]] = {}  # url: (until, hold, why)

    def check(self, url: str, what: str) -> None:
        """Raise at once while ``url`` is held.

        Raises:
            RemoteStallError: names ``url``, ``what``, the last failure and the time left.
        """
        if not self._held:  # the common case, without the lock
            return
        with self._lock:
            held = self._held.get(url)
        if held is None:
            return
        until, _, why = held
        left = until - time.monotonic()
        if left > 0:
            part = f"{what}: " if what else ""
            raise RemoteStallError(
                f"{url}: {part}not requested: the object stopped answering ({why}); it is "
                f"asked again in {left:.1f} s"
            )

    def stalled(self, url: str, error: RemoteStallError) -> None:
        """A call to ``url`` got no answer from any attempt: hold it (longer if it was held
        before and this call was made after the hold ended)."""
        now = time.monotonic()
        why = str(error).removeprefix(f"{url}: ")
        with self._lock:
            until, hold, _ = self._held.get(url, (0.0, 0.0, ""))
            if not hold:
                hold = self.first_hold
            elif now >= until:  # asked again after the hold: still nothing
                hold = min(2 * hold, self.max_hold)
            self._held[url] = (max(until, now + hold), hold, why)

    def answered(self, url: str) -> None:
        """The store answered a call to ``url`` (data or an error): it is not stalled."""
        if self._held:
            with self._lock:
                self._held.pop(url, None)
