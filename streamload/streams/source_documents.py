"""Where a source's documents are: per shard when a chunk needs them, or all at once.

Two readers, one rule (:func:`streamload.formats.documents.document_bounds`: the format's
document index, else ``eos_token_id``, what ``streamload docs`` returns):

* :class:`ShardDocuments` (concat mode's packing masks): the document bounds of the shards a
  chunk's windows touch, and of no other shard, read when the chunk needs them. A shard's
  bounds come from the format's index once per job: the first process to need them writes
  them to the verified index cache (:mod:`streamload.util.index_cache`, one builder, the
  others wait), and every rank and worker maps that file read-only. Per process, the bounds
  of recently used shards are kept, as many as the open shards (:data:`MAX_OPEN_SHARDS`).
* :func:`source_document_bounds` (the modes that plan whole documents: ``packed``,
  ``padded``, ``vsl``, when their plan is not cached yet): every document of the source,
  built once into the same cache and mapped.

Both are keyed by the shards' identity (path, bytes, tokens, dtype, format and the listed
versions of the token file and its companions, as the packing plans are), so a changed
shard is read again. Trace, two Dolma shards of 3 and 4 tokens with documents ``[0, 2, 3)``
and ``[0, 1, 4)``: a window at stream offset 1 of width 4 touches both shards and gets
document starts ``[F, T, T, T]`` (token 2 of the first shard, tokens 0 and 1 of the
second).
"""

from __future__ import annotations

import os
import threading
import warnings
from collections import OrderedDict
from collections.abc import Callable
from typing import Any

import numpy as np

from streamload.catalog.sources import SourceCatalog
from streamload.catalog.table import shard_identity
from streamload.config import DataConfig
from streamload.errors import ConfigError, FormatError, RemoteReadError
from streamload.formats.documents import document_bounds
from streamload.formats.registry import get_format
from streamload.ops.masks import starts_from_offsets
from streamload.streams.shard_set import MAX_OPEN_SHARDS, ShardSet
from streamload.streams.source_plan import files_description
from streamload.util.index_cache import CacheKind, CacheUnwritable, cache_key, load_or_build

__all__ = [
    "CACHED_TOKENS",
    "DOCUMENTS",
    "ShardDocuments",
    "cached_bounds",
    "document_folder",
    "source_document_bounds",
]

DOCUMENTS = CacheKind("documents", "the document bounds")
"""The cached document bounds (of one shard, or of a whole source)."""
CACHED_TOKENS = 1 << 20
"""Shards of fewer tokens are read from their format at each use, not cached: their index is
small (a thousand documents or so), so a cache file would cost more than it saves, and a
corpus of many small shards would fill the cache folder with as many files."""


def document_folder(config: DataConfig) -> str:
    """The folder of cached document bounds: ``documents`` in the storage cache, beside the
    shard descriptions (per machine; the one writer per folder is per node when it is
    node-local)."""
    return os.path.join(config.storage.cache_root, "documents")


def cached_bounds(
    folder: str | None, description: dict[str, Any], build: Callable[[], np.ndarray], what: str
) -> tuple[np.ndarray, str | None]:
    """The bounds ``description`` names: mapped from ``folder``, or built once by ``build()``
    and cached there; and the folder to use next time (``None`` once it proved unwritable:
    then the bounds are built in memory, with one warning naming ``what``)."""
    if folder is None:
        return build(), None
    built: list[np.ndarray] = []  # a build the cache could not keep is not redone

    def guarded() -> dict[str, np.ndarray]:
        built.append(build())
        return {"bounds": built[-1]}

    # Files in a folder of their own per key prefix: a build lists its folder (stale temps).
    key = cache_key(description)
    try:
        arrays, _ = load_or_build(
            os.path.join(folder, key[:2]), description, guarded, DOCUMENTS, False
        )
    except CacheUnwritable as exc:  # the folder's (the data's errors are other ConfigErrors)
        warnings.warn(
            f"streamload: {DOCUMENTS.what} of {what} are not cached ({exc}); they are read "
            "again at every start-up",
            stacklevel=3,
        )
        return (built[-1] if built else build()), None
    return arrays["bounds"], folder


