"""Gathering windows from shards: straddling windows are stitched, ShardSet pickles lean."""

from __future__ import annotations

import pickle
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from streamload.catalog.sources import describe_source
from streamload.config import SourceConfig
from streamload.errors import FormatError
from streamload.streams import shard_set as gather
from streamload.streams.shard_set import ShardSet

SETTINGS = settings(max_examples=30, deadline=None)


def shard_set(folder: Path, dtype: str = "auto") -> ShardSet:
    source = SourceConfig(name="web", path=str(folder), dtype=dtype)
    return ShardSet(describe_source(source).shards)


def every_window(shards: ShardSet, stream: np.ndarray, length: int, dtype: type) -> None:
    """Gather every window of ``length`` tokens in one call and compare with the stream."""
    starts = np.arange(stream.size - length + 1, dtype=np.int64)
    out = shards.gather(starts, np.empty((starts.size, length), dtype=dtype))
    expected = np.stack([stream[s : s + length] for s in starts])
    np.testing.assert_array_equal(out, expected)


def test_windows_straddling_two_and_three_shards(make_corpus: Callable) -> None:
    corpus = make_corpus([7, 3, 2, 11, 1, 9])
    shards = shard_set(corpus.folder)
    stream = corpus.stream
    assert shards.num_tokens == stream.size == 33
    # start 5, length 6: shards 0 and 1; start 5, length 8: shards 0, 1, 2;
    # start 8, length 20: shards 1..5 (a window covering a 1-token shard entirely)
    starts = np.array([5, 5, 8, 0, 21], dtype=np.int64)
    for start, length in zip(starts.tolist(), [6, 8, 20, 33, 12], strict=True):
        out = shards.gather(np.array([start]), np.empty((1, length), dtype=np.uint16))
        np.testing.assert_array_equal(out[0], stream[start : start + length])
    for length in (1, 2, 3, 4, 12, 33):
        every_window(shards, stream, length, np.uint16)


@SETTINGS
@given(
    sizes=st.lists(st.integers(1, 40), min_size=1, max_size=6),
    length=st.integers(1, 60),
    seed=st.integers(0, 1000),
)
def test_gather_equals_concatenation(
    make_corpus: Callable, sizes: list[int], length: int, seed: int
) -> None:
    corpus = make_corpus(sizes, seed=seed, vocab_size=50_000)
    shards = shard_set(corpus.folder)
    stream = np.concatenate([np.load(p) for p in corpus.paths])
    length = min(length, stream.size)
    every_window(shards, stream, length, np.int64)  # a wider output dtype works too


def test_gather_in_any_order(make_corpus: Callable) -> None:
    corpus = make_corpus([50, 20, 30])
    shards = shard_set(corpus.folder)
    starts = np.array([90, 0, 45, 45, 66, 12], dtype=np.int64)
    out = shards.gather(starts, np.empty((6, 9), dtype=np.uint16))
    expected = np.stack([corpus.stream[s : s + 9] for s in starts])
    np.testing.assert_array_equal(out, expected)


def test_locate(make_corpus: Callable) -> None:
    shards = shard_set(make_corpus([5, 3, 4]).folder)
    assert shards.offsets.tolist() == [0, 5, 8, 12]
    assert [shards.locate(g) for g in (0, 4, 5, 7, 8, 11)] == [
        (0, 0), (0, 4), (1, 0), (1, 2), (2, 0), (2, 3),
    ]  # fmt: skip


def test_pickle_drops_open_maps(make_corpus: Callable) -> None:
    corpus = make_corpus([20_000, 30_000, 10_000])
    shards = shard_set(corpus.folder)
    starts = np.array([19_990, 55_000], dtype=np.int64)
    before = shards.gather(starts, np.empty((2, 64), dtype=np.uint16)).copy()
    assert len(shards._open) == 3  # both windows opened shards, one straddles 0 and 1
    blob = pickle.dumps(shards)
    assert len(blob) < 8_000, "token data or open maps leaked into the pickle"
    clone = pickle.loads(blob)
    assert len(clone._open) == 0
    assert len(shards._open) == 3  # pickling leaves the original untouched
    after = clone.gather(starts, np.empty((2, 64), dtype=np.uint16))
    np.testing.assert_array_equal(after, before)
    np.testing.assert_array_equal(after[0], corpus.stream[19_990:20_054])
    assert clone.dtype == shards.dtype
    np.testing.assert_array_equal(clone.offsets, shards.offsets)


