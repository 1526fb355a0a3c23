"""Block reads (``storage.window_reads = "blocks"``) and the piece layout, against moto's S3
server on loopback: the same batches as the local copy, each block fetched once, far fewer
requests than exact windows when the windows cluster (``sampling.shuffle_block``)."""

from __future__ import annotations

import itertools
import tempfile
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from streamload import ConfigError, build_loader
from streamload.config.storage import StorageConfig
from streamload.remote.array import RemoteTokens
from streamload.remote.handle import RemoteObject, StorageHandle
from streamload.remote.layout import piece_layout
from streamload.remote.store import RemoteStore
from streamload.testing import assert_batches_equal, assert_resumes_exactly
from tests.helpers.corpus_factory import Corpus
from tests.servers.http import FaultPlan, FaultProxy
from tests.servers.s3 import S3Server

pytest.importorskip("moto.server")
pytest.importorskip("s3fs")
pytestmark = pytest.mark.filterwarnings("ignore:each pass")

FAST = {"retries": 3, "backoff": 0.01, "timeout": 5.0, "stall_warning": 2.0, "stall_timeout": 20.0}
BLOCK = 512
"""Bytes per block: a few windows of 17 uint32 tokens (68 bytes) each."""


@st.composite
def ranges(draw: Any) -> tuple[int, np.ndarray, np.ndarray]:
    size = draw(st.integers(1, 5000))
    pairs = draw(
        st.lists(st.tuples(st.integers(0, size - 1), st.integers(1, 700)), min_size=1, max_size=30)
    )
    starts = np.array([a for a, _ in pairs], dtype=np.int64)
    ends = np.minimum(starts + np.array([n for _, n in pairs]), size)
    return size, starts, ends


@settings(max_examples=60, deadline=None)
@given(case=ranges(), reads=st.sampled_from(["exact", "blocks"]), block=st.integers(1, 900))
def test_layout_covers_every_range(case: Any, reads: str, block: int) -> None:
    size, starts, ends = case
    layout = piece_layout(size, starts, ends, reads, block)
    assert layout.pieces == sorted(set(layout.pieces))
    assert all(0 <= lo < hi <= size for lo, hi in layout.pieces)
    for a, b, f, t in zip(starts, ends, layout.first, layout.last, strict=True):
        spanned = layout.pieces[f : t + 1]
        assert spanned[0][0] <= a and b <= spanned[-1][1]  # the pieces hold the range...
        assert all(x[1] >= y[0] for x, y in itertools.pairwise(spanned))  # ...gapless
        if reads == "exact":
            assert spanned == [(a, b)]
        else:
            assert all(lo % block == 0 for lo, _ in spanned)


def test_window_reads_is_checked() -> None:
    assert StorageConfig(window_reads="blocks").window_reads.value == "blocks"
    with pytest.raises(ConfigError, match=r"storage\.window_reads = 'block' is not one of"):
        StorageConfig(window_reads="block")


@pytest.fixture(scope="module")
def corpus(make_corpus: Callable[..., Corpus]) -> Corpus:
    return make_corpus([900, 700, 1100, 650])


@pytest.fixture(scope="module")
def url(s3: S3Server, corpus: Corpus) -> str:
    return s3.upload_folder(corpus.folder, "corpora", uuid.uuid4().hex[:12])


def config(corpus: Corpus, url: str, options: dict, cache: Path, **storage: Any) -> dict:
    sampling = storage.pop("sampling", {"shuffle_block": 24})
    return corpus.config(
        seq_len=16,
        sampling=sampling,
        source={"path": url, "storage_options": options},
        storage={"cache_dir": str(cache), "block_size": BLOCK, **FAST, **storage},
    )


def run(cfg: dict, workers: int = 0) -> tuple[list, dict]:
    with build_loader(cfg, batch_size=4, num_workers=workers) as loader:
        got = list(loader)
        return got, loader.stats().get("storage", {}).get("web", {})


