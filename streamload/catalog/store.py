"""The catalog cache: a source's described shards, built by one process, mapped by all.

Describing a shard reads its header and validates its index, and listing a folder locally
stats every file in it; at 10⁵ shards on 10³ ranks that is 10⁸ metadata operations per job
start. So a source's description is kept in the verified array cache
(:mod:`streamload.util.index_cache`, kind :data:`CATALOG`) under a key of the source's
configuration alone (its paths made absolute, format, dtype, columns, masks, storage options
hashed, vocabulary size and EOS id): the first process to start builds it behind a lock
file, every other process (other ranks on the machine, or on every machine when the folder is
shared, and every worker) maps its arrays: the token counts per shard, the records (one JSON
per shard, decoded only when the shard is opened or printed) and a header (the data
fingerprint, dtypes, formats, and what was listed).

Before a mapped catalog is used, the data it describes is checked to be the same, at the
cost of one listing per folder and none per file (:mod:`streamload.catalog.identity`); with
``storage.trust_catalog = true`` not even that (for a corpus known not to change: a file
rewritten in place is still caught when it is first opened). A catalog that no longer
matches is described again, after a warning that names what changed; one whose files fail
their size or header check is rebuilt too (the cache's own checks). Nothing is cached when
the source tokenizes on the fly, when a remote shard was skipped under ``on_error = "skip"``,
or with ``storage.cache_size = 0``.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
import os
from collections.abc import Callable
from typing import Any

import numpy as np

from streamload.catalog.identity import describe_change, folder_identity, glob_identity
from streamload.catalog.table import (
    RECORD_FIELDS,
    ShardTable,
    TableFacts,
    documents_of,
    record_of,
)
from streamload.config import SourceConfig
from streamload.config.storage import StorageConfig
from streamload.errors import ConfigError
from streamload.formats.arrow.masks import MASK_COLUMNS
from streamload.formats.base import ShardInfo
from streamload.util.index_cache import CacheKind, CacheUnwritable, load_or_build

__all__ = ["CATALOG", "SCHEMA", "Identity", "catalog_description", "cached_table"]

SCHEMA = "streamload-catalog-6"
"""Version of the entry layout (4: one entry per source configuration, checked by listings;
5: the files digest and indexed flag in the facts; 6: document counts per shard)."""
CATALOG = CacheKind("catalog", "the shard catalog")
_LOG = logging.getLogger("streamload.catalog")
_WARNED: set[str] = set()
"""Cache folders this process already warned it cannot write (one warning each)."""


@dataclasses.dataclass
class Identity:
    """What a description listed, to tell later whether the data changed.

    Attributes:
        folders: folder → (its stamp, listing digest), as
            :func:`~streamload.catalog.identity.folder_identity` gives them.
        listings: folder → the listing's (name, size, version) rows (to name a change).
        globs: glob pattern → digest of its matches.
    """

    folders: dict[str, tuple[Any, str]] = dataclasses.field(default_factory=dict)
    listings: dict[str, list[tuple[str, int, str]]] = dataclasses.field(default_factory=dict)
    globs: dict[str, str] = dataclasses.field(default_factory=dict)

    def add_folder(self, fs: Any, folder: str) -> None:
        """Record a folder no listing of the description covered (listed now)."""
        if folder not in self.folders:
            self.folders[folder], self.listings[folder] = folder_identity(fs, folder)


class NotCached(Exception):
    """A description that must not be cached (a skipped shard): carries it out of the build."""

    def __init__(self, result: Any) -> None:
        super().__init__("not cached")
        self.result = result


def catalog_description(
    fs: Any, source: SourceConfig, entries: list[str], options: dict[str, Any]
) -> dict[str, Any]:
    """Every input of a source's description but the files themselves (the cache key)."""
    secrets = json.dumps(source.storage_options, sort_keys=True, default=str)
    protocol = fs.protocol if isinstance(fs.protocol, str) else fs.protocol[0]
    return {
        "schema": SCHEMA,
        "protocol": protocol,
        "paths": entries,
        "format": source.format.value,
        "dtype": source.dtype,
        "label_masks": list(source.mask_paths) if source.mask_paths else source.label_masks,
        "columns": [source.column, source.mask_column, source.id_column],
        # the columns found as masks by name: a cached table has its masks attached, so an
        # entry made before a name was added would keep that file unmasked
        "mask_names": list(MASK_COLUMNS),
        "eos": source.eos_token_id,
        "storage_options": hashlib.sha256(secrets.encode()).hexdigest(),
        "options": options,
    }


def cached_table(
    fs: Any,
    source: SourceConfig,
    storage: StorageConfig,
    description: dict[str, Any],
    build: Callable[[], tuple[tuple[ShardInfo, ...], Identity]],
    handle: Any,
) -> ShardTable:
    """The source's shards from the catalog cache, or described by ``build`` (and cached).

    Raises:
        NotCached: ``build`` raised it (its description is to be used uncached).
        ConfigError: ``storage.cache_dir`` cannot hold the cache.
    """

    built: list[tuple[ShardInfo, ...]] = []

    def arrays() -> dict[str, np.ndarray]:
        shards, identity = build()
        built.append(shards)
        return _arrays(shards, identity)

    def check(found: dict[str, np.ndarray]) -> str | None:
        try:
            _facts(found)
        except (ValueError, TypeError, KeyError) as exc:  # sound files, torn or edited JSON
            return f"its header does not parse ({exc})"
        return None if storage.trust_catalog else stale_reason(fs, found)

    root = catalog_folder(storage)
    try:
        found, files = load_or_build(root, description, arrays, CATALOG, False, check)
    except CacheUnwritable as exc:
        _warn_unwritable(storage, exc)
        return ShardTable.of(built[-1] if built else build()[0])
    assert files is not None  # a cache folder was given
    return _table(found, files, handle)


