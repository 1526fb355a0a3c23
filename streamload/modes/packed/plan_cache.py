"""A source's packing plan: which items each sample holds, built once per (data, config),
cached on disk like the Megatron indices, and mapped.

The plan is stored in **sample order**, so a sample's items are one contiguous range and no
item-id indirection is kept: sample ``j`` holds the items ``offsets[j] … offsets[j + 1] − 1``,
each ``lengths[i]`` tokens from stream offset ``starts[i]``, in storage order within the
sample (the order :func:`streamload.plan.packing.pack_items` lists them). Per item 8 bytes of
start and 2 bytes of length (4 above ``seq_len`` 65,534), per sample 16 bytes of offsets
(items and data tokens before it): 15.8 bytes per item at seq_len 2048, on disk and in
the page cache, never copied into the process (mapped; process workers map the same files).

The cache key (:func:`plan_description`) names every input of the plan: each token file (its
path, bytes, tokens, dtype, and the listed version of it and of its index file: a remote
object's ETag or generation, a local file's modification time, as the catalog records them),
``seq_len``, the mode, ``long_documents``, ``max_documents_per_sample`` (only when set, so
the keys of uncapped plans are unchanged), the EOS that finds documents of index-less files,
the split's token range (with a split) and the packing rule (:func:`packing_rule`: the
whole-epoch rule, or the grouped one and its group size). Seed and shuffle are not inputs: each
epoch permutes the same samples. The folder is ``sampling.cache_dir``, else
``<storage cache folder>/plans`` (:attr:`streamload.config.StorageConfig.cache_root`); a
default folder that cannot be written only costs a build per start-up (with a warning), an
explicit one is an error. One process per folder builds, the others wait and map its files
(:mod:`streamload.util.index_cache`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from streamload.catalog.sources import SourceCatalog
from streamload.config import DataConfig, SamplingMode
from streamload.errors import ConfigError
from streamload.plan.packing import (
    ALGORITHM,
    GROUP_SIZE,
    GROUPED_ALGORITHM,
    ItemPlan,
    SamplePlan,
    document_items,
    pack_items,
    pad_items,
)
from streamload.streams.source_plan import files_description, load_source_plan
from streamload.util.index_cache import PACKING

__all__ = [
    "LAYOUT",
    "PackedPlan",
    "build_plan_arrays",
    "load_plan",
    "packing_rule",
    "plan_description",
]

LAYOUT = "sample-order-v1"
"""Names the arrays' layout (part of the cache key)."""
_COUNTS = ("documents", "dropped")
"""Arrays read into counts when the plan loads, not kept as arrays."""


@dataclass
class PackedPlan:
    """A source's samples of whole items, in sample order (see the module docstring)."""

    starts: np.ndarray
    """int64 ``[n]``: stream offset of each item, in sample order."""
    lengths: np.ndarray
    """uint16 or int32 ``[n]``: tokens of each item."""
    offsets: np.ndarray
    """int64 ``[s + 1]``: sample ``j`` holds items ``offsets[j]:offsets[j + 1]``."""
    data_offsets: np.ndarray
    """int64 ``[s + 1]``: data tokens of the samples before sample ``j``."""
    cut_items: np.ndarray
    """int64 ``[k]``, ascending: items (sample order) whose document ``"truncate"`` cut."""
    cut_tokens: np.ndarray
    """int64 ``[k]``: tokens dropped after each of :attr:`cut_items`."""
    documents: int
    """Non-empty documents of the source (those ``"drop"`` left out included)."""
    files: dict[str, str] | None = None
    """The files the arrays are mapped from (``None``: built in memory)."""
    _cut_before: np.ndarray | None = field(default=None, repr=False)
    dropped_documents: int = 0
    """Documents ``"drop"`` left out (longer than ``seq_len + 1``)."""
    dropped_tokens: int = 0
    """Their tokens."""

    @classmethod
    def from_arrays(cls, arrays: dict[str, np.ndarray], files: dict[str, str] | None) -> PackedPlan:
        """The plan of :func:`build_plan_arrays`' arrays (or their mapped files)."""
        plain = {name: _plain(array) for name, array in arrays.items()}
        dropped = plain.get("dropped", np.zeros(2, np.int64))  # only "drop" plans hold it
        return cls(
            starts=plain["starts"],
            lengths=plain["lengths"],
            offsets=plain["offsets"],
            data_offsets=plain["data_offsets"],
            cut_items=plain["cut_items"],
            cut_tokens=plain["cut_tokens"],
            documents=int(plain["documents"][0]),
            files=files,
            dropped_documents=int(dropped[0]),
            dropped_tokens=int(dropped[1]),
        )

    @property
    def num_samples(self) -> int:
        """s, samples in one epoch."""
        return int(self.offsets.size) - 1

    @property
    def num_items(self) -> int:
        """n, items in one epoch."""
        return int(self.starts.size)

    @property
    def data_tokens(self) -> int:
        """Tokens of all items (one epoch)."""
        return int(self.data_offsets[-1])

    @property
    def truncated_tokens(self) -> int:
        """Tokens ``"truncate"`` dropped (one epoch)."""
        return int(self.cut_tokens.sum())

    def totals(self, slots: np.ndarray) -> tuple[int, int, int]:
        """``(items, data tokens, truncated tokens)`` of the samples ``slots`` (O(len(slots)),
        no per-item work)."""
        slots = np.asarray(slots, dtype=np.int64)
        items = int((self.offsets[slots + 1] - self.offsets[slots]).sum())
        data = int((self.data_offsets[slots + 1] - self.data_offsets[slots]).sum())
        if self.cut_items.size == 0:
            return items, data, 0
        if self._cut_before is None:
            self._cut_before = np.concatenate([[0], np.cumsum(self.cut_tokens)])
        lo = np.searchsorted(self.cut_items, self.offsets[slots])
        hi = np.searchsorted(self.cut_items, self.offsets[slots + 1])
        return items, data, int((self._cut_before[hi] - self._cut_before[lo]).sum())

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__, _cut_before=None)
        for name in self.files or {}:  # mapped files travel as paths, not as copies
            if name not in _COUNTS:
                state[name] = None
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        for name, path in (self.files or {}).items():
            if name not in _COUNTS:
                setattr(self, name, _plain(np.load(path, mmap_mode="r", allow_pickle=False)))


