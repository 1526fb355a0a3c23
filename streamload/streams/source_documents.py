"""Where a source's documents are: stream offsets of every document, shard by shard.

From each format's document index, else from ``eos_token_id`` (what ``streamload docs``
returns, :func:`streamload.formats.documents.document_bounds`); with a split, only the
documents inside the split's token span. The modes that plan whole documents (``packed``,
``padded``, ``vsl``) build their plans from these bounds.
"""

from __future__ import annotations

import numpy as np

from streamload.catalog.sources import SourceCatalog
from streamload.config import DataConfig
from streamload.errors import ConfigError
from streamload.formats.documents import document_bounds
from streamload.formats.registry import get_format
from streamload.streams.shard_set import ShardSet

__all__ = ["source_document_bounds"]


def source_document_bounds(
    config: DataConfig,
    catalog: SourceCatalog,
    shards: ShardSet,
    span: tuple[int, int] | None,
) -> np.ndarray:
    """int64 ``[d + 1]`` stream offsets of the source's documents (a shard's end always ends
    a document); with ``span`` (a split's token range, both ends document starts) those of
    the documents inside it.

    Raises:
        ConfigError: a shard's format records no documents and ``eos_token_id`` is unset.
    """
    eos = config.eos_token_id
    if eos is None and not all(get_format(s.format).has_documents for s in catalog.shards):
        raise ConfigError(
            f"source {catalog.config.name!r}: {config.sampling.mode_name} mode needs "
            "documents; its format records none, so set eos_token_id"
        )
    parts = [np.zeros(1, dtype=np.int64)]
    for index in range(len(catalog.shards)):
        bounds = np.asarray(document_bounds(shards.shard(index), eos), dtype=np.int64)
        parts.append(bounds[1:] + shards.offsets[index])
    bounds = np.concatenate(parts)
    if span is None:
        return bounds
    lo, hi = span
    return bounds[np.searchsorted(bounds, lo, "left") : np.searchsorted(bounds, hi, "right")]
