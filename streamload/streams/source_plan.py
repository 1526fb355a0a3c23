"""A source's plan built from its documents, cached on disk and mapped: the one loader of
``packed``/``padded`` packing plans (:mod:`streamload.modes.packed.plan_cache`) and ``vsl``
piece plans (:mod:`streamload.modes.vsl.plan_cache`).

The cache key names every input: :func:`files_description` (each token file's path, bytes,
tokens, dtype, format and listed versions, of it and of its index) plus what the caller
adds (lengths, rules). The folder is ``sampling.cache_dir``, else ``<storage cache
folder>/plans``; a default folder that cannot be written only costs a build per start-up
(with a warning), an explicit one is an error. A file listed without a version leaves the
plan uncached (a same-size replacement could not be told apart), with a warning. One process
per folder builds, the others wait and map its files (:mod:`streamload.util.index_cache`).
"""

from __future__ import annotations

import os
import warnings
from collections.abc import Callable
from typing import Any

import numpy as np

from streamload.catalog.sources import SourceCatalog
from streamload.config import DataConfig
from streamload.errors import ConfigError
from streamload.util.index_cache import CacheKind, load_or_build

__all__ = ["files_description", "load_source_plan"]

Arrays = dict[str, np.ndarray]


def files_description(config: DataConfig, catalog: SourceCatalog) -> dict[str, Any]:
    """The part of a plan's cache key that names the source's files, and the EOS that finds
    documents where some file has no document index (else ``None``): from the catalog's
    facts, computed once when the shards were described."""
    facts = catalog.shards.facts
    return {
        "eos_token_id": None if facts.indexed else config.eos_token_id,
        "source": catalog.config.name,
        "shards": len(catalog.shards),
        "files_sha256": facts.files_sha256,
    }


def load_source_plan(
    config: DataConfig,
    catalog: SourceCatalog,
    description: dict[str, Any],
    build: Callable[[], Arrays],
    kind: CacheKind,
) -> tuple[Arrays, dict[str, str] | None]:
    """The plan's arrays for ``description``: mapped from the cache, or built once by
    ``build()`` and cached; and the files they are mapped from (``None``: in memory).

    Raises:
        ConfigError: an explicit ``sampling.cache_dir`` is unusable; whatever ``build``
            raises about the data.
    """
    data_errors: list[Exception] = []  # errors of the data, not of the cache folder
    built: list[Arrays] = []  # a build the cache could not keep is not redone

    def guarded() -> Arrays:
        try:
            built.append(build())
            return built[-1]
        except Exception as exc:
            data_errors.append(exc)
            raise

    name = catalog.config.name
    unversioned = (
        []
        if catalog.shards.facts.versioned
        else [info.path for info in catalog.shards if not info.version]
    )
    if unversioned:
        warnings.warn(
            f"streamload: {kind.what} of source {name!r} is not cached: {unversioned[0]} has "
            "no version in its listing (no ETag, generation or modification time); it is "
            "built at every start-up",
            stacklevel=5,
        )
        return guarded(), None
    folder = config.sampling.cache_dir
    if folder is not None:
        return load_or_build(folder, description, guarded, kind, False)
    folder = os.path.join(config.storage.cache_root, "plans")
    try:
        return load_or_build(folder, description, guarded, kind, False)
    except ConfigError as exc:
        if data_errors:
            raise
        warnings.warn(
            f"streamload: {kind.what} of source {name!r} is not cached ({exc}); it is built "
            "at every start-up. Set sampling.cache_dir to a writable folder",
            stacklevel=5,
        )
        return (built[-1] if built else guarded()), None


class MappedArrays:
    """A plan's arrays that travel to process workers as the paths of their cached files
    (each worker maps the same pages), or pickled whole when built in memory.

    Args:
        arrays: The arrays by name (memory maps when cached).
        files: The files they were mapped from (``None``: built in memory).
    """

    def __init__(self, arrays: Arrays, files: dict[str, str] | None) -> None:
        self.arrays = {name: np.asarray(array) for name, array in arrays.items()}
        self.files = files

    def __getitem__(self, name: str) -> np.ndarray:
        return self.arrays[name]

    def __getstate__(self) -> dict[str, Any]:
        if self.files is None:
            return {"arrays": self.arrays, "files": None}
        return {"arrays": None, "files": self.files}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.files = state["files"]
        if self.files is None:
            self.arrays = state["arrays"]
            return
        self.arrays = {
            name: np.asarray(np.load(path, mmap_mode="r", allow_pickle=False))
            for name, path in self.files.items()
        }
