"""The size of Megatron indices, known before building them: exact for the arrays, an upper
bound for the memory the build takes (measured with ``tracemalloc``, which numpy reports to)."""

from __future__ import annotations

import tracemalloc

import numpy as np
import pytest

from streamload.errors import ConfigError
from streamload.plan.megatron_layout import (
    build_megatron_indices,
    megatron_index_size,
    megatron_layout,
)

CASES = [
    # sequences per source, weights, split, split name, num_samples, seq_len, extra, drop last
    ([5000], None, "100,0,0", "train", 20_000, 64, True, True),
    ([5000], None, "100,0,0", "train", 200_000, 16, True, True),  # many epochs
    ([3000], None, "90,8,2", "valid", 2_000, 128, False, False),
    ([4000, 2500], [0.7, 0.3], "100,0,0", "train", 50_000, 32, True, True),
    ([4000, 2500, 900], None, "98,2,0", "train", 30_000, 32, True, True),
    ([800], [1.0], "100,0,0", "train", 5_000, 8, True, True),
]


def _lengths(counts: list[int], seed: int = 0) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    return [rng.integers(1, 400, n).astype(np.int32) for n in counts]


@pytest.mark.parametrize("case", CASES, ids=[str(i) for i in range(len(CASES))])
def test_size_matches_the_built_arrays_and_bounds_the_build(case: tuple) -> None:
    counts, weights, split, name, num_samples, seq_len, extra, drop = case
    lengths = _lengths(counts)
    layout = megatron_layout(counts, weights, split, name, num_samples)
    size = megatron_index_size(layout, lengths, seq_len, extra, drop)
    tracemalloc.start()
    try:
        built = build_megatron_indices(layout, lengths, seq_len, 1234, extra, drop)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    arrays = [a for gpt in built.datasets for a in gpt]
    if built.dataset_index is not None and built.dataset_sample_index is not None:
        arrays += [built.dataset_index, built.dataset_sample_index]
    assert size.arrays == sum(a.nbytes for a in arrays)
    assert size.samples == built.length
    assert size.documents == sum(gpt.document_index.size for gpt in built.datasets)
    assert peak <= size.peak, f"the build took {peak} bytes, estimated at most {size.peak}"


def test_size_of_an_enormous_request_is_computed_without_allocating() -> None:
    lengths = _lengths([97])
    layout = megatron_layout([97], None, "100,0,0", "train", 10**15)
    tracemalloc.start()
    try:
        size = megatron_index_size(layout, lengths, 16)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert size.arrays > 10**16 and size.peak > size.arrays
    assert peak < 1 << 20


def test_size_of_a_split_without_tokens_is_the_build_error() -> None:
    layout = megatron_layout([4], None, "100,0,0", "train", 10)
    with pytest.raises(ConfigError, match="tokens_per_epoch"):
        megatron_index_size(layout, [np.zeros(4, np.int32)], 8)
