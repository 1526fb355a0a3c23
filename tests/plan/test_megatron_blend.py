"""Blend indices (``streamload.plan.megatron_blend``) against a literal reference of FORMATS §2.10.

The reference is the C++ loop of ``helpers.cpp`` in plain Python floats (IEEE double, as the
C++). The package runs the same rule speculatively in vectorized chunks; here the chunks are
forced tiny, with short burn-ins, so that guesses fail and the exact repair runs often.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from streamload.errors import ConfigError
from streamload.plan import megatron_blend
from streamload.plan.megatron_blend import (
    blend_sizes,
    blended_dataset_indices,
    build_blending_indices,
    build_exhaustive_blending_indices,
    normalize,
)

# ---- reference (helpers.cpp, literally) -----------------------------------------------------


def ref_blending(weights: list[float], size: int) -> tuple[list[int], list[int]]:
    current = [0] * len(weights)
    index, sample = [], []
    for s in range(size):
        x = max(float(s), 1.0)
        best, best_err = 0, weights[0] * x - float(current[0])
        for d in range(1, len(weights)):
            err = weights[d] * x - float(current[d])
            if err > best_err:
                best, best_err = d, err
        index.append(best)
        sample.append(current[best])
        current[best] += 1
    return index, sample


def ref_exhaustive(sizes: list[int]) -> tuple[list[int], list[int]]:
    total = sum(sizes)
    weights = [n / float(total) for n in sizes]
    counts = [0] * len(sizes)
    unspent = sorted(range(len(sizes)))
    index, sample, s = [], [], 0
    while unspent:
        x = max(float(s), 1.0)
        best, best_err = -1, -1.7976931348623157e308
        for d in unspent:
            err = weights[d] * x - float(counts[d])
            if err > best_err:
                best, best_err = d, err
        index.append(best)
        sample.append(counts[best])
        counts[best] += 1
        if sizes[best] - float(counts[best]) == 0:
            unspent.remove(best)
        s += 1
    return index, sample


def assert_blend(got: tuple[np.ndarray, np.ndarray], want: tuple[list[int], list[int]]) -> None:
    assert got[0].dtype == np.int16 and got[1].dtype == np.int64
    assert got[0].tolist() == want[0]
    assert got[1].tolist() == want[1]


weight_lists = st.one_of(
    st.lists(st.floats(0.001, 1.0), min_size=1, max_size=8),
    st.lists(st.integers(1, 6).map(float), min_size=1, max_size=8),  # rational ratios, ties
    st.integers(1, 8).map(lambda k: [1.0] * k),  # equal weights: every step a tie
    st.lists(st.sampled_from([1e-5, 1e-3, 0.5, 1.0]), min_size=2, max_size=6),  # rare datasets
)


# ---- properties --------------------------------------------------------------------------


@settings(max_examples=50, deadline=None)
@given(weight_lists, st.integers(0, 2500))
def test_blending_matches_reference(raw: list[float], size: int) -> None:
    weights = normalize(raw)
    assert_blend(build_blending_indices(weights, size), ref_blending(weights.tolist(), size))


@settings(max_examples=50, deadline=None)
@given(weight_lists, st.integers(1, 2500), st.integers(1, 300), st.integers(0, 200))
def test_speculative_chunks_match_reference(raw, size, chunk, burn_in) -> None:
    weights = normalize(raw)
    got = megatron_blend._greedy(weights, None, size, chunk=chunk, burn_in=burn_in)
    assert got.tolist() == ref_blending(weights.tolist(), size)[0]


@settings(max_examples=40, deadline=None)
@given(st.lists(st.integers(1, 300), min_size=1, max_size=7))
def test_exhaustive_matches_reference(sizes: list[int]) -> None:
    assert_blend(build_exhaustive_blending_indices(sizes), ref_exhaustive(sizes))


@settings(max_examples=40, deadline=None)
@given(
    st.lists(st.integers(1, 300), min_size=1, max_size=7), st.integers(1, 200), st.integers(0, 100)
)
def test_exhaustive_speculative_chunks_match_reference(sizes, chunk, burn_in) -> None:
    caps = np.array(sizes, np.int64)
    weights = caps / np.float64(caps.sum())
    got = megatron_blend._greedy(weights, caps, int(caps.sum()), chunk=chunk, burn_in=burn_in)
    assert got.tolist() == ref_exhaustive(sizes)[0]


@pytest.mark.parametrize("raw", [[0.45, 0.35, 0.2], [3.0, 1e-4, 2.0, 0.5, 1.0]])
def test_default_speculative_path_on_a_large_blend(raw: list[float]) -> None:
    """Above the sequential threshold the default path is the chunked one."""
    size = 50_000
    assert size * len(raw) > megatron_blend._SEQUENTIAL_WORK
    weights = normalize(raw)
    assert_blend(build_blending_indices(weights, size), ref_blending(weights.tolist(), size))


# ---- examples and edges --------------------------------------------------------------------


def test_examples_measured_on_megatron_core() -> None:
    assert build_blending_indices([0.5, 0.5], 6)[0].tolist() == [0, 1, 0, 1, 0, 1]
    assert build_blending_indices([0.7, 0.3], 10)[0].tolist() == [0, 1, 0, 0, 1, 0, 0, 1, 0, 0]
    # A zero weight still wins exact ties at 0 with the lowest index (the C++ does this too).
    index, sample = build_blending_indices([0.0, 0.5, 0.5], 8)
    assert index.tolist() == [1, 2, 0, 1, 2, 1, 2, 1]
    assert sample.tolist() == [0, 0, 0, 1, 1, 2, 2, 3]
    assert build_exhaustive_blending_indices([1, 3])[0].tolist() == [1, 0, 1, 1]


def test_blend_sizes() -> None:
    sizes = blend_sizes([7, 3], 200)
    assert sizes.target == (140, 60) and sizes.build == (141, 61) and sizes.total == 200
    # The ceilings can make the blend longer than asked for.
    assert blend_sizes([1, 1, 1], 10).total == 12
    assert blend_sizes([0.5, 0.5], 0) == ((0, 0), (0, 0), 0)


def test_blended_dataset_indices_paths() -> None:
    weighted = blended_dataset_indices([0.7, 0.3], 10)
    assert weighted[0].tolist() == [0, 1, 0, 0, 1, 0, 0, 1, 0, 0]
    exhaustive = blended_dataset_indices([1, 3], None)
    assert exhaustive[0].tolist() == [1, 0, 1, 1]
    with pytest.raises(ConfigError, match="integers"):
        blended_dataset_indices([0.5, 0.5], None)
    with pytest.raises(ConfigError, match="dataset 0: 7 samples requested but it holds 6"):
        blended_dataset_indices([0.7, 0.3], 10, dataset_lengths=[6, 5])


@pytest.mark.parametrize("weights", [[], [0.5, -0.1], [float("nan"), 1.0], [1.0] * 32768])
def test_bad_weights(weights: list[float]) -> None:
    with pytest.raises(ConfigError, match="blend"):
        build_blending_indices(weights, 4)


def test_bad_sizes() -> None:
    with pytest.raises(ConfigError, match=">= 1"):
        build_exhaustive_blending_indices([3, 0])
    with pytest.raises(ConfigError, match="size"):
        build_blending_indices([1.0], -1)
    assert build_blending_indices([1.0], 3)[1].tolist() == [0, 1, 2]
    assert build_blending_indices([0.2, 0.8], 0)[0].size == 0
