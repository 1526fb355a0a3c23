"""The ``[storage]`` table: how remote (fsspec) shards are fetched and cached.

None of these options enter the fingerprint: they decide *how* and *when* bytes arrive
(block size, cache, prefetch depth, concurrency, retries, timeouts), never which sample has
which index, so a run may resume with other values (docs/remote.md).
"""

from __future__ import annotations

import enum
import os
from dataclasses import dataclass

from streamload.config.checks import check_bool, check_int, check_number, check_path, to_enum
from streamload.errors import ConfigError

__all__ = [
    "CACHE_DIR_ENV",
    "MAX_BLOCK_SIZE",
    "MAX_CONCURRENCY",
    "MAX_RETRIES",
    "MAX_SECONDS",
    "RangeClient",
    "StorageConfig",
    "WindowReads",
    "default_cache_dir",
]


class WindowReads(str, enum.Enum):
    """How a token window of a remote shard becomes range requests."""

    EXACT = "exact"
    """Exactly the window's bytes (pieces within ``coalesce_gap`` share a request): a rank
    fetches only what it uses; best when windows are scattered over a corpus far larger than
    the cache (uniform shuffle)."""
    BLOCKS = "blocks"
    """The aligned ``block_size`` blocks holding the window, cached and shared by every window
    inside them: few large requests; best when windows cluster (``sampling.shuffle_block``,
    no shuffle) or the corpus fits the cache."""


class RangeClient(str, enum.Enum):
    """What sends the range requests of token reads (listing and headers always use fsspec)."""

    AUTO = "auto"
    """``http`` for ``s3://`` (unless ``requester_pays``, ``s3_additional_kwargs`` or
    ``version_aware`` is set) and for plain ``http(s)://``; ``fsspec`` otherwise. If the store
    refuses a presigned URL, this storage falls back to ``fsspec`` (one warning)."""
    FSSPEC = "fsspec"
    """The fsspec file system's ``cat_file`` (any protocol; ~1.4 ms of CPU per s3fs GET)."""
    HTTP = "http"
    """GETs over pooled ``urllib3`` connections to URLs fsspec presigns once per object
    (``s3``, ``gs``, ``az``) or to ``http(s)`` URLs as they are (~0.35 ms of CPU per GET); a
    listed ETag is checked on every answer. No fallback: a refused signature is an error."""


MAX_RETRIES = 100
"""Most further attempts of one request (each costs up to ``timeout``: more is a hang)."""
MAX_SECONDS = 86_400.0
"""Longest ``timeout``, ``backoff``, ``stall_warning`` and ``stall_timeout`` (a day)."""
MAX_CONCURRENCY = 1024
"""Most requests in flight per process (each holds a thread and a connection)."""
MAX_BLOCK_SIZE = 1 << 30
"""Largest ``block_size`` (a block is one request, held in memory whole)."""

CACHE_DIR_ENV = "STREAMLOAD_CACHE_DIR"
"""Environment variable naming the cache folder when ``cache_dir`` is unset."""


def default_cache_dir() -> str:
    """``$STREAMLOAD_CACHE_DIR``, else ``$XDG_CACHE_HOME/streamload``, else ``~/.cache/…``."""
    if os.environ.get(CACHE_DIR_ENV):
        return os.environ[CACHE_DIR_ENV]
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "streamload")


@dataclass(frozen=True, kw_only=True)
class StorageConfig:
    """Fetching and caching of remote shards (local files are memory-mapped; none of this
    applies to them).

    Args:
        cache_dir: Folder of the block cache and the cached index files, shared by every
            worker and process of the machine (``None``: :func:`default_cache_dir`).
        cache_size: Bytes the block cache may hold on disk; least recently used pieces are
            evicted beyond it (0: no disk cache, memory only).
        block_size: Bytes per aligned block of files parsed piecewise (a ``.pbin`` header
            and index), and of token files with ``window_reads = "blocks"``.
        window_reads: How token windows are fetched (:class:`WindowReads`).
        client: What sends the range requests (:class:`RangeClient`).
        memory_size: Bytes of recently used pieces kept in memory per process (keep it above
            the bytes of ``prefetch_batches`` batches when there is no disk cache).
        prefetch_batches: Batches of this rank fetched ahead of the reader (0: no prefetch).
        max_concurrency: Range requests in flight per process.
        retries: Further attempts after a failed or timed-out request (exponential backoff).
        backoff: Seconds before the first retry; doubles with each further one.
        timeout: Seconds one request may take before it is abandoned and retried.
        stall_warning: Seconds a reader waits for one object before a warning names it.
        stall_timeout: Seconds a reader waits for one object, with none of its pieces
            arriving, before it fails, naming it.
        whole_shard_size: Token files up to this many bytes (and at most half of
            ``cache_size``) are downloaded whole into the disk cache on first use and mapped
            (0: never; windows are read by range).
        coalesce_gap: Byte ranges at most this far apart are fetched by one request (the gap
            is read too; a round trip costs more than a few KiB on any object store).
        trust_catalog: Use a source's cached catalog without listing its folders to check
            that the data did not change (``false``: one listing per folder at each start,
            never a ``stat`` per file; :mod:`streamload.catalog.store`). A shard rewritten
            in place is refused when first opened either way.
    """

    cache_dir: str | None = None
    cache_size: int = 16 << 30
    block_size: int = 1 << 20
    window_reads: WindowReads = WindowReads.EXACT
    client: RangeClient = RangeClient.AUTO
    memory_size: int = 256 << 20
    prefetch_batches: int = 16
    max_concurrency: int = 16
    retries: int = 5
    backoff: float = 0.1
    timeout: float = 60.0
    stall_warning: float = 30.0
    stall_timeout: float = 600.0
    whole_shard_size: int = 0
    coalesce_gap: int = 64 << 10
    trust_catalog: bool = False

    def __post_init__(self) -> None:
        object.__setattr__(
            self, "window_reads", to_enum(WindowReads, self.window_reads, "storage.window_reads")
        )
        object.__setattr__(self, "client", to_enum(RangeClient, self.client, "storage.client"))
        if self.cache_dir is not None:
            check_path(self.cache_dir, "storage.cache_dir")
        check_int(self.block_size, "storage.block_size", 1, MAX_BLOCK_SIZE)
        check_int(self.cache_size, "storage.cache_size", 0)
        check_int(self.memory_size, "storage.memory_size", 0)
        check_int(self.prefetch_batches, "storage.prefetch_batches", 0)
        check_int(self.max_concurrency, "storage.max_concurrency", 1, MAX_CONCURRENCY)
        check_int(self.retries, "storage.retries", 0, MAX_RETRIES)
        check_int(self.whole_shard_size, "storage.whole_shard_size", 0)
        check_int(self.coalesce_gap, "storage.coalesce_gap", 0)
        check_bool(self.trust_catalog, "storage.trust_catalog")
        for name in ("backoff", "stall_warning"):
            check_number(getattr(self, name), f"storage.{name}", 0, maximum=MAX_SECONDS)
        for name in ("timeout", "stall_timeout"):  # 0 would fail every request at once
            check_number(getattr(self, name), f"storage.{name}", 0, exclusive=True,
                         maximum=MAX_SECONDS)  # fmt: skip
        if self.cache_size and self.cache_size < self.block_size:
            raise ConfigError(
                f"storage.cache_size = {self.cache_size} must hold at least one block "
                f"(block_size = {self.block_size}) or be 0"
            )

    @property
    def cache_root(self) -> str:
        """The cache folder actually used."""
        return self.cache_dir or default_cache_dir()