class ShardDocuments:
    """The document starts of windows from the indexes of the shards they touch.

    Args:
        config: The data config (its ``storage.cache_dir`` holds the cached bounds).
        shards: The source's shards (opened lazily; every one's format records documents).

    Pickling drops the kept bounds, so it travels cheaply into worker processes.
    """

    def __init__(self, config: DataConfig, shards: ShardSet) -> None:
        self.shards = shards
        self.folder: str | None = document_folder(config)
        self._kept: OrderedDict[int, np.ndarray] = OrderedDict()
        self._lock = threading.Lock()
        self._pid = os.getpid()  # a forked child gets a fresh lock (its parent's may be held)

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        state["_kept"] = OrderedDict()
        del state["_lock"]
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._lock = threading.Lock()
        self._pid = os.getpid()

    def bounds(self, sid: int) -> np.ndarray:
        """Token offsets (inside the shard, int64 ``[d + 1]``) of shard ``sid``'s documents.

        Raises:
            FormatError: the shard's format records no documents.
            RemoteReadError: its index cannot be read.
        """
        if self._pid != os.getpid():  # forked: the maps are valid, a lock may be held
            self._lock, self._pid = threading.Lock(), os.getpid()
        with self._lock:
            kept = self._kept.get(sid)
            if kept is not None:
                self._kept.move_to_end(sid)
                return kept
        found = self._load(sid)
        with self._lock:
            self._kept[sid] = found
            self._kept.move_to_end(sid)
            if len(self._kept) > MAX_OPEN_SHARDS:
                self._kept.popitem(last=False)
        return found

    def _load(self, sid: int) -> np.ndarray:
        info = self.shards.shards[sid]
        if info.num_tokens < CACHED_TOKENS or not info.version:
            return self._read(sid)  # unversioned: a same-size replacement looks the same
        description = {"shard": shard_identity(info)}
        found, self.folder = cached_bounds(
            self.folder, description, lambda: self._read(sid), info.path
        )
        return found

    def _read(self, sid: int) -> np.ndarray:
        found = self.shards.shard(sid).document_bounds()
        if found is None:
            raise FormatError(f"{self.shards.shards[sid].path}: format has no document index")
        return np.asarray(found, dtype=np.int64)

    def starts(self, starts: np.ndarray, width: int) -> np.ndarray:
        """Document starts ``[n, width]`` of the windows at stream offsets ``starts``.

        ``out[i, t]`` is True when stream token ``starts[i] + t`` (t > 0) begins a document;
        a shard's first token always does. Work is per window and per shard it touches (a
        ``searchsorted`` in that shard's bounds), never proportional to the source's shards
        or documents. Rows of a shard whose index cannot be read are skipped like unreadable
        tokens (:meth:`ShardSet.take_skipped`; raises unless ``on_error = "skip"``).
        """
        offsets = self.shards.offsets
        out = np.zeros((starts.shape[0], width), dtype=bool)
        first = np.searchsorted(offsets, starts, side="right") - 1
        last = np.searchsorted(offsets, starts + width - 1, side="right") - 1
        spans = [
            np.arange(f + 1, t)
            for f, t in zip(first.tolist(), last.tolist(), strict=True)
            if t - f > 1
        ]
        for sid in np.unique(np.concatenate([first, last, *spans])).tolist():
            rows = np.flatnonzero((first <= sid) & (last >= sid))
            try:
                bounds = self.bounds(sid)
            except RemoteReadError as exc:  # an unreadable index: the rows are skipped
                self.shards._skip_rows(sid, exc, starts[rows])
                continue
            out[rows] |= starts_from_offsets(starts[rows] - offsets[sid], width, bounds)
        return out


def source_document_bounds(
    config: DataConfig,
    catalog: SourceCatalog,
    shards: ShardSet,
    span: tuple[int, int] | None,
) -> np.ndarray:
    """int64 ``[d + 1]`` stream offsets of the source's documents (a shard's end always ends
    a document); with ``span`` (a split's token range, both ends document starts) those of
    the documents inside it. Read from the shards once per job (a source whose files all
    have listed versions), then mapped from the cache (:func:`document_folder`).

    Raises:
        ConfigError: a shard's format records no documents and ``eos_token_id`` is unset.
    """
    eos = config.eos_token_id
    formats = catalog.shards.facts.formats
    if eos is None and not all(get_format(name).has_documents for name in formats):
        raise ConfigError(
            f"source {catalog.config.name!r}: {config.sampling.mode_name} mode needs "
            "documents; its format records none, so set eos_token_id"
        )

    def build() -> np.ndarray:
        parts = [np.zeros(1, dtype=np.int64)]
        for index in range(len(catalog.shards)):
            found = np.asarray(document_bounds(shards.shard(index), eos), dtype=np.int64)
            parts.append(found[1:] + shards.offsets[index])
        return np.concatenate(parts)

    if catalog.shards.facts.versioned:
        description = {"source": files_description(config, catalog)}
        what = f"source {catalog.config.name!r}"
        bounds, _ = cached_bounds(document_folder(config), description, build, what)
    else:  # a same-size replacement could not be told apart (the plan says so, uncached)
        bounds = build()
    if span is None:
        return bounds
    lo, hi = span
    return bounds[np.searchsorted(bounds, lo, "left") : np.searchsorted(bounds, hi, "right")]
