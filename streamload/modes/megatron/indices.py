"""Where a Megatron stream's indices come from: megatron-core's cache, ours, or a build.

In this order: megatron-core's own cached files of every dataset
(:mod:`streamload.modes.megatron.core_cache`; the blend is then rebuilt, which is fast), else
our cache (:mod:`streamload.util.index_cache`, built once per job), else built here.

Before anything is built, the size of the indices is computed from the layout alone
(:func:`~streamload.plan.megatron_layout.megatron_index_size`, O(1) beyond a sum of the
sequence lengths) and the build is refused with a :class:`~streamload.errors.ConfigError` when
its peak memory exceeds this machine's memory (physical memory, or a smaller cgroup limit), or
when the arrays exceed the free space of ``sampling.cache_dir``. A valid cache is read without
this check: mapped files need no memory up front.

The arrays come flat: ``ds{d}_document_index``, ``ds{d}_sample_index`` and
``ds{d}_shuffle_index`` per dataset ``d``, and ``dataset_index`` and ``dataset_sample_index``
for a blend.
"""

from __future__ import annotations

import contextlib
import os
import shutil
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from streamload.config import DataConfig
from streamload.errors import ConfigError
from streamload.modes.megatron.core_cache import find_megatron_gpt_cache
from streamload.modes.megatron.source import MegatronSource
from streamload.plan.megatron import GPTIndices, gpt_index_dtypes, split_matrix
from streamload.plan.megatron_layout import (
    IndexSize,
    MegatronIndices,
    MegatronLayout,
    build_blend,
    build_megatron_indices,
    megatron_index_size,
    split_index_size,
)
from streamload.util.index_cache import load_or_build

__all__ = ["ALGORITHM", "GPT_FIELDS", "check_room", "index_description", "load_indices"]

ALGORITHM = "megatron-core-0.16.1"
"""The index algorithms reproduced (part of the fingerprint and of the cache key)."""
GPT_FIELDS = GPTIndices._fields
_CGROUP_LIMITS = ("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes")

Arrays = dict[str, np.ndarray]


def load_indices(
    config: DataConfig, sources: Sequence[MegatronSource], layout: MegatronLayout
) -> tuple[Arrays, dict[str, str] | None]:
    """Every index array of the layout, and the files they are mapped from (``None``: built
    in memory, no ``cache_dir``).

    Raises:
        ConfigError: the indices would not fit this machine, or ``cache_dir`` is unusable.
    """
    found = [_megatron_core(config, sources, layout, d) for d in range(len(sources))]
    if all(f is not None for f in found):
        arrays: Arrays = {}
        files: dict[str, str] = {}
        for d, (gpt, paths) in enumerate(f for f in found if f is not None):
            arrays |= {f"ds{d}_{k}": v for k, v in gpt.items()}
            files |= {f"ds{d}_{k}": v for k, v in paths.items()}
        lengths = [int(arrays[f"ds{d}_shuffle_index"].shape[0]) for d in range(len(sources))]
        blend = build_blend(layout, lengths)
        if blend is not None:
            arrays |= {"dataset_index": blend[0], "dataset_sample_index": blend[1]}
        return arrays, files

    def build() -> Arrays:
        s = config.sampling
        lengths = [src.sequences.all_lengths() for src in sources]
        check_room(
            megatron_index_size(layout, lengths, config.seq_len, s.add_extra_token,
                                s.drop_last_partial),
            config,
        )  # fmt: skip
        built = build_megatron_indices(
            layout, lengths, config.seq_len, config.seed, s.add_extra_token, s.drop_last_partial
        )
        return _flatten(built)

    description = index_description(config, sources, layout)
    return load_or_build(config.sampling.cache_dir, description, build)


def index_description(
    config: DataConfig, sources: Sequence[MegatronSource], layout: MegatronLayout
) -> dict[str, Any]:
    """Every input of the indices (their cache key)."""
    s = config.sampling
    return {
        "algorithm": ALGORITHM,
        "data": [src.catalog.fingerprint() for src in sources],
        # What the indices are built from, so a file rewritten at the same size (the data
        # fingerprint's view) never reuses the indices of the documents it replaced: the
        # sha256 of the int32 lengths, recorded in the sequence table when it was built.
        "sequence_lengths": [src.sequences.lengths_sha256 for src in sources],
        "layout": [list(d) for d in layout.datasets],
        "blend": [layout.blend, layout.weights, layout.blend_size],
        "num_samples": s.num_samples,
        "seq_len": config.seq_len,
        "seed": config.seed,
        "add_extra_token": s.add_extra_token,
        "drop_last_partial": s.drop_last_partial,
    }


