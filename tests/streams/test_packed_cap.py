"""``sampling.max_documents_per_sample`` in packed mode: no sample holds more items than the
cap, every item is still drawn once per epoch, runs resume exactly, bad values are refused,
and leaving it unset keeps every plan, plan key and state of before."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import streamload
from streamload.config import SamplingMode
from streamload.errors import ConfigError, StateError
from streamload.modes.packed.plan_cache import build_plan_arrays, plan_description
from streamload.plan.packing import document_items
from streamload.streams.interface import SampleStream
from streamload.testing import assert_resumes_exactly
from tests.helpers.corpus_factory import Corpus
from tests.streams.test_packed import epoch_rows, packed_config, split_rows
from tests.streams.test_packed_properties import SETTINGS, config, items_of, shards, write


@SETTINGS
@given(layout=shards, seq_len=st.integers(3, 12), cap=st.integers(1, 4))
def test_no_sample_holds_more_than_the_cap_and_every_item_once(
    tmp_path_factory: Any, layout: list[list[int]], seq_len: int, cap: int
) -> None:
    folder = tmp_path_factory.mktemp("corpus")
    docs = write(folder, layout, seed=seq_len)
    cfg = config(folder, seq_len, "packed")
    cfg["sampling"]["max_documents_per_sample"] = cap
    stream = streamload.build_stream(streamload.load_config(cfg))
    tokens, lengths, starts = epoch_rows(stream)
    per_sample = [int(np.count_nonzero(row[:n])) for row, n in zip(starts, lengths, strict=True)]
    assert max(per_sample) <= cap
    assert dict(split_rows(tokens, lengths, starts)) == items_of(docs, seq_len)
    plan = stream.sources[0].plan
    assert int(np.diff(plan.offsets).max()) <= cap  # the plan itself, not only the rows


@pytest.mark.filterwarnings("ignore:each pass of")  # a partial last batch is dropped
@pytest.mark.parametrize("cap", [1, 2, 3])
def test_capped_runs_resume_exactly(make_corpus: Callable[..., Corpus], cap: int) -> None:
    corpus = make_corpus([500, 300], mean_doc_len=4.0)
    cfg = packed_config(corpus, max_documents_per_sample=cap)
    assert_resumes_exactly(
        lambda: streamload.build_loader(cfg, batch_size=3), passes=2, save_points=[0, 1, 7]
    )


def test_the_cap_binds_raises_padding_and_keys_its_own_plan(
    make_corpus: Callable[..., Corpus],
) -> None:
    corpus = make_corpus([900], mean_doc_len=3.0)  # ~5 items fit a sample of 17 tokens
    plain_cfg = packed_config(corpus)
    plain = streamload.build_stream(streamload.load_config(plain_cfg)).sources[0]
    capped = streamload.build_stream(
        streamload.load_config(packed_config(corpus, max_documents_per_sample=2))
    ).sources[0]
    assert int(np.diff(plain.plan.offsets).max()) > 2
    assert capped.plan.num_samples > plain.plan.num_samples
    assert capped.packing_report()["padding_tokens"] > plain.packing_report()["padding_tokens"]
    assert capped.plan.files and plain.plan.files
    assert set(capped.plan.files.values()).isdisjoint(plain.plan.files.values())
    key = plan_description(streamload.load_config(plain_cfg), plain.catalog)
    assert "max_documents_per_sample" not in key  # uncapped plans keep their cache key
    capped_cfg = streamload.load_config(packed_config(corpus, max_documents_per_sample=2))
    assert plan_description(capped_cfg, plain.catalog) == key | {"max_documents_per_sample": 2}


def test_unset_gives_the_same_plan_arrays_and_fingerprint(
    make_corpus: Callable[..., Corpus],
) -> None:
    rng = np.random.default_rng(0)
    bounds = np.concatenate([[0], np.cumsum(rng.integers(0, 60, size=3000))])
    items = document_items(bounds, 16, "split")
    before = build_plan_arrays(items, SamplingMode.PACKED, 16)
    after = build_plan_arrays(items, SamplingMode.PACKED, 16, None)
    assert before.keys() == after.keys()
    for name, array in before.items():
        assert array.dtype == after[name].dtype and array.tobytes() == after[name].tobytes()
    corpus = make_corpus([400], mean_doc_len=5.0)
    stream = SampleStream.from_config(streamload.load_config(packed_config(corpus)))
    assert "max_documents_per_sample" not in stream.fingerprint()["packing"]
    capped = packed_config(corpus, max_documents_per_sample=3)
    fingerprint = SampleStream.from_config(streamload.load_config(capped)).fingerprint()
    assert fingerprint["packing"]["max_documents_per_sample"] == 3


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (0, "sampling.max_documents_per_sample = 0 must be >= 1"),
        (-2, "sampling.max_documents_per_sample = -2 must be >= 1"),
        (2.0, "sampling.max_documents_per_sample = 2.0 must be an integer"),
        (True, "sampling.max_documents_per_sample = True must be an integer"),
        ("4", "sampling.max_documents_per_sample = '4' must be an integer"),
    ],
)
def test_bad_values_are_refused_naming_the_field(
    make_corpus: Callable[..., Corpus], value: Any, expected: str
) -> None:
    corpus = make_corpus([100])
    with pytest.raises(ConfigError, match=expected.replace(".", r"\.")):
        streamload.load_config(packed_config(corpus, max_documents_per_sample=value))


def test_other_modes_refuse_it(make_corpus: Callable[..., Corpus]) -> None:
    corpus = make_corpus([100])
    with pytest.raises(ConfigError, match="has no meaning with mode = 'padded'"):
        streamload.load_config(packed_config(corpus, "padded", max_documents_per_sample=2))
    with pytest.raises(ConfigError, match="max_documents_per_sample"):
        streamload.load_config(corpus.config(sampling={"max_documents_per_sample": 2}))


def test_plan_shows_the_cap(
    make_corpus: Callable[..., Corpus], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from streamload.cli.main import main

    corpus = make_corpus([600], mean_doc_len=4.0)
    (tmp_path / "c.json").write_text(json.dumps(packed_config(corpus, max_documents_per_sample=2)))
    assert main(["plan", str(tmp_path / "c.json"), "--steps", "2"]) == 0
    assert "at most 2 documents per sample" in capsys.readouterr().out
    assert main(["plan", str(tmp_path / "c.json"), "--steps", "2", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["max_documents_per_sample"] == 2


def test_a_capped_state_does_not_load_into_an_uncapped_loader(
    make_corpus: Callable[..., Corpus],
) -> None:
    corpus = make_corpus([400], mean_doc_len=4.0)
    capped = streamload.build_loader(
        packed_config(corpus, max_documents_per_sample=2), batch_size=2
    )
    next(iter(capped))
    plain = streamload.build_loader(packed_config(corpus), batch_size=2)
    with pytest.raises(StateError, match="max_documents_per_sample"):
        plain.load_state_dict(capped.state_dict())