@pytest.mark.parametrize("workers", [0, 2])
def test_blocks_give_the_local_batches_fetching_each_block_once(
    s3: S3Server, corpus: Corpus, url: str, tmp_path: Path, workers: int
) -> None:
    local, _ = run(corpus.config(seq_len=16, sampling={"shuffle_block": 24}), workers)
    cfg = config(corpus, url, s3.storage_options(), tmp_path, window_reads="blocks")
    remote, stats = run(cfg, workers)
    assert_batches_equal(local, remote, "blocks vs local")
    blocks = sum(-(-(f.stat().st_size) // BLOCK) for f in corpus.folder.iterdir())
    assert 0 < stats["fetched_blocks"] <= blocks  # one pass reads each block at most once
    assert stats["errors"] == 0


def test_blocks_need_fewer_requests_than_exact_windows(
    s3: S3Server, corpus: Corpus, url: str, tmp_path: Path
) -> None:
    counts = {}
    for reads in ("exact", "blocks"):
        cfg = config(
            corpus, url, s3.storage_options(), tmp_path / reads, window_reads=reads, coalesce_gap=0
        )
        _, stats = run(cfg)
        counts[reads] = stats["requests"]
    assert counts["blocks"] * 3 < counts["exact"], counts


def test_blocks_resume_exactly_through_faults(
    s3: S3Server, corpus: Corpus, url: str, tmp_path: Path
) -> None:
    plan = FaultPlan(error_rate=0.05, truncate_rate=0.02, max_faults=40, seed=3)
    with FaultProxy(s3.endpoint, plan) as proxy:
        options = s3.storage_options(proxy.endpoint)
        cfg = config(corpus, url, options, tmp_path, window_reads="blocks", memory_size=4 * BLOCK)
        local = corpus.config(seq_len=16, sampling={"shuffle_block": 24})
        assert_resumes_exactly(
            lambda: build_loader(cfg, batch_size=4, num_workers=2),
            make_resumed=lambda: build_loader(local, batch_size=4),
            save_points=[0, 3, 10, 31],
            passes=2,
        )


@st.composite
def row_reads(draw: Any) -> dict[str, Any]:
    dtype = draw(st.sampled_from(["<u2", ">u2", "<u4", ">i4", "<i8"]))
    count = draw(st.integers(2, 400))
    length = draw(st.integers(1, min(count, 40)))
    rows = draw(st.integers(1, 30))
    starts = draw(st.lists(st.integers(0, count - length), min_size=rows, max_size=rows))
    return {
        "dtype": dtype, "count": count, "length": length, "starts": starts,
        "offset": draw(st.integers(0, 37)), "block": draw(st.integers(1, 300)),
        "reads": draw(st.sampled_from(["exact", "blocks"])),
    }  # fmt: skip


@settings(max_examples=60, deadline=None)
@given(case=row_reads())
def test_rows_read_together_equal_the_file(case: dict[str, Any]) -> None:
    """Windows of a token file at any header offset, read by exact ranges or through blocks
    of any size (not a multiple of the item size either), are the file's items."""
    dtype, count, length = np.dtype(case["dtype"]), case["count"], case["length"]
    values = (np.arange(count, dtype=np.int64) * 7919) % 30011
    starts = np.array(case["starts"], dtype=np.int64)
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "tokens.bin"
        path.write_bytes(b"\xa5" * case["offset"] + values.astype(dtype).tobytes())
        config = StorageConfig(cache_dir=folder, cache_size=0, block_size=case["block"],
                               window_reads=case["reads"])  # fmt: skip
        store = RemoteStore(StorageHandle("file", {}, config))
        try:
            obj = RemoteObject(str(path), path.stat().st_size, "v1")
            tokens = RemoteTokens(store, obj, dtype, case["offset"], count)
            got = tokens.read_rows(starts, length)
        finally:
            store.close()
    assert len(got) == starts.size
    for start, row in zip(starts.tolist(), got, strict=True):
        assert row.dtype == dtype
        np.testing.assert_array_equal(row, values[start : start + length])