def test_unopened_set_pickles(make_corpus: Callable) -> None:
    corpus = make_corpus([30, 30])
    clone = pickle.loads(pickle.dumps(shard_set(corpus.folder)))
    out = clone.gather(np.array([25], dtype=np.int64), np.empty((1, 10), dtype=np.uint16))
    np.testing.assert_array_equal(out[0], corpus.stream[25:35])


def test_few_maps_stay_open(make_corpus: Callable, monkeypatch: pytest.MonkeyPatch) -> None:
    """Least recently used shards are unmapped beyond MAX_OPEN_SHARDS; results do not change."""
    monkeypatch.setattr(gather, "MAX_OPEN_SHARDS", 2)
    corpus = make_corpus([10] * 6)
    shards = shard_set(corpus.folder)
    starts = np.arange(0, 55, 5, dtype=np.int64)
    out = shards.gather(starts, np.empty((starts.size, 6), dtype=np.uint16))
    assert len(shards._open) <= 2
    np.testing.assert_array_equal(out, np.stack([corpus.stream[s : s + 6] for s in starts]))


def test_mixed_widths_gather_into_the_wider_dtype(tmp_path: Path) -> None:
    np.save(tmp_path / "a.npy", np.array([1, 2, 3], dtype=np.uint16))
    np.save(tmp_path / "b.npy", np.array([70_000, 5], dtype=np.uint32))
    shards = shard_set(tmp_path, dtype="uint32")  # mixed widths: the config names one (issue 36.7)
    assert shards.dtype == np.uint32
    out = shards.gather(np.array([1]), np.empty((1, 4), dtype=shards.dtype))
    assert out.tolist() == [[2, 3, 70_000, 5]]


def test_big_endian_npy_gathers_native_values(tmp_path: Path) -> None:
    np.save(tmp_path / "a.npy", np.array([1, 300, 65_535], dtype=">u2"))
    shards = shard_set(tmp_path)
    assert shards.dtype == np.dtype("uint16")
    out = shards.gather(np.array([0]), np.empty((1, 3), dtype=shards.dtype))
    assert out.tolist() == [[1, 300, 65_535]]


def test_shard_changed_after_start_up(make_corpus: Callable) -> None:
    corpus = make_corpus([40, 40], fmt="raw")
    shards = shard_set(corpus.folder, "uint16")
    with open(corpus.paths[1], "ab") as fh:
        fh.write(b"\x01\x00")
    with pytest.raises(
        FormatError,
        match=r"shard_00001\.bin changed since the catalog was built \(80 bytes.*82 bytes",
    ):
        shards.gather(np.array([45]), np.empty((1, 5), dtype=np.uint16))
    corpus.paths[0].unlink()
    with pytest.raises(FormatError, match=r"shard_00000\.bin: cannot open"):
        shards.gather(np.array([0]), np.empty((1, 5), dtype=np.uint16))


@pytest.mark.parametrize(
    ("soft", "limit"),
    [(64, 8), (1024, 128), (4096, 512), (20_000, 2500), (1 << 20, 8192), (-1, 8192)],
)
def test_open_shards_follow_the_file_limit(
    monkeypatch: pytest.MonkeyPatch, soft: int, limit: int
) -> None:
    import resource

    infinity = resource.RLIM_INFINITY
    monkeypatch.setattr(resource, "getrlimit", lambda _: (infinity if soft < 0 else soft, infinity))
    assert gather._open_shard_limit() == limit
