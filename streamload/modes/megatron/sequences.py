"""A source's sequences (GPTDataset's "documents") as one table, built once and mapped.

Megatron mode reads every sample as pieces of sequences, so it needs, per sequence of the
source, where it starts in the source's token stream and how long it is. Reading them from
every shard's document index costs each process O(sequences) of time and memory at every
start (at 10^7 sequences: ~0.4 GiB and ~1 s per rank and worker). The table is built once
from the shards' indices, cached on disk like the packing plans
(:mod:`streamload.streams.source_plan`: one builder per folder, the others wait and map),
and mapped read-only by every rank and worker; a warm start reads O(1) bytes of it.

Arrays (``S`` sequences):

* ``starts`` (int64 ``[S]``): stream offset of each sequence's first token;
* ``cumulative`` (int64 ``[S + 1]``): tokens of the sequences before each one, so a
  sequence's length is ``cumulative[i + 1] - cumulative[i]`` and a range's tokens one
  subtraction;
* ``longest`` (int64 ``[1]``): the longest sequence (megatron-core's sample index dtype);
* ``lengths_sha256`` (uint8 ``[32]``): sha256 of the int32 lengths, what the Megatron index
  cache key names (so indices cached before this table existed are still found).

Example (two shards of 7 and 5 tokens, sequences ``[3, 4]`` and ``[5]``):

>>> arrays = table_arrays([np.array([0, 3, 7]), np.array([0, 5])], np.array([0, 7, 12]), "s")
>>> arrays["starts"].tolist(), arrays["cumulative"].tolist(), int(arrays["longest"][0])
([0, 3, 7], [0, 3, 7, 12], 5)

The key names every token file and its index by path, size and listed version
(:func:`~streamload.streams.source_plan.files_description`) and :data:`LAYOUT`. The folder is
``sampling.cache_dir``, else ``<storage cache folder>/plans``; a folder that cannot be
written (a read-only copy of megatron-core's cache) falls back to the other, and to a build
in memory (with a warning) when neither can hold it.
"""

from __future__ import annotations

import hashlib
import os
import warnings
from collections.abc import Callable, Sequence

import numpy as np

from streamload.catalog.sources import SourceCatalog
from streamload.config import DataConfig
from streamload.errors import ConfigError, FormatError
from streamload.streams.source_plan import MappedArrays, files_description
from streamload.util.index_cache import CacheKind, load_or_build

__all__ = ["LAYOUT", "SEQUENCES", "SequenceTable", "load_sequence_table", "table_arrays"]

LAYOUT = "megatron-sequences-v1"
"""Names the table's arrays and how they are derived (part of the cache key)."""
SEQUENCES = CacheKind("megatron-sequences", "the Megatron sequence table")
_INT32_MAX = int(np.iinfo(np.int32).max)

Arrays = dict[str, np.ndarray]


def table_arrays(bounds: Sequence[np.ndarray], offsets: np.ndarray, source: str) -> Arrays:
    """The table of a source from its shards' sequence bounds.

    Args:
        bounds: Per shard, the token offsets of its ``S_i`` sequences inside the shard
            (int64 ``[S_i + 1]``; sequence ``k`` is ``[bounds[k], bounds[k + 1])``).
        offsets: Stream offset of each shard (int64, shards + 1).
        source: The source's name, for errors.

    Raises:
        FormatError: a sequence holds more than ``2**31 - 1`` tokens (megatron-core's int32).
    """
    starts = [b[:-1] + offsets[i] for i, b in enumerate(bounds)]
    lengths = np.concatenate([np.diff(b) for b in bounds]) if bounds else np.zeros(0, np.int64)
    longest = int(lengths.max()) if lengths.size else 0
    if longest > _INT32_MAX:
        raise FormatError(f"source {source!r}: a sequence holds more than 2**31 tokens")
    cumulative = np.zeros(lengths.size + 1, dtype=np.int64)
    np.cumsum(lengths, out=cumulative[1:])
    digest = hashlib.sha256(lengths.astype(np.int32).tobytes()).digest()
    return {
        "starts": np.concatenate(starts) if starts else np.zeros(0, np.int64),
        "cumulative": cumulative,
        "longest": np.array([longest], dtype=np.int64),
        "lengths_sha256": np.frombuffer(digest, dtype=np.uint8).copy(),
    }


