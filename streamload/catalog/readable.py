"""Leave out, under ``on_error = "skip"``, the remote shards whose documents stay unreadable.

The whole-document modes (``packed``, ``padded``) build their plan at start-up from every
shard's documents: its document index, or for a format without one its tokens (the documents
end at ``eos_token_id``). Describing a shard read only its header, so a shard can pass
description and still be unreadable when the plan is built. docs/remote.md promises that a
shard unreadable at start-up is left out, warned about and counted (``skipped_shards``), and
that the fingerprint covers only the shards kept; a plan build that failed on an unreadable
shard calls this to find the shards to keep, then builds (and caches) the plan of those
(issue 36: an unreadable LitData chunk was a ``RemoteReadError`` there). A plan found in the
cache reads no document, so a warm start never calls it.

The documents are read through the storage's store, so the second build reads them again
from its block cache, not from the network.
"""

from __future__ import annotations

import dataclasses
import warnings

from streamload.catalog.sources import SourceCatalog
from streamload.catalog.table import ShardTable
from streamload.config.source import OnError
from streamload.errors import ConfigError, RemoteReadError
from streamload.formats.base import ShardInfo
from streamload.formats.documents import document_bounds
from streamload.formats.registry import open_shard

__all__ = ["without_unreadable_documents"]


def without_unreadable_documents(catalog: SourceCatalog, eos_token_id: int | None) -> SourceCatalog:
    """``catalog`` without its shards whose documents stay unreadable (each warned about and
    counted in ``skipped_shards``), when its source says ``on_error = "skip"``; otherwise
    ``catalog`` itself, read nothing.

    Args:
        catalog: A described source.
        eos_token_id: The EOS that ends documents where a format records none.

    Raises:
        ConfigError: every shard was left out.
        RemoteReadError: a shard stays unreadable and the source says ``on_error = "raise"``
            (then raised by the plan build itself, not here).
    """
    if catalog.config.on_error is not OnError.SKIP:
        return catalog
    kept: list[ShardInfo] = []
    skipped = list(catalog.skipped)
    for info in catalog.shards:
        if info.storage is None:  # local: an unreadable local file is no network fault
            kept.append(info)
            continue
        try:
            document_bounds(open_shard(info), eos_token_id)
        except RemoteReadError as exc:
            skipped.append((info.path, str(exc)))
            warnings.warn(
                f"source {catalog.config.name!r}: skipping {info.path} (on_error = 'skip'): "
                f"its documents stay unreadable: {exc}",
                stacklevel=2,
            )
            stats = info.storage.store().stats
            stats.add("skipped_shards")
            stats.skipped(info.path, str(exc))
            continue
        kept.append(info)
    if len(kept) == len(catalog.shards):
        return catalog
    if not kept:
        raise ConfigError(f"source {catalog.config.name!r}: every shard was unreadable and skipped")
    return dataclasses.replace(catalog, shards=ShardTable.of(kept), skipped=tuple(skipped))
