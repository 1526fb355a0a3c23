"""Properties of text sources (hypothesis): for any corpus of text files (any number of files,
documents, empty texts and lengths), seq_len and mode, a text source's batches equal
``streamload tokenize --keep-order`` of the same files read as tokens; and every entry point
resumes exactly on it (``StreamDataset`` under ``StatefulDataLoader``, with workers), in a
mixture with a token source too."""

from __future__ import annotations

import json
import tempfile
from pathlib import Path
from typing import Any

import pytest
import torch
from hypothesis import HealthCheck, assume, event, given, settings
from hypothesis import strategies as st
from torchdata.stateful_dataloader import StatefulDataLoader

import streamload
from streamload import RankSpec, SampleStream, StreamDataset, load_config
from streamload.testing import assert_resumes_exactly
from tests.catalog.test_text_source import (
    WORDS,
    assert_same,
    batches,
    text_config,
    tokenize_to,
    with_mode,
    write_corpus,
)

pytestmark = [
    pytest.mark.filterwarnings("ignore:each pass of"),
    pytest.mark.filterwarnings("ignore:.set_vital. is deprecated"),
]

texts = st.lists(
    st.lists(st.sampled_from([*WORDS, "", "\n", "é", "  "]), max_size=40).map(" ".join),
    min_size=1,
    max_size=12,
)


@settings(max_examples=12, deadline=None, suppress_health_check=list(HealthCheck))
@given(
    files=st.lists(texts, min_size=1, max_size=5),
    seq_len=st.integers(4, 24),
    mode=st.sampled_from(["concat", "packed", "padded", "megatron"]),
)
def test_a_text_source_reads_what_tokenize_keep_order_writes(
    files: list[list[str]], seq_len: int, mode: str
) -> None:
    words = sum(len(t.split()) for f in files for t in f)
    assume(words >= 3 * seq_len)  # enough text for batches
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        (root / "in").mkdir()
        for i, docs in enumerate(files):
            lines = [json.dumps({"text": t}) for t in docs]
            (root / "in" / f"f{i}.jsonl").write_text("\n".join(lines) + "\n")
        tokenize_to(root / "tok", str(root / "in" / "*.jsonl"))
        config = text_config(root / "in", root / "cache", mode)
        config["seq_len"] = seq_len
        tokens = with_mode(
            {**config, "sources": [{"name": "web", "path": str(root / "tok")}],
             "sampling": {"mode": mode}},
            mode,
        )  # fmt: skip
        tokens["seq_len"] = seq_len
        try:
            expected = batches(tokens, 8)
        except Exception as exc:  # e.g. no sample fits: the text source must say the same
            with pytest.raises(type(exc)):
                batches(config, 8)
            return
        event(f"{mode}: {len(expected)} batches")
        assert_same(batches(config, 8), expected)


@pytest.fixture(scope="module")
def mixed(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    root = tmp_path_factory.mktemp("mixed")
    write_corpus(root / "in", files=4)
    tokenize_to(root / "tok", str(root / "in" / "*.jsonl"), keep_order=False)
    config = text_config(root / "in", root / "cache", "packed", weight=0.7)
    config["sources"].append({"name": "tokens", "path": str(root / "tok"), "weight": 0.3})
    config["global_batch_size"] = 4
    config["sampling"]["num_samples"] = 80  # a mixture's pass is endless without it
    return config


@pytest.mark.parametrize("workers", [0, 2])
def test_stream_dataset_under_stateful_dataloader_resumes_exactly(
    mixed: dict[str, Any], workers: int
) -> None:
    def make() -> StatefulDataLoader:
        stream = SampleStream.from_config(load_config(mixed))
        return StatefulDataLoader(
            StreamDataset(stream, RankSpec(0, 1, 4)), batch_size=None, num_workers=workers
        )

    assert_resumes_exactly(make, save_points=[0, 5, 13])


def test_a_mixture_of_text_and_tokens_resumes_on_another_world_size(
    mixed: dict[str, Any],
) -> None:
    whole = streamload.build_loader(mixed, batch_size=4)
    it = iter(whole)
    for _ in range(5):
        next(it)
    state = whole.state_dict()
    reference = [next(it) for _ in range(8)]
    halves = []
    for rank in range(2):
        loader = streamload.build_loader(mixed, batch_size=2, rank=rank, world_size=2)
        loader.load_state_dict(state)
        part = iter(loader)
        halves.append([next(part) for _ in range(8)])
    for step, batch in enumerate(reference):
        for key in ("input_ids", "labels", "source_ids"):
            joined = torch.cat([halves[0][step][key], halves[1][step][key]])
            assert torch.equal(joined, batch[key]), (step, key)
    assert {0, 1} <= set(torch.cat([b["source_ids"] for b in reference]).tolist())