def catalog_folder(storage: StorageConfig) -> str:
    """Where catalogs are cached: ``<cache_dir>/catalog``.

    Raises:
        ConfigError: ``storage.cache_dir`` (or the folder above ``catalog``) is a file.
    """
    root = storage.cache_root
    probe = os.path.join(os.path.abspath(root), "catalog")
    while not os.path.lexists(probe) and os.path.dirname(probe) != probe:
        probe = os.path.dirname(probe)
    if os.path.lexists(probe) and not os.path.isdir(probe):
        raise ConfigError(
            f"storage.cache_dir = {root!r}: {probe} is a file; expected a folder (the disk "
            "cache of remote reads and of shard descriptions, docs/remote.md)"
        )
    return os.path.join(root, "catalog")


def _warn_unwritable(storage: StorageConfig, exc: Exception) -> None:
    root = storage.cache_root
    if root not in _WARNED:
        _WARNED.add(root)
        logging.getLogger("streamload.remote").warning(
            "streamload: cannot cache shard descriptions in storage.cache_dir = %r (%s); later "
            "start-ups describe the shards again", root, exc
        )  # fmt: skip


def _arrays(shards: tuple[ShardInfo, ...], identity: Identity) -> dict[str, np.ndarray]:
    records = [record_of(info) for info in shards]
    facts = TableFacts.of(shards)
    header = {
        "facts": dataclasses.asdict(facts),
        "folders": sorted([k, *v] for k, v in identity.folders.items()),
        "globs": sorted(identity.globs.items()),
    }
    return {
        "header": _bytes(json.dumps(header)),
        "listings": _bytes(json.dumps(identity.listings)),
        "num_tokens": np.array([s.num_tokens for s in shards], dtype=np.int64),
        "num_documents": np.array([documents_of(s) for s in shards], dtype=np.int64),
        "record_ends": np.cumsum([len(r) for r in records], dtype=np.int64),
        "records": _bytes(b"".join(records)),
    }


def _bytes(data: str | bytes) -> np.ndarray:
    return np.frombuffer(data.encode() if isinstance(data, str) else data, dtype=np.uint8)


def _header(found: dict[str, np.ndarray]) -> dict[str, Any]:
    return dict(json.loads(found["header"].tobytes()))


def stale_reason(fs: Any, found: dict[str, np.ndarray]) -> str | None:
    """What changed since a cached catalog was built (``None``: nothing): one listing per
    folder it recorded, one glob per pattern."""
    header = _header(found)
    for folder, stamp, digest in header["folders"]:
        try:
            now, entries = folder_identity(fs, folder)
        except Exception as exc:  # any failure to list: not known to be the same (describing
            return f"{folder} cannot be listed ({exc})"  # again retries, and names a lasting one
        if list(now) != [stamp, digest]:
            before = json.loads(found["listings"].tobytes()).get(folder, [])
            return describe_change(folder, before, entries, stamp is not None)
    for pattern, digest in header["globs"]:
        try:
            now_digest = glob_identity(fs, fs._strip_protocol(pattern))
        except Exception as exc:  # as above
            return f"{pattern} cannot be listed ({exc})"
        if now_digest != digest:
            return f"the matches of {pattern} changed"
    return None


def _facts(found: dict[str, np.ndarray]) -> TableFacts:
    fields: dict[str, Any] = {
        k: tuple(v) if isinstance(v, list) else v for k, v in _header(found)["facts"].items()
    }
    return TableFacts(**fields)


def _table(found: dict[str, np.ndarray], files: dict[str, str], handle: Any) -> ShardTable:
    facts = _facts(found)
    ends, blob = found["record_ends"], found["records"]

    def decode(index: int) -> ShardInfo:
        begin = int(ends[index - 1]) if index else 0
        fields = json.loads(blob[begin : int(ends[index])].tobytes())
        return ShardInfo(**{k: fields[k] for k in RECORD_FIELDS}, storage=handle)

    origin = (_mapped_again, (files, handle))
    return ShardTable(
        found["num_tokens"], facts, decode, None, origin, lambda: forget(files),
        found["num_documents"],
    )  # fmt: skip


def _mapped_again(files: dict[str, str], handle: Any) -> ShardTable:
    """The table a process mapped, mapped again in another (a worker process)."""
    found = {name: np.load(path, mmap_mode="r", allow_pickle=False) for name, path in files.items()}
    return _table(found, files, handle)


def forget(files: dict[str, str]) -> None:
    """Remove a catalog's entry from view (its description), so the next start builds it."""
    some = next(iter(files.values()))
    description = some.rsplit(f"-{CATALOG.prefix}-", 1)[0] + f"-{CATALOG.prefix}-description.json"
    try:
        os.unlink(description)
    except OSError as exc:
        _LOG.debug("streamload: cannot remove %s: %s", description, exc)
