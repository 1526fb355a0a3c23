"""Packing masks: the vectorized kernels against a plain per-token Python reference."""

from __future__ import annotations

import itertools

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from streamload.ops.masks import (
    IGNORE_INDEX,
    mask_padding,
    packing_fields,
    starts_from_eos,
    starts_from_offsets,
)

SETTINGS = settings(max_examples=50, deadline=None)


def reference_fields(window: list[int], eos: int) -> dict[str, list[int] | int]:
    """Masks of one window of L + 1 tokens, one token at a time (the documented meaning)."""
    length = len(window) - 1
    doc, pos = 0, 0
    doc_ids, position_ids, labels, boundaries = [], [], [], [0]
    for t in range(length):
        if t > 0 and window[t - 1] == eos:  # token t opens a new document
            doc, pos = doc + 1, 0
            boundaries.append(t)
        doc_ids.append(doc)
        position_ids.append(pos)
        pos += 1
        # label t is token t + 1; it opens the next document when input token t is EOS
        labels.append(IGNORE_INDEX if window[t] == eos else window[t + 1])
    boundaries.append(length)
    lengths = [b - a for a, b in itertools.pairwise(boundaries)]
    cu_seqlens = boundaries + [length] * (length + 1 - len(boundaries))
    return {
        "doc_ids": doc_ids,
        "position_ids": position_ids,
        "labels": labels,
        "cu_seqlens": cu_seqlens,
        "max_seqlen": max(lengths),
    }


def run_kernels(tokens: np.ndarray, eos: int) -> dict[str, np.ndarray]:
    labels = tokens[:, 1:].astype(np.int64)  # a copy: masking must not touch the tokens
    fields = packing_fields(starts_from_eos(tokens, eos), labels)
    return {**fields, "labels": labels}


@st.composite
def windows(draw: st.DrawFn) -> tuple[np.ndarray, int]:
    """A block ``[n, L+1]`` of small token ids (EOS frequent) and the EOS id."""
    length = draw(st.integers(1, 64))
    rows = draw(st.integers(1, 6))
    dtype = draw(st.sampled_from([np.uint16, np.uint32, np.int32, np.int64]))
    eos = draw(st.integers(0, 4))
    tokens = draw(hnp.arrays(dtype, (rows, length + 1), elements=st.integers(0, 4)))
    return tokens, eos


@SETTINGS
@given(block=windows())
def test_packing_fields_match_reference(block: tuple[np.ndarray, int]) -> None:
    tokens, eos = block
    n, width = tokens.shape
    got = run_kernels(tokens, eos)
    assert got["doc_ids"].dtype == np.int64 and got["doc_ids"].shape == (n, width - 1)
    assert got["position_ids"].dtype == np.int64 and got["position_ids"].shape == (n, width - 1)
    assert got["cu_seqlens"].dtype == np.int32 and got["cu_seqlens"].shape == (n, width)
    assert got["max_seqlen"].dtype == np.int32 and got["max_seqlen"].shape == (n,)
    for i in range(n):
        want = reference_fields(tokens[i].tolist(), eos)
        for key in ("doc_ids", "position_ids", "labels", "cu_seqlens"):
            assert got[key][i].tolist() == want[key], (key, tokens[i].tolist())
        assert int(got["max_seqlen"][i]) == want["max_seqlen"]


@SETTINGS
@given(block=windows())
def test_segments_agree_with_position_ids(block: tuple[np.ndarray, int]) -> None:
    """cu_seqlens, doc_ids and position_ids describe the same segments."""
    tokens, eos = block
    got = run_kernels(tokens, eos)
    for i in range(tokens.shape[0]):
        cu = got["cu_seqlens"][i]
        assert cu[0] == 0 and np.all(np.diff(cu) >= 0) and cu[-1] == tokens.shape[1] - 1
        lengths = np.diff(cu)
        lengths = lengths[lengths > 0]
        assert np.repeat(np.arange(lengths.size), lengths).tolist() == got["doc_ids"][i].tolist()
        ramps = np.concatenate([np.arange(k) for k in lengths])
        assert ramps.tolist() == got["position_ids"][i].tolist()


def test_docstring_trace() -> None:
    """L = 6, EOS = 0, window [5, 0, 7, 8, 0, 9, 4] (the trace in ``ops/masks.py``)."""
    tokens = np.array([[5, 0, 7, 8, 0, 9, 4]], dtype=np.uint16)
    starts = starts_from_eos(tokens, 0)
    assert starts.tolist() == [[False, False, True, False, False, True, False]]
    labels = tokens[:, 1:].astype(np.int64)
    fields = packing_fields(starts, labels)
    assert fields["doc_ids"].tolist() == [[0, 0, 1, 1, 1, 2]]
    assert fields["position_ids"].tolist() == [[0, 1, 0, 1, 2, 0]]
    assert labels.tolist() == [[0, -100, 8, 0, -100, 4]]
    assert fields["cu_seqlens"].tolist() == [[0, 2, 5, 6, 6, 6, 6]]
    assert fields["max_seqlen"].tolist() == [3]