class SequenceTable:
    """The mapped table of one source (see the module docstring); travels to process
    workers as the paths of its files (each maps the same pages), or whole when built in
    memory.

    Args:
        arrays: The table's arrays and the files they are mapped from.
    """

    def __init__(self, arrays: MappedArrays) -> None:
        self.arrays = arrays

    @property
    def starts(self) -> np.ndarray:
        """int64 ``[S]``: stream offset of each sequence (a mapped view)."""
        return self.arrays["starts"]

    @property
    def count(self) -> int:
        """``S``, the sequences of the source (megatron's ``num_elements``)."""
        return int(self.arrays["starts"].shape[0])

    @property
    def longest(self) -> int:
        """Tokens of the longest sequence."""
        return int(self.arrays["longest"][0])

    @property
    def lengths_sha256(self) -> str:
        """sha256 hex of the int32 lengths."""
        return bytes(np.asarray(self.arrays["lengths_sha256"])).hex()

    @property
    def files(self) -> dict[str, str] | None:
        """The files the arrays are mapped from (``None``: built in memory)."""
        return self.arrays.files

    def lengths(self, ids: np.ndarray) -> np.ndarray:
        """int64 lengths of sequences ``ids`` (any shape)."""
        cumulative = self.arrays["cumulative"]
        return cumulative[ids + 1] - cumulative[ids]

    def tokens(self, begin: int, end: int) -> int:
        """Tokens of sequences ``[begin, end)`` (O(1))."""
        cumulative = self.arrays["cumulative"]
        return int(cumulative[end]) - int(cumulative[begin])

    def all_lengths(self) -> np.ndarray:
        """int32 ``[S]`` lengths of every sequence: a new array, for building indices."""
        return np.diff(self.arrays["cumulative"]).astype(np.int32)


def load_sequence_table(
    config: DataConfig, catalog: SourceCatalog, build: Callable[[], Arrays]
) -> SequenceTable:
    """The source's table: mapped from the cache, or built once by ``build()`` and cached.

    Raises:
        ConfigError, FormatError: whatever ``build`` raises about the data.
    """
    description = {"kind": "megatron-sequences", "layout": LAYOUT}
    description |= files_description(config, catalog)
    name = catalog.config.name
    built: list[Arrays] = []
    data_errors: list[Exception] = []  # errors of the data, not of a cache folder

    def once() -> Arrays:  # a build a folder could not keep is not redone for the next
        if not built:
            try:
                built.append(build())
            except Exception as exc:
                data_errors.append(exc)
                raise
        return built[0]

    if not catalog.shards.facts.versioned:
        first = next(info.path for info in catalog.shards if not info.version)
        why = f"{first} has no version in its listing (no ETag, generation or mtime)"
        return _in_memory(name, why, once())
    problems = []
    for folder in _folders(config):
        try:
            found = load_or_build(folder, description, once, SEQUENCES, False)
        except ConfigError as exc:
            if data_errors:
                raise
            problems.append(str(exc))  # unusable folder (read-only, a file): the next one
            continue
        return SequenceTable(MappedArrays(*found))
    return _in_memory(name, "; ".join(problems), once())


def _folders(config: DataConfig) -> list[str]:
    """``sampling.cache_dir`` (megatron-core's cache, maybe read-only), then the default."""
    default = os.path.join(config.storage.cache_root, "plans")
    explicit = config.sampling.cache_dir
    return [explicit, default] if explicit is not None and explicit != default else [default]


def _in_memory(name: str, why: str, arrays: Arrays) -> SequenceTable:
    warnings.warn(
        f"streamload: {SEQUENCES.what} of source {name!r} is not cached ({why}); every "
        "process builds it at start-up. Set sampling.cache_dir to a writable folder",
        stacklevel=5,
    )
    return SequenceTable(MappedArrays(arrays, None))
