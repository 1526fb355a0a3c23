"""Which GPT datasets a Megatron run builds, and the blend over them (FORMATS §2.2, §2.10).

``BlendedMegatronDatasetBuilder`` turns ``--data-path`` (prefixes, optional weights), the
split and the requested sample count into one of three shapes:

* one source without a weight: a single ``GPTDataset`` of ``num_samples``; no blend;
* weights (even one 1.0): each dataset builds ``ceil(ceil(T * w_d) * 1.005)`` samples and a
  ``BlendedDataset`` of ``sum_d ceil(T * w_d)`` samples picks among them greedily;
* several sources without weights: each dataset builds one epoch (``num_samples=None``)
  and the blend weighs them by their lengths, ``size = min(T, sum(len_d))``.

Example (two sources weighted 0.7/0.3, 200 samples):

>>> layout = megatron_layout([97, 64], [0.7, 0.3], "100,0,0", "train", 200)
>>> [d.num_samples for d in layout.datasets], layout.blend_size
([141, 61], 200)
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

import numpy as np

from streamload.errors import ConfigError
from streamload.plan.megatron import (
    GPTIndices,
    build_gpt_indices,
    gpt_index_dtypes,
    num_epochs,
    num_samples_in_index,
    split_ranges,
)
from streamload.plan.megatron_blend import blend_sizes, blended_dataset_indices, normalize

__all__ = [
    "SPLIT_NAMES",
    "DatasetSpec",
    "IndexSize",
    "MegatronIndices",
    "MegatronLayout",
    "build_blend",
    "build_megatron_indices",
    "gpt_index_size",
    "megatron_index_size",
    "megatron_layout",
    "split_index_size",
]

SPLIT_NAMES = ("train", "valid", "test")
"""Megatron's ``Split`` names, in the order of the split string."""
_BUILD_BYTES_PER_DOCUMENT = 24
_BUILD_BYTES_PER_SAMPLE = 32
"""Working memory of a build beyond its arrays, per document-index entry and per sample (the
int64 cumulative ends, row and offset arrays of ``build_sample_index``), an upper bound
checked against ``tracemalloc`` in tests/plan/test_megatron_layout.py."""
_BLEND_BUILD_BYTES_PER_SAMPLE = 32
"""Memory of a blend build per sample, its two arrays (10 bytes) included."""


class DatasetSpec(NamedTuple):
    """One ``GPTDataset``: its split's sequence id range and its requested samples."""

    begin: int
    end: int
    num_samples: int | None


class MegatronLayout(NamedTuple):
    """The datasets and the blend of one split of a Megatron run.

    ``blend`` is ``"none"`` (one GPTDataset), ``"weighted"`` (normalized ``weights`` and
    ``blend_size``) or ``"sizes"`` (weights are the dataset lengths, known after building).
    """

    datasets: tuple[DatasetSpec, ...]
    blend: str
    weights: tuple[float, ...] | None
    blend_size: int | None
    num_samples: int


class IndexSize(NamedTuple):
    """The size of Megatron indices, known before building them.

    ``arrays``: bytes the arrays hold (in memory, or on disk in the cache); ``peak``: an upper
    bound of the memory building them takes; ``samples``: ``len(GPTDataset)`` (or of the
    blend); ``documents``: document-index entries (epochs × sequences).
    """

    arrays: int
    peak: int
    samples: int
    documents: int


class MegatronIndices(NamedTuple):
    """Every built array: one :class:`GPTIndices` per dataset, and the blend's two arrays."""

    datasets: tuple[GPTIndices, ...]
    dataset_index: np.ndarray | None
    dataset_sample_index: np.ndarray | None

    @property
    def length(self) -> int:
        """Samples of the top-level dataset (``len(GPTDataset)`` or ``len(BlendedDataset)``)."""
        if self.dataset_index is None:
            return int(self.datasets[0].shuffle_index.shape[0])
        return int(self.dataset_index.shape[0])


def megatron_layout(
    num_sequences: Sequence[int],
    weights: Sequence[float] | None,
    split: str,
    split_name: str,
    num_samples: int,
) -> MegatronLayout:
    """The datasets a Megatron builder makes for one split (no index is built yet).

    Args:
        num_sequences: Sequences of every source (its IndexedDataset).
        weights: Raw source weights, or ``None`` (none given).
        split: Megatron's split string.
        split_name: ``train``, ``valid`` or ``test``.
        num_samples: Samples requested for this split.

    Raises:
        ConfigError: the split is empty for a source.
    """
    which = SPLIT_NAMES.index(split_name)
    ranges = []
    for d, count in enumerate(num_sequences):
        bounds = split_ranges(split, count)[which]
        if bounds is None or bounds[1] <= bounds[0]:
            raise ConfigError(
                f"split {split!r}: the {split_name} split of source {d} ({count} sequences) "
                "is empty; change sampling.split or sampling.split_name"
            )
        ranges.append(bounds)
    if weights is None and len(ranges) == 1:
        ((begin, end),) = ranges
        return MegatronLayout((DatasetSpec(begin, end, num_samples),), "none", None, None,
                              num_samples)  # fmt: skip
    if weights is None:
        specs = tuple(DatasetSpec(b, e, None) for b, e in ranges)
        return MegatronLayout(specs, "sizes", None, None, num_samples)
    sizes = blend_sizes(list(weights), num_samples)
    specs = tuple(DatasetSpec(b, e, n) for (b, e), n in zip(ranges, sizes.build, strict=True))
    normalized = tuple(normalize(list(weights)).tolist())
    return MegatronLayout(specs, "weighted", normalized, sizes.total, num_samples)


