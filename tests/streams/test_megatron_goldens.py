"""streamload reproduces megatron-core 0.16.1's GPT and blend indices exactly.

The golden arrays were written by ``tests/golden/make_megatron_goldens.py`` with the real
megatron-core. The last tests run megatron-core itself when it is importable (it is not a
project dependency: ``PYTHONPATH=/tmp/mcore pytest tests/streams/test_megatron_goldens.py``).
"""

from __future__ import annotations

import json
from typing import Any

import numpy as np
import pytest

from streamload.errors import ConfigError
from streamload.plan.megatron import (
    build_gpt_indices,
    build_sample_index,
    num_epochs,
    separate_last_epoch,
    split_ranges,
)
from streamload.plan.megatron_blend import (
    blend_sizes,
    blended_dataset_indices,
    build_blending_indices,
    build_exhaustive_blending_indices,
    normalize,
)
from tests.helpers.paths import TESTS

GOLDEN = TESTS / "golden" / "megatron"
GPT_CASES = sorted(p.stem for p in GOLDEN.glob("gpt_*.npz"))
BLEND_CASES = sorted(p.stem for p in GOLDEN.glob("blend_*.npz"))


def load(name: str) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
    with np.load(GOLDEN / f"{name}.npz") as data:
        arrays = {key: data[key] for key in data.files}
    return json.loads(str(arrays.pop("meta"))), arrays


def assert_same(ours: np.ndarray, golden: np.ndarray, what: str) -> None:
    assert ours.dtype == golden.dtype, f"{what}: dtype {ours.dtype} != {golden.dtype}"
    np.testing.assert_array_equal(ours, golden, err_msg=what)


def check_gpt(arrays: dict[str, np.ndarray], prefix: str, num_samples: int | None, **kw: Any):
    """Our indices for one GPTDataset equal the golden ones (and so do its split indices)."""
    ours = build_gpt_indices(
        arrays[f"{prefix}sequence_lengths"], arrays[f"{prefix}indices"], num_samples, **kw
    )
    for field, value in zip(ours._fields, ours, strict=True):
        assert_same(value, arrays[f"{prefix}{field}"], f"{prefix}{field}")


def test_goldens_exist() -> None:
    assert len(GPT_CASES) >= 10 and len(BLEND_CASES) >= 4


@pytest.mark.parametrize("name", GPT_CASES)
def test_gpt_golden(name: str) -> None:
    meta, arrays = load(name)
    lengths = arrays["sequence_lengths"]
    begin, end = split_ranges(meta["split"], lengths.size)[meta["split_index"]]
    assert_same(np.arange(begin, end, dtype=np.int32), arrays["indices"], "indices")
    check_gpt(
        arrays,
        "",
        meta["num_samples"],
        seq_len=meta["seq_len"],
        seed=meta["seed"],
        add_extra_token=meta["add_extra_token"],
        drop_last_partial=meta["drop_last_partial"],
    )
    assert arrays["sample_index"].shape[0] - 1 == meta["len"]


@pytest.mark.parametrize(
    ("name", "epochs", "separate"),
    [
        ("gpt_e1", 1, False),
        ("gpt_e3_separate", 3, True),
        ("gpt_e3_seed7", 3, True),
        ("gpt_seq7_e3", 3, True),
        ("gpt_e2_not_separate", 2, False),
        ("gpt_no_extra_e2", 2, False),
    ],
)
def test_golden_cases_cover_epoch_rules(name: str, epochs: int, separate: bool) -> None:
    meta, arrays = load(name)
    tpe = int(arrays["sequence_lengths"][arrays["indices"]].sum())
    extra = int(meta["add_extra_token"])
    e = num_epochs(tpe, meta["num_samples"], meta["seq_len"], extra)
    assert e == epochs == arrays["document_index"].size // arrays["indices"].size
    assert separate_last_epoch(tpe, e, meta["num_samples"], meta["seq_len"], extra)[0] is separate


def test_valid_keep_last_runs_out_on_the_last_row() -> None:
    meta, arrays = load("gpt_split_valid_keep_last")
    assert not meta["drop_last_partial"]
    lengths, doc = arrays["sequence_lengths"], arrays["document_index"]
    last = arrays["sample_index"][-1].tolist()
    assert last == [doc.size - 1, int(lengths[doc[-1]]) - 1]


