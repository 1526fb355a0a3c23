"""A source's piece plan (``vsl`` mode): its documents cut into power-of-two pieces
(:func:`streamload.plan.vsl.decompose`), built once per (data, lengths), cached on disk like
the packing plans and mapped (:mod:`streamload.streams.source_plan`).

Arrays: ``starts`` (int64, the stream offset of each piece, bucket after bucket, storage
order inside a bucket: 8 bytes per piece), ``offsets`` (int64 ``[buckets + 1]``) and the
counts ``documents`` and ``dropped_tokens``. The key names the files (as packing plans do),
``min_seq_len``, ``max_seq_len``, the split's token range and :data:`LAYOUT`; seed,
curriculum and ``tokens_per_batch`` are not inputs (they only order and group the pieces).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from streamload.catalog.sources import SourceCatalog
from streamload.config import DataConfig
from streamload.errors import ConfigError
from streamload.plan.vsl import PieceBuckets, bucket_lengths, decompose
from streamload.streams.source_plan import MappedArrays, files_description, load_source_plan
from streamload.util.index_cache import VSL

__all__ = ["LAYOUT", "load_piece_plan", "piece_plan_description"]

LAYOUT = "vsl-pieces-v1"
"""Names the decomposition rule and the arrays' layout (part of the cache key)."""


def piece_plan_description(
    config: DataConfig, catalog: SourceCatalog, span: tuple[int, int] | None = None
) -> dict[str, Any]:
    """Every input of a source's piece plan (its cache key)."""
    return {
        "kind": "vsl-plan",
        "layout": LAYOUT,
        "min_seq_len": config.sampling.min_seq_len,
        "max_seq_len": config.seq_len,
        **files_description(config, catalog),
    } | ({} if span is None else {"split_tokens": [int(span[0]), int(span[1])]})


def load_piece_plan(
    config: DataConfig,
    catalog: SourceCatalog,
    document_bounds: Callable[[], np.ndarray],
    span: tuple[int, int] | None = None,
) -> tuple[PieceBuckets, MappedArrays]:
    """The source's pieces: mapped from the cache, or cut from ``document_bounds()`` and
    cached. Returns the buckets and the arrays that travel to workers by path.

    Raises:
        ConfigError: an unusable explicit ``sampling.cache_dir``, or no document of the
            source is long enough for one piece of ``min_seq_len``.
    """
    low, top = int(config.sampling.min_seq_len or 0), config.seq_len

    def build() -> dict[str, np.ndarray]:
        pieces = decompose(document_bounds(), low, top)
        if pieces.starts.size == 0:
            raise ConfigError(
                f"source {catalog.config.name!r}: no document holds more than min_seq_len = "
                f"{low} tokens, so no piece can be cut; lower min_seq_len or add data"
            )
        return {
            "starts": pieces.starts,
            "offsets": pieces.offsets,
            "documents": np.array([pieces.documents], dtype=np.int64),
            "dropped_tokens": np.array([pieces.dropped_tokens], dtype=np.int64),
        }

    description = piece_plan_description(config, catalog, span)
    arrays = MappedArrays(*load_source_plan(config, catalog, description, build, VSL))
    return buckets_of(arrays, low, top), arrays


def buckets_of(arrays: MappedArrays, low: int, top: int) -> PieceBuckets:
    """The :class:`PieceBuckets` view of a plan's arrays (no copy)."""
    return PieceBuckets(
        lengths=bucket_lengths(low, top),
        starts=arrays["starts"],
        offsets=np.asarray(arrays["offsets"]),
        documents=int(arrays["documents"][0]),
        dropped_tokens=int(arrays["dropped_tokens"][0]),
    )
