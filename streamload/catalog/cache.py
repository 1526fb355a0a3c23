"""The described shards of a source, cached on local disk under a content key.

Describing a shard reads its header and validates its index (a Megatron ``.idx`` is read
whole, about 10 ns per document), so every start-up of every rank would read them all again,
and a local start-up would grow with the corpus. After the one listing a start-up needs
anyway, the source's shard descriptions are looked up under a key that covers everything they
depend on: every listed file's URL, size and version, the versions of the files beside them
(companions, sniffing), the source's format and the read options (dtype, tatm dtype,
vocabulary size). A remote object's version is its ETag or generation; a local file's is the
modification time its folder listing gives (``catalog/sources.py``). A replaced or rewritten
file has another version, hence another key, so a hit is exactly what describing again would
give; a restart, or another rank on the machine, reads no header at all.

Entries are JSON files ``<cache_dir>/catalog/<k[:2]>/<k>.json`` written to a temporary name
and renamed (no locks; two writers write equal bytes). Nothing is cached when a listed object
has no version (a same-size replacement could not be told apart), when the source tokenizes
on the fly (the tokenizer file's content is not in the key), when a shard was skipped (a
transient fault must not be remembered), or without a disk cache (``cache_size = 0``).
Entries are small (a few hundred bytes per shard) and never evicted; delete the folder to
reclaim them.

A ``storage.cache_dir`` that is a file (or lies below one) is a configuration mistake: a
:class:`~streamload.errors.ConfigError` naming it. A cache folder that cannot be written
(read-only, full) only costs later start-ups their header reads: entries already there are
read, and one warning per folder and process names it (as the disk cache of remote reads
does, docs/remote.md).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
import os
from collections.abc import Sequence
from typing import Any

from streamload.catalog.listing import Siblings
from streamload.errors import ConfigError
from streamload.formats.base import ListedFile, ReadOptions, ShardInfo
from streamload.util.files import write_atomic

__all__ = ["SCHEMA", "catalog_key", "check_cache_root", "load_catalog", "save_catalog"]

SCHEMA = "streamload-catalog-3"
"""Version of the key and the entry layout (change it when ShardInfo or describing changes;
2: Parquet row-group counts and null checks at describe, the source column in the key)."""

_FIELDS = [f.name for f in dataclasses.fields(ShardInfo) if f.name not in ("storage", "loss_mask")]
"""What an entry keeps: what describing gives (masks are found at every start-up, after it)."""
_LOG = logging.getLogger("streamload.remote")
_WARNED: set[str] = set()
"""Cache folders this process already warned it cannot write (one warning each)."""

Job = tuple[ListedFile, ReadOptions, Siblings]
"""A file to describe: as listed, its read options, and its folder's files and versions."""


def catalog_key(fmt: str, jobs: Sequence[Job]) -> str | None:
    """The content key of describing ``jobs`` with format ``fmt`` (``None``: not cacheable,
    see the module docstring)."""
    digest = hashlib.sha256(f"{SCHEMA}\0{fmt}\n".encode())
    folders: dict[int, str] = {}  # the files beside each shard, hashed once per folder
    for listed, options, siblings in jobs:
        if not listed.version or options.tokenizer is not None:
            return None
        folder = folders.get(id(siblings))
        if folder is None:
            text = json.dumps(sorted(siblings.versions.items()))
            folder = folders[id(siblings)] = hashlib.sha256(text.encode()).hexdigest()
        fields = (listed.path, listed.relpath, listed.size, listed.version, options.dtype,
                  options.meta_dtype, options.vocab_size, options.eos_token_id,
                  options.column, folder)  # fmt: skip
        digest.update(json.dumps(fields).encode() + b"\n")
    return digest.hexdigest()


def _path(root: str, key: str) -> str:
    return os.path.join(root, "catalog", key[:2], f"{key}.json")


def check_cache_root(root: str) -> None:
    """Raise when the catalog's folder cannot be a folder: ``root`` (or ``root/catalog``, or
    the nearest existing folder above them) is a file.

    Raises:
        ConfigError: naming ``storage.cache_dir`` and the file in the way.
    """
    probe = os.path.join(os.path.abspath(root), "catalog")
    while not os.path.lexists(probe) and os.path.dirname(probe) != probe:
        probe = os.path.dirname(probe)
    if os.path.lexists(probe) and not os.path.isdir(probe):
        raise ConfigError(
            f"storage.cache_dir = {root!r}: {probe} is a file; expected a folder (the disk "
            "cache of remote reads and of shard descriptions, docs/remote.md)"
        )


def load_catalog(root: str, key: str, storage: Any) -> list[ShardInfo] | None:
    """The shards cached under ``key`` (bound to ``storage``), or ``None`` (a miss, or an entry
    that does not parse: it is described again and rewritten).

    Raises:
        ConfigError: ``root`` is a file (:func:`check_cache_root`).
    """
    check_cache_root(root)
    try:
        with open(_path(root, key), encoding="utf-8") as fh:
            entry = json.load(fh)
        if entry["schema"] != SCHEMA:
            return None
        return [ShardInfo(**shard, storage=storage) for shard in entry["shards"]]
    except (OSError, ValueError, KeyError, TypeError):
        return None


def save_catalog(root: str, key: str, shards: Sequence[ShardInfo]) -> None:
    """Store ``shards`` under ``key`` (atomically); a cache that cannot be written only costs
    the next start-up its header reads."""
    entry = {
        "schema": SCHEMA,
        "shards": [{name: getattr(shard, name) for name in _FIELDS} for shard in shards],
    }
    path = _path(root, key)
    try:
        write_atomic(path, json.dumps(entry))
    except OSError as exc:
        if root not in _WARNED:
            _WARNED.add(root)
            _LOG.warning(
                "streamload: cannot cache shard descriptions in storage.cache_dir = %r (%s: "
                "%s); later start-ups read the headers again", root, path, exc.strerror or exc
            )  # fmt: skip
    except (TypeError, ValueError) as exc:  # a field JSON cannot hold: describe next time
        _LOG.debug("streamload: cannot cache the shard descriptions at %s: %s", path, exc)