def _plain(array: np.ndarray) -> np.ndarray:
    """A plain ndarray view of a memory map (still mapped: its ``base`` is the map); indexing
    a ``np.memmap`` pays its subclass hooks on every result."""
    return np.asarray(array)


def packing_rule(config: DataConfig) -> dict[str, Any]:
    """The rule that decides which items share a sample, as plan keys and state fingerprints
    name it: one best fit over the whole epoch (``{"algorithm": ALGORITHM}``), or within
    groups of ``sampling.group_size`` items (``GROUPED_ALGORITHM`` and the size: with 4096,
    the fields of every plan and state made before issue 34). ``padded`` mode packs nothing
    and keeps the fields it has always had, so its plans and states stay valid."""
    group = GROUP_SIZE if config.sampling.mode_name == "padded" else config.sampling.group_size
    if group is None:
        return {"algorithm": ALGORITHM}
    return {"algorithm": GROUPED_ALGORITHM, "group_size": int(group)}


def plan_description(
    config: DataConfig, catalog: SourceCatalog, span: tuple[int, int] | None = None
) -> dict[str, Any]:
    """Every input of a source's plan (its cache key): the files, seq_len, packing rule and,
    with a split, the split's token range (only then: keys of unsplit plans are unchanged);
    likewise the cap of documents per sample, only when set."""
    cap = config.sampling.max_documents_per_sample
    capped = {} if cap is None else {"max_documents_per_sample": int(cap)}
    return {
        "kind": "packing-plan",
        "layout": LAYOUT,
        **packing_rule(config),
        "mode": config.sampling.mode_name,
        "seq_len": config.seq_len,
        "long_documents": config.sampling.long_documents.value,
        **capped,
        **files_description(config, catalog),
    } | ({} if span is None else {"split_tokens": [int(span[0]), int(span[1])]})


def build_plan_arrays(
    items: ItemPlan,
    mode: SamplingMode,
    seq_len: int,
    max_items: int | None = None,
    group_size: int | None = None,
) -> dict[str, np.ndarray]:
    """The plan's arrays (sample order) from a source's items (``max_items``: the most
    items per packed sample, ``None``: no cap; ``group_size``: items per best-fit group,
    ``None``: the whole epoch)."""
    samples: SamplePlan
    if mode is SamplingMode.PADDED:
        samples = pad_items(items.starts.size)
    else:
        samples = pack_items(items.lengths, seq_len + 1, group_size, max_items)
    order = samples.items
    width_type = np.uint16 if seq_len + 1 <= np.iinfo(np.uint16).max else np.int32
    lengths = items.lengths[order].astype(width_type)
    data = np.add.reduceat(lengths, samples.offsets[:-1], dtype=np.int64)  # no sample is empty
    position = np.empty(order.size, dtype=np.int64)
    position[order] = np.arange(order.size)
    cut = position[items.cut_items]
    by_position = np.argsort(cut, kind="stable")
    arrays = {
        "starts": items.starts[order],
        "lengths": lengths,
        "offsets": samples.offsets,
        "data_offsets": np.concatenate([[0], np.cumsum(data, dtype=np.int64)]),
        "cut_items": cut[by_position].astype(np.int64),
        "cut_tokens": np.asarray(items.cut_tokens, dtype=np.int64)[by_position],
        "documents": np.array([items.documents], dtype=np.int64),
    }
    if items.dropped_documents:  # "drop" only: the files of other plans stay as they were
        counts = [items.dropped_documents, items.dropped_tokens]
        arrays["dropped"] = np.array(counts, dtype=np.int64)
    return arrays


def load_plan(
    config: DataConfig,
    catalog: SourceCatalog,
    document_bounds: Callable[[], np.ndarray],
    span: tuple[int, int] | None = None,
) -> PackedPlan:
    """The source's plan: mapped from the cache, or built from ``document_bounds()`` (int64
    stream offsets of its documents: with a split, those inside ``span``) and cached
    (:func:`streamload.streams.source_plan.load_source_plan`).

    Raises:
        ConfigError: an explicit ``sampling.cache_dir`` is unusable, or the source holds no
            document.
    """

    def build() -> dict[str, np.ndarray]:
        items = document_items(
            document_bounds(), config.seq_len, config.sampling.long_documents.value
        )
        if items.starts.size == 0 and items.dropped_documents:
            raise ConfigError(
                f"source {catalog.config.name!r}: all {items.dropped_documents} documents are "
                f"longer than seq_len + 1 = {config.seq_len + 1} tokens and "
                'long_documents = "drop" leaves them out; raise seq_len or use "truncate"'
            )
        if items.starts.size == 0:
            raise ConfigError(f"source {catalog.config.name!r}: no document holds a token")
        mode = SamplingMode(config.sampling.mode_name)
        sampling = config.sampling
        return build_plan_arrays(
            items, mode, config.seq_len, sampling.max_documents_per_sample, sampling.group_size
        )

    description = plan_description(config, catalog, span)
    return PackedPlan.from_arrays(*load_source_plan(config, catalog, description, build, PACKING))