def check_room(size: IndexSize, config: DataConfig) -> None:
    """Refuse to build indices this machine cannot hold (see the module docstring).

    Raises:
        ConfigError: naming ``num_samples``, the sizes and the machine's limit.
    """
    s = config.sampling
    what = (
        f"sampling.num_samples = {s.num_samples}: the Megatron indices hold {size.documents} "
        f"document-index entries and {size.samples} samples, {_bytes(size.arrays)}"
    )
    memory = _memory_limit()
    if memory is not None and size.peak > memory:
        raise ConfigError(
            f"{what}; building them needs about {_bytes(size.peak)} of memory, more than "
            f"this machine's {_bytes(memory)}; lower num_samples (Megatron's --train-samples) "
            "or build the cache on a machine with more memory (docs/megatron.md)"
        )
    free = None if s.cache_dir is None else _free_disk(s.cache_dir)
    if free is not None and size.arrays > free:
        raise ConfigError(
            f"{what}, more than the {_bytes(free)} free at sampling.cache_dir = "
            f"'{s.cache_dir}'; free space there or point cache_dir elsewhere"
        )


def _memory_limit() -> int | None:
    """Bytes of memory this process may use: physical memory, or a smaller cgroup limit."""
    limits = []
    with contextlib.suppress(ValueError, OSError, AttributeError):
        limits.append(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"))
    for path in _CGROUP_LIMITS:
        with contextlib.suppress(ValueError, OSError):  # "max": no limit
            limits.append(int(Path(path).read_text().strip()))
    limits = [n for n in limits if n > 0]
    return min(limits) if limits else None


def _free_disk(path: str) -> int | None:
    try:
        return shutil.disk_usage(path).free
    except OSError:
        return None


def _bytes(count: int) -> str:
    if count < 1024:
        return f"{count} bytes"
    value = float(count)
    for unit in ("KiB", "MiB", "GiB", "TiB", "PiB"):
        value /= 1024
        if value < 1024 or unit == "PiB":
            break
    return f"{value:,.1f} {unit}"


def _megatron_core(
    config: DataConfig, sources: Sequence[MegatronSource], layout: MegatronLayout, d: int
) -> tuple[Arrays, dict[str, str]] | None:
    """megatron-core's own cached indices of dataset ``d``, if they match."""
    source, spec, s = sources[d], layout.datasets[d], config.sampling
    if s.cache_dir is None or source.prefix is None:
        return None
    matrix = [None if b is None else list(b) for b in split_matrix(s.megatron_split)]
    identifiers = {
        "dataset_path": source.prefix,
        "num_samples": spec.num_samples,
        "index_split": s.split_name.value,
        "random_seed": config.seed,
        "sequence_length": config.seq_len,
        "split_matrix": matrix,
    }
    table = source.sequences
    size = split_index_size(table.tokens(spec.begin, spec.end), spec.end - spec.begin,
                            table.longest, spec.num_samples, config.seq_len,
                            s.add_extra_token, s.drop_last_partial)  # fmt: skip
    dtypes = gpt_index_dtypes(size.documents, table.longest, size.samples)
    shapes = ((size.documents,), (size.samples + 1, 2), (size.samples,))

    def check(arrays: Arrays) -> bool:
        got = [arrays[k] for k in GPT_FIELDS]
        return all(
            a.dtype == t and a.shape == n for a, t, n in zip(got, dtypes, shapes, strict=True)
        )

    return find_megatron_gpt_cache(s.cache_dir, s.split_name.value, identifiers, check)


def _flatten(built: MegatronIndices) -> Arrays:
    arrays = {
        f"ds{d}_{field}": value
        for d, gpt in enumerate(built.datasets)
        for field, value in zip(GPT_FIELDS, gpt, strict=True)
    }
    if built.dataset_index is not None and built.dataset_sample_index is not None:
        arrays["dataset_index"] = built.dataset_index
        arrays["dataset_sample_index"] = built.dataset_sample_index
    return arrays
