"""GPT indices (``streamload.plan.megatron``) against a literal reference of FORMATS §2.

The reference below follows the pseudo-code of FORMATS §2.1-2.7 (and megatron-core's Python)
line by line, with a token-by-token loop for the sample index; the package computes the
same arrays with vectorized numpy.
"""

from __future__ import annotations

import functools
import itertools
import math
import re

import numpy as np
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from streamload.errors import ConfigError
from streamload.plan.megatron import (
    build_document_index,
    build_gpt_indices,
    build_sample_index,
    build_shuffle_index,
    num_epochs,
    parse_split,
    separate_last_epoch,
    split_matrix,
    split_ranges,
)

# ---- reference (FORMATS §2, literally) ------------------------------------------------------


def ref_split_ranges(split: str, num: int) -> list[tuple[int, int] | None]:
    parts = [float(p) for p in re.findall(r"[.0-9]+", split)]
    parts += [0.0] * (3 - len(parts))
    weights = (np.array(parts) / np.sum(np.array(parts))).tolist()
    bounds = functools.reduce(lambda a, b: [*a, a[-1] + b], [[0], *weights])
    out: list[tuple[int, int] | None] = []
    for lo, hi in itertools.pairwise(bounds):
        begin, end = round(lo * float(num)), round(hi * float(num))
        out.append(None if hi <= lo else (begin, end))
    return out


def ref_num_epochs(tpe: int, num_samples: int | None, seq_len: int, extra: int) -> int:
    epochs, tokens = 1, tpe
    if num_samples is None:
        return 1
    while tokens < num_samples * seq_len + extra:
        epochs, tokens = epochs + 1, tokens + tpe
    return epochs


def ref_document_index(indices, epochs, rng, separate):
    if not separate or epochs == 1:
        doc = np.mgrid[0:epochs, 0 : len(indices)][1]
        doc[:] = indices
        doc = doc.reshape(-1).astype(np.int32)
        rng.shuffle(doc)
        return doc
    first = ref_document_index(indices, epochs - 1, rng, False)
    return np.concatenate((first, ref_document_index(indices, 1, rng, False)))


def ref_sample_index(sizes, doc, seq_len, epochs, tpe, drop, extra) -> np.ndarray:
    tokens = epochs * tpe - extra
    n = tokens // seq_len if drop else math.ceil(float(np.float32(tokens) / np.float32(seq_len)))
    rows, di, off = [(0, 0)], 0, 0
    for _ in range(n):
        rem = seq_len + extra
        while rem != 0:
            dl = int(sizes[doc[di]]) - off
            rem -= dl
            if rem <= 0:
                off += rem + dl - extra
                rem = 0
            elif di == len(doc) - 1:
                off = int(sizes[doc[di]]) - extra
                break
            else:
                di, off = di + 1, 0
        rows.append((di, off))
    return np.array(rows, dtype=np.int32).reshape(-1, 2)


def ref_gpt(sizes, indices, num_samples, seq_len, seed, extra=1, drop=True):
    tpe = int(sizes[indices].sum())
    epochs = ref_num_epochs(tpe, num_samples, seq_len, extra)
    separate = False
    if epochs > 1:
        n_sans = ((epochs - 1) * tpe - extra) // seq_len
        n_per = (tpe - extra) // seq_len
        separate = num_samples - n_sans < int(0.80 * n_per)
    rng = np.random.RandomState(seed)
    doc = ref_document_index(indices, epochs, rng, separate)
    sample = ref_sample_index(sizes, doc, seq_len, epochs, tpe, drop, extra)
    total = sample.shape[0] - 1
    first = np.arange(n_sans if separate else total, dtype=np.uint32)
    rng.shuffle(first)
    last = np.arange(first.size, total, dtype=np.uint32)
    rng.shuffle(last)
    return doc, sample, np.concatenate((first, last))


# ---- properties --------------------------------------------------------------------------