def test_no_document_boundary() -> None:
    tokens = np.array([[3, 4, 5, 6, 7]], dtype=np.uint16)
    labels = tokens[:, 1:].astype(np.int64)
    fields = packing_fields(starts_from_eos(tokens, 0), labels)
    assert fields["doc_ids"].tolist() == [[0, 0, 0, 0]]
    assert fields["position_ids"].tolist() == [[0, 1, 2, 3]]
    assert labels.tolist() == [[4, 5, 6, 7]]
    assert fields["cu_seqlens"].tolist() == [[0, 4, 4, 4, 4]]
    assert fields["max_seqlen"].tolist() == [4]


def test_all_eos_window() -> None:
    tokens = np.zeros((1, 5), dtype=np.uint16)
    labels = tokens[:, 1:].astype(np.int64)
    fields = packing_fields(starts_from_eos(tokens, 0), labels)
    assert fields["doc_ids"].tolist() == [[0, 1, 2, 3]]
    assert fields["position_ids"].tolist() == [[0, 0, 0, 0]]
    assert labels.tolist() == [[-100, -100, -100, -100]]
    assert fields["cu_seqlens"].tolist() == [[0, 1, 2, 3, 4]]
    assert fields["max_seqlen"].tolist() == [1]


def reference_starts(window_starts: list[int], width: int, doc_starts: list[int]) -> list:
    begins = set(doc_starts)
    return [[t > 0 and (w + t) in begins for t in range(width)] for w in window_starts]


@st.composite
def offset_cases(draw: st.DrawFn) -> tuple[np.ndarray, int, np.ndarray]:
    total = draw(st.integers(2, 300))
    width = draw(st.integers(2, min(total, 65)))
    doc_starts = sorted(draw(st.sets(st.integers(0, total - 1), max_size=60)))
    window_starts = draw(st.lists(st.integers(0, total - width), max_size=8))
    return (
        np.array(window_starts, dtype=np.int64),
        width,
        np.array(doc_starts, dtype=np.int64),
    )


@SETTINGS
@given(case=offset_cases())
def test_starts_from_offsets_matches_reference(case: tuple[np.ndarray, int, np.ndarray]) -> None:
    window_starts, width, doc_starts = case
    got = starts_from_offsets(window_starts, width, doc_starts)
    assert got.dtype == bool
    assert got.shape == (window_starts.shape[0], width)
    assert got.tolist() == reference_starts(window_starts.tolist(), width, doc_starts.tolist())


@SETTINGS
@given(
    stream=hnp.arrays(np.uint16, st.integers(2, 200), elements=st.integers(0, 3)),
    width=st.integers(2, 40),
    data=st.data(),
)
def test_eos_and_offsets_agree(stream: np.ndarray, width: int, data: st.DataObject) -> None:
    """Starts found by EOS scanning equal those from an index of the same documents."""
    width = min(width, stream.size)
    doc_starts = np.flatnonzero(stream == 0) + 1
    window_starts = np.array(
        data.draw(st.lists(st.integers(0, stream.size - width), min_size=1, max_size=6)),
        dtype=np.int64,
    )
    tokens = np.stack([stream[s : s + width] for s in window_starts])
    np.testing.assert_array_equal(
        starts_from_offsets(window_starts, width, doc_starts), starts_from_eos(tokens, 0)
    )


def test_starts_from_offsets_edges() -> None:
    doc = np.array([0, 3, 10], dtype=np.int64)
    got = starts_from_offsets(np.array([0, 3, 8], dtype=np.int64), 4, doc)
    # a document starting at a window's first token is not a boundary inside the window
    assert got.tolist() == [
        [False, False, False, True],
        [False, False, False, False],
        [False, False, True, False],
    ]
    empty = starts_from_offsets(np.array([], dtype=np.int64), 4, doc)
    assert empty.shape == (0, 4)
    none = starts_from_offsets(np.array([2], dtype=np.int64), 4, np.array([], dtype=np.int64))
    assert none.tolist() == [[False] * 4]


def test_mask_padding_masks_labels_that_are_padding() -> None:
    labels = np.array([[1, 2, 3, 4], [7, 8, 9, 9], [5, 5, 5, 5]], dtype=np.int64)
    mask_padding(labels, np.array([5, 3, 1]))  # full row, 3 data tokens, 1 data token
    assert labels.tolist() == [[1, 2, 3, 4], [7, 8, -100, -100], [-100] * 4]