@pytest.mark.parametrize("name", BLEND_CASES)
def test_blend_golden(name: str) -> None:
    meta, arrays = load(name)
    count = len(meta["num_samples"])
    if meta["weights"] is None:
        lengths = [arrays[f"ds{d}_sample_index"].shape[0] - 1 for d in range(count)]
        requested = [None] * count
        weights: list[float] = lengths
        size = None if meta["size"] is None else min(meta["size"], sum(lengths))
    else:
        sizes = blend_sizes(meta["weights"], meta["size"])
        requested = list(sizes.build)
        weights, size = normalize(meta["weights"]).tolist(), sizes.total
    assert requested == meta["num_samples"]
    assert size == meta["blend_size"]
    for d in range(count):
        check_gpt(arrays, f"ds{d}_", requested[d], seq_len=meta["seq_len"], seed=meta["seed"])
    index, sample = blended_dataset_indices(weights, size)
    assert_same(index, arrays["dataset_index"], "dataset_index")
    assert_same(sample, arrays["dataset_sample_index"], "dataset_sample_index")
    if size is not None:
        assert normalize(weights).tolist() == meta["blend_weights"]


# ---- live: megatron-core itself (skipped unless importable) --------------------------------


@pytest.fixture(scope="module")
def helpers() -> Any:
    pytest.importorskip("megatron.core")
    from megatron.core.datasets import helpers

    return helpers


def test_live_sample_index(helpers: Any) -> None:
    rng = np.random.default_rng(0)
    for _ in range(300):
        lengths = rng.integers(0, int(rng.integers(2, 40)), int(rng.integers(1, 30)), np.int32)
        epochs, seq_len = int(rng.integers(1, 4)), int(rng.integers(2, 40))
        extra, drop = bool(rng.integers(2)), bool(rng.integers(2))
        tpe = int(lengths.sum())
        if tpe <= 1:
            continue
        doc = np.tile(np.arange(lengths.size, dtype=np.int32), epochs)
        rng.shuffle(doc)
        args = (lengths, doc, seq_len, epochs, tpe, drop, extra)
        try:
            want = helpers.build_sample_idx(*args)
        except AssertionError:  # a negative last offset (empty last document)
            with pytest.raises(ConfigError, match="empty"):
                build_sample_index(*args)
            continue
        got = build_sample_index(*args)
        assert_same(got, want, f"{lengths.tolist()} L={seq_len} E={epochs} {extra} {drop}")


def test_live_blending(helpers: Any) -> None:
    rng = np.random.default_rng(1)
    for trial in range(30):
        count = int(rng.integers(1, 9))
        weights = normalize(rng.dirichlet(np.ones(count) * (0.3 if trial % 2 else 3.0)))
        size = int(rng.integers(0, 40_000))
        index, sample = np.zeros(size, np.int16), np.zeros(size, np.int64)
        helpers.build_blending_indices(index, sample, weights, count, size, False)
        ours = build_blending_indices(weights, size)
        assert_same(ours[0], index, "dataset_index")
        assert_same(ours[1], sample, "dataset_sample_index")
        sizes = rng.integers(1, 8000, count).astype(np.int64)
        index, sample = np.zeros(sizes.sum(), np.int16), np.zeros(sizes.sum(), np.int64)
        helpers.build_exhaustive_blending_indices(index, sample, sizes, count)
        ours = build_exhaustive_blending_indices(sizes)
        assert_same(ours[0], index, "exhaustive dataset_index")
        assert_same(ours[1], sample, "exhaustive dataset_sample_index")


def test_live_gpt_dataset_builds(helpers: Any) -> None:
    """Whole megatron-core builds (GPTDataset and a blend) on data written by MegatronWriter."""
    import importlib.util

    script = TESTS / "golden" / "make_megatron_goldens.py"
    spec = importlib.util.spec_from_file_location("make_megatron_goldens", script)
    assert spec is not None and spec.loader is not None
    goldens = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(goldens)
    for seed, seq_len, train in [(3, 5, 700), (99, 32, 40), (2**31, 11, 95)]:
        gpt = goldens.build((["A"], None), "80,15,5", [train, 9, None], seed=seed, seq_len=seq_len)
        for which, dataset in enumerate(gpt):
            arrays = goldens.gpt_arrays(dataset)
            check_gpt(arrays, "", dataset.num_samples, seq_len=seq_len, seed=seed)
            begin, end = split_ranges("80,15,5", arrays["sequence_lengths"].size)[which]
            assert_same(np.arange(begin, end, dtype=np.int32), arrays["indices"], "indices")
    blend = goldens.build((["A", "B"], [0.25, 0.75]), "100,0,0", [333, 0, 0], seed=5)[0]
    sizes = blend_sizes([0.25, 0.75], 333)
    index, sample = blended_dataset_indices(normalize([0.25, 0.75]), sizes.total)
    assert_same(index, np.asarray(blend.dataset_index), "dataset_index")
    assert_same(sample, np.asarray(blend.dataset_sample_index), "dataset_sample_index")
    for d, dataset in enumerate(blend.datasets):
        assert dataset.num_samples == sizes.build[d]
        check_gpt(goldens.gpt_arrays(dataset), "", sizes.build[d], seq_len=16, seed=5)