@st.composite
def gpt_inputs(draw):
    sizes = np.array(draw(st.lists(st.integers(0, 50), min_size=1, max_size=30)), np.int32)
    begin = draw(st.integers(0, sizes.size - 1))
    indices = np.arange(begin, draw(st.integers(begin + 1, sizes.size)), dtype=np.int32)
    seq_len = draw(st.integers(2, 40))
    extra = draw(st.integers(0, 1))
    tpe = int(sizes[indices].sum())
    per = max(0, (tpe - extra) // seq_len)
    num_samples = draw(st.none() | st.integers(0, 4 * per + 2))
    return sizes, indices, num_samples, seq_len, draw(st.integers(0, 2**32 - 1)), extra


@settings(max_examples=50, deadline=None)
@given(gpt_inputs(), st.booleans())
def test_gpt_indices_match_reference(inputs, drop: bool) -> None:
    sizes, indices, num_samples, seq_len, seed, extra = inputs
    tpe = int(sizes[indices].sum())
    if tpe <= 1:
        with pytest.raises(ConfigError):
            build_gpt_indices(sizes, indices, num_samples, seq_len, seed, bool(extra), drop)
        return
    want = ref_gpt(sizes, indices, num_samples, seq_len, seed, extra, drop)
    if want[1].min() < 0:  # an empty last document: megatron-core's helpers assert
        with pytest.raises(ConfigError, match="empty"):
            build_gpt_indices(sizes, indices, num_samples, seq_len, seed, bool(extra), drop)
        return
    got = build_gpt_indices(sizes, indices, num_samples, seq_len, seed, bool(extra), drop)
    for ours, theirs in zip(got, want, strict=True):
        assert ours.dtype == theirs.dtype
        np.testing.assert_array_equal(ours, theirs)


@settings(max_examples=40, deadline=None)
@given(gpt_inputs())
def test_samples_are_stride_windows_of_the_document_stream(inputs) -> None:
    """Reading sample k as FORMATS §2.8 gives tokens [k*L, k*L + L + extra) of the stream."""
    sizes, indices, num_samples, seq_len, seed, extra = inputs
    sizes = np.maximum(sizes, 2)
    doc, sample, _ = build_gpt_indices(sizes, indices, num_samples, seq_len, seed, bool(extra))
    starts = np.concatenate(([0], np.cumsum(sizes)))
    stream = np.concatenate([np.arange(starts[d], starts[d + 1]) for d in doc])
    for k in range(sample.shape[0] - 1):
        (d0, o0), (d1, o1) = sample[k], sample[k + 1]
        parts = [np.arange(starts[doc[d0]], starts[doc[d0] + 1])[o0:]]
        parts += [np.arange(starts[doc[d]], starts[doc[d] + 1]) for d in range(d0 + 1, d1 + 1)]
        if d0 == d1:
            parts = [np.arange(starts[doc[d0]], starts[doc[d0] + 1])[o0 : o1 + extra]]
        else:
            parts[-1] = parts[-1][: o1 + extra]
        got = np.concatenate(parts)
        np.testing.assert_array_equal(got, stream[k * seq_len : k * seq_len + seq_len + extra])


@settings(max_examples=50, deadline=None)
@given(
    st.lists(st.integers(0, 1000), min_size=1, max_size=3).filter(any),
    st.integers(0, 10**6),
    st.sampled_from([",", " ", "/"]),
)
def test_split_ranges_match_reference(parts: list[int], num: int, sep: str) -> None:
    split = sep.join(str(p) for p in parts)
    assert split_ranges(split, num) == ref_split_ranges(split, num)


@settings(max_examples=50, deadline=None)
@given(st.integers(1, 10**6), st.none() | st.integers(0, 10**7), st.integers(2, 8192))
def test_num_epochs_match_reference(tpe: int, num_samples: int | None, seq_len: int) -> None:
    # The reference counts epochs one by one: keep E below 10^5 so it stays fast.
    assume(num_samples is None or num_samples * seq_len <= tpe * 10**5)
    for extra in (0, 1):
        assert num_epochs(tpe, num_samples, seq_len, extra) == ref_num_epochs(
            tpe, num_samples, seq_len, extra
        )


# ---- examples and edges --------------------------------------------------------------------


def test_split_examples() -> None:
    assert parse_split("969, 30, 1") == [0.969, 0.03, 0.001]
    assert parse_split("99,1") == [0.99, 0.01, 0.0]
    assert split_matrix("1,0,1") == [(0, 0.5), None, (0.5, 1.0)]
    assert split_ranges("1,1", 5) == [(0, 2), (2, 5), None]  # round(2.5) == 2 (half-even)
    assert split_ranges("969,30,1", 1000) == [(0, 969), (969, 999), (999, 1000)]


@pytest.mark.parametrize("split", ["", "0,0,0", "1,2,3,4", "a,b"])
def test_bad_split(split: str) -> None:
    with pytest.raises(ConfigError, match="split"):
        parse_split(split)


def test_separate_threshold_is_80_percent() -> None:
    # tpe 101, L 10, extra 1: 10 samples per epoch, int(0.8 * 10) = 8; E = 2 and n_sans = 20.
    assert num_epochs(101, 27, 10, 1) == 3
    assert separate_last_epoch(101, 3, 27, 10, 1) == (True, 20)  # 7 from the last epoch
    assert separate_last_epoch(101, 3, 28, 10, 1) == (False, 20)  # 8 is not < 8
    with pytest.raises(ConfigError, match="epochs"):
        separate_last_epoch(101, 3, 32, 10, 1)  # 12 > 10 + 1: E is wrong


def test_document_index_draw_order() -> None:
    """The separated document index is two shuffles drawn from the same RandomState."""
    rng = np.random.RandomState(5)
    first = np.tile(np.arange(3, 9, dtype=np.int32), 2)
    rng.shuffle(first)
    last = np.arange(3, 9, dtype=np.int32)
    rng.shuffle(last)
    got = build_document_index(np.arange(3, 9), 3, np.random.RandomState(5), True)
    np.testing.assert_array_equal(got, np.concatenate((first, last)))
    assert got.dtype == np.int32


def test_sample_index_keeps_partial_last_sample() -> None:
    sizes = np.array([5, 4], np.int32)  # 9 tokens, L 4, extra 1: (9-1)/4 = 2 exactly
    doc = np.array([0, 1], np.int32)
    assert build_sample_index(sizes, doc, 4, 1, 9).tolist() == [[0, 0], [0, 4], [1, 3]]
    # 10 tokens: drop gives 2 samples; keep gives ceil(9/4) = 3, the last one runs out.
    sizes = np.array([5, 5], np.int32)
    assert build_sample_index(sizes, doc, 4, 1, 10).shape == (3, 2)
    kept = build_sample_index(sizes, doc, 4, 1, 10, drop_last_partial=False)
    assert kept.tolist() == [[0, 0], [0, 4], [1, 3], [1, 4]]


def test_sample_index_dtype_follows_largest_value() -> None:
    doc = np.array([1, 0], np.int32)
    small = build_sample_index(np.array([3, 9], np.int32), doc, 4, 1, 12)
    assert small.dtype == np.int32
    # The maximum is over the whole dataset, not only the split's sequences (as megatron).
    huge = build_sample_index(np.array([3, 9, 2**31], np.int64), doc, 4, 1, 12)
    assert huge.dtype == np.int64
    np.testing.assert_array_equal(huge, small)


def test_shuffle_index_dtype_and_halves() -> None:
    got = build_shuffle_index(4, 9, np.random.RandomState(0))
    assert got.dtype == np.uint32
    assert sorted(got[:4].tolist()) == [0, 1, 2, 3] and sorted(got[4:].tolist()) == [4, 5, 6, 7, 8]


@pytest.mark.parametrize(
    ("sizes", "indices", "seq_len"),
    [([5, 5], [], 4), ([1], [0], 4), ([5, 5], [0, 1], 1)],
)
def test_bad_gpt_inputs(sizes, indices, seq_len) -> None:
    with pytest.raises(ConfigError):
        build_gpt_indices(np.array(sizes, np.int32), np.array(indices, int), None, seq_len, 1)
