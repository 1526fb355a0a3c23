"""Remote storage: token windows read by byte range through fsspec (docs/remote.md).

* :mod:`~streamload.remote.store` — pieces of remote objects: memory LRU, disk cache,
  coalesced range requests with bounded concurrency, in-flight sharing, stall watchdog;
* :mod:`~streamload.remote.block_cache` — the bounded, lock-free disk cache (LRU);
* :mod:`~streamload.remote.fetch` — requests with timeouts, retries and backoff;
* :mod:`~streamload.remote.retry` — the one retry loop and its end-to-end request budget, for
  reads, listings and metadata alike; :mod:`~streamload.remote.bounded` — every attempt on a
  daemon thread, abandoned when it does not answer in time; :mod:`~streamload.remote.clients`
  — the client libraries' own retries off; :mod:`~streamload.remote.stalls` — objects that
  stopped answering fail at once for a while;
* :mod:`~streamload.remote.array` — array/file views that formats read through;
* :mod:`~streamload.nodes.lookahead` — fetching the next batches' windows ahead;
* :mod:`~streamload.remote.stats` — counters reported by ``loader.stats()["storage"]``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from streamload.util.lazy import lazy_attributes

if TYPE_CHECKING:
    from streamload.errors import RemoteReadError, RemoteStallError
    from streamload.remote.array import RemoteFile, RemoteTokens
    from streamload.remote.block_cache import DiskBlockCache
    from streamload.remote.fetch import RangeFetcher
    from streamload.remote.stats import RemoteStats
    from streamload.remote.store import RemoteObject, RemoteStore, StorageHandle

# The store pulls in fsspec's async machinery (asyncio, ssl), numpy and a fork hook; local data
# never needs it, so these names load on first use and `from streamload.remote.stats import ...`
# (the loader's counters) does not drag the store in through this package.
_LAZY = {
    "DiskBlockCache": "streamload.remote.block_cache",
    "RangeFetcher": "streamload.remote.fetch",
    "RemoteFile": "streamload.remote.array",
    "RemoteObject": "streamload.remote.handle",
    "RemoteReadError": "streamload.errors",
    "RemoteStallError": "streamload.errors",
    "RemoteStats": "streamload.remote.stats",
    "RemoteStore": "streamload.remote.store",
    "RemoteTokens": "streamload.remote.array",
    "StorageHandle": "streamload.remote.handle",
}


__getattr__ = lazy_attributes(__name__, globals(), _LAZY)


__all__ = [
    "DiskBlockCache",
    "RangeFetcher",
    "RemoteFile",
    "RemoteObject",
    "RemoteReadError",
    "RemoteStallError",
    "RemoteStats",
    "RemoteStore",
    "RemoteTokens",
    "StorageHandle",
]