def build_megatron_indices(
    layout: MegatronLayout,
    sequence_lengths: Sequence[np.ndarray],
    seq_len: int,
    seed: int,
    add_extra_token: bool = True,
    drop_last_partial: bool = True,
) -> MegatronIndices:
    """Build every GPT index of ``layout`` (same seed for each, as Megatron) and the blend.

    Raises:
        ConfigError: a case megatron-core rejects (see :func:`build_gpt_indices`), or a blend
            asks a dataset for more samples than it built.
    """
    datasets = tuple(
        build_gpt_indices(
            sequence_lengths[d],
            np.arange(spec.begin, spec.end, dtype=np.int32),
            spec.num_samples,
            seq_len,
            seed,
            add_extra_token,
            drop_last_partial,
        )
        for d, spec in enumerate(layout.datasets)
    )
    blend = build_blend(layout, [int(gpt.shuffle_index.shape[0]) for gpt in datasets])
    return MegatronIndices(datasets, *(blend or (None, None)))


def build_blend(
    layout: MegatronLayout, lengths: Sequence[int]
) -> tuple[np.ndarray, np.ndarray] | None:
    """``(dataset_index, dataset_sample_index)`` of the layout's blend (``None``: no blend).

    Args:
        layout: The layout.
        lengths: Samples each dataset built (its shuffle index length).
    """
    if layout.blend == "none":
        return None
    if layout.blend == "sizes":
        weights: list[float] = [float(n) for n in lengths]
        size = min(layout.num_samples, sum(lengths))
    else:
        assert layout.weights is not None and layout.blend_size is not None
        weights, size = list(layout.weights), layout.blend_size
    return blended_dataset_indices(weights, size, list(lengths))


def gpt_index_size(
    sequence_lengths: np.ndarray,
    begin: int,
    end: int,
    num_samples: int | None,
    seq_len: int,
    add_extra_token: bool = True,
    drop_last_partial: bool = True,
) -> IndexSize:
    """The size of ``build_gpt_indices``' arrays for the split ``[begin, end)``, from the
    same arithmetic and dtype rules, without building anything (O(1) beyond one sum and one
    maximum; :func:`split_index_size` from the two).

    Raises:
        ConfigError: the split holds no tokens (as building would).
    """
    tokens = int(np.sum(sequence_lengths[begin:end], dtype=np.int64))
    longest = int(sequence_lengths.max()) if sequence_lengths.size else 0
    return split_index_size(tokens, end - begin, longest, num_samples, seq_len,
                            add_extra_token, drop_last_partial)  # fmt: skip


def split_index_size(
    tokens_per_epoch: int,
    sequences: int,
    longest: int,
    num_samples: int | None,
    seq_len: int,
    add_extra_token: bool = True,
    drop_last_partial: bool = True,
) -> IndexSize:
    """The size of a GPT split's indices from its token count, its sequence count and the
    longest sequence of the whole dataset (O(1)).

    ``arrays = 4·E·n + 2·(N + 1)·s + N·u`` bytes (``s``, ``u``: the sample and shuffle index
    item sizes, 4 or 8) and ``peak = arrays + 24·E·n + 32·N``.

    Raises:
        ConfigError: the split holds no tokens (as building would).
    """
    extra = int(add_extra_token)
    epochs = num_epochs(tokens_per_epoch, num_samples, seq_len, extra)
    documents = epochs * sequences
    samples = max(
        num_samples_in_index(tokens_per_epoch, epochs, seq_len, extra, drop_last_partial), 0
    )
    _, sample_dtype, shuffle_dtype = gpt_index_dtypes(documents, longest, samples)
    sample_item, shuffle_item = sample_dtype.itemsize, shuffle_dtype.itemsize
    arrays = 4 * documents + 2 * (samples + 1) * sample_item + samples * shuffle_item
    peak = arrays + _BUILD_BYTES_PER_DOCUMENT * documents + _BUILD_BYTES_PER_SAMPLE * samples
    return IndexSize(arrays, peak, samples, documents)


def megatron_index_size(
    layout: MegatronLayout,
    sequence_lengths: Sequence[np.ndarray],
    seq_len: int,
    add_extra_token: bool = True,
    drop_last_partial: bool = True,
) -> IndexSize:
    """The size of :func:`build_megatron_indices`' arrays, without building them.

    ``arrays``: every dataset's arrays and the blend's (10 bytes per blended sample);
    ``peak``: all datasets' arrays plus the largest working set, of one dataset's build or of
    the blend's (32 bytes per blended sample); ``samples``: the top-level dataset's length.

    Raises:
        ConfigError: a split holds no tokens (as building would).
    """
    sizes = [
        gpt_index_size(sequence_lengths[d], spec.begin, spec.end, spec.num_samples, seq_len,
                       add_extra_token, drop_last_partial)
        for d, spec in enumerate(layout.datasets)
    ]  # fmt: skip
    arrays = sum(s.arrays for s in sizes)
    working = max(s.peak - s.arrays for s in sizes)
    if layout.blend == "none":
        return IndexSize(arrays, arrays + working, sizes[0].samples, sizes[0].documents)
    if layout.blend == "sizes":
        blended = min(layout.num_samples, sum(s.samples for s in sizes))
    else:
        assert layout.blend_size is not None
        blended = layout.blend_size
    working = max(working, _BLEND_BUILD_BYTES_PER_SAMPLE * blended)
    documents = sum(s.documents for s in sizes)
    return IndexSize(arrays + 10 * blended, arrays + working, blended, documents)
