"""A mixture's random access (``SourceStream.locate``, behind ``streamload samples`` and
``read``) walks counts up to the first batch asked for and allocates only from there
(issue 31 item 5): the same (source, source-local index) as the allocation of every batch from
the start, including where a source's policy ends the stream."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from streamload import SampleStream, build_loader
from streamload import load_config as load
from streamload.plan.mixture import MixtureCursor, allocate_batches
from streamload.testing import assert_resumes_exactly
from tests.test_mixture_loader import SCHEDULE, SIZES, WEIGHTS, mixture, write_sources

pytestmark = pytest.mark.filterwarnings("ignore:each pass of", "ignore:the stream ended")


@pytest.fixture(scope="module")
def paths(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    return write_sources(tmp_path_factory.mktemp("locate"), SIZES)


@pytest.mark.parametrize("per_source", [{}, {"c": {"policy": "stop"}}], ids=["endless", "stop"])
def test_locate_anywhere_equals_the_allocation_from_the_start(
    paths: dict[str, str], per_source: dict[str, Any]
) -> None:
    stream = SampleStream.from_config(
        load(mixture(paths, WEIGHTS, SCHEDULE, per_source=per_source))
    )
    big, steps = 12, 30
    sources, local, _ = allocate_batches(stream.phases, big, MixtureCursor.start(3), steps)
    limit = stream.sources[2].limit
    ends = np.flatnonzero(((sources == 2) & (local >= (limit or 10**9))).any(axis=1))
    delivered = int(ends[0]) * big if ends.size else steps * big
    rng = np.random.default_rng(0)
    assert delivered > 30
    for lo in sorted(
        {0, 1, 13, delivered // 2, delivered - 5, 95, 150} - set(range(delivered, 999))
    ):
        ids = rng.integers(lo, min(lo + 30, delivered), size=(2, 4))
        got_sources, got_local = stream.locate(0, ids)
        assert got_sources.tolist() == sources.ravel()[ids].tolist()
        assert got_local.tolist() == local.ravel()[ids].tolist()
    if per_source:
        with pytest.raises(IndexError, match="after the end of the stream"):
            stream.locate(0, np.array([delivered + big]))
    assert stream.locate(0, np.zeros(0, np.int64))[0].shape == (0,)


@pytest.mark.parametrize("replayed", [True, False], ids=["replayed", "bounds"])
def test_a_mixture_of_many_sources_resumes_exactly(
    tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch, replayed: bool
) -> None:
    """80 sources (the numpy walk) under a schedule, num_samples set: every state resumes onto
    exactly the uninterrupted batches, whether its position is replayed or checked against its
    bounds at load."""
    import streamload.streams.cursor as cursor_module

    names = [f"s{i}" for i in range(80)]
    root = tmp_path_factory.mktemp("many")
    paths = write_sources(root, {n: [40 + 3 * i] for i, n in enumerate(names)})
    rng = np.random.default_rng(5)
    weights = {n: float(w) for n, w in zip(names, rng.random(80) + 0.05, strict=True)}
    later = {n: float(w) for n, w in zip(names, rng.random(80), strict=True)}
    cfg = mixture(
        paths,
        weights,
        [{"start_step": 4, "weights": later}],
        big=96,
        sampling={"num_samples": 96 * 9},
    )
    monkeypatch.setattr(cursor_module, "MAX_REPLAYED", 1 << 40 if replayed else 0)
    assert_resumes_exactly(lambda: build_loader(cfg, batch_size=96), max_state_bytes=None)
