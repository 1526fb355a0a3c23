"""vsl: building a stream whose epoch uses under half of its pieces' tokens warns once,
naming ``tokens_per_batch`` and a smaller one that would use at least half."""

from __future__ import annotations

import warnings
from pathlib import Path

import numpy as np
import pytest

from streamload import SampleStream, load_config
from streamload.modes.vsl.stream import unused_tokens_warning
from tests.helpers.corpus_factory import Corpus, write_corpus

LENGTHS = (4, 8, 16, 32)


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> Corpus:
    return write_corpus(
        Path(tmp_path_factory.mktemp("vslunused")), [5000, 2000], mean_doc_len=50.0, seed=7
    )


def build(corpus: Corpus, tokens_per_batch: int) -> tuple[SampleStream, list[str]]:
    cfg = corpus.config(
        seq_len=32,
        sampling={"mode": "vsl", "min_seq_len": 4, "tokens_per_batch": tokens_per_batch},
    )
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        stream = SampleStream.from_config(load_config(cfg))
    return stream, [str(w.message) for w in caught if w.category is UserWarning]


def test_an_epoch_that_leaves_most_tokens_unused_warns_once(corpus: Corpus) -> None:
    stream, messages = build(corpus, 2560)
    assert stream.order.steps == 1  # one batch of length 32; every other length falls short
    held = sum(int(np.diff(s.pieces.offsets) @ np.array(LENGTHS)) for s in stream.sources)
    assert len(messages) == 1
    assert messages[0].startswith(
        f"vsl: an epoch uses 2,560 of the {held:,} tokens in pieces ({100 * 2560 // held} %): "
        "with tokens_per_batch = 2,560"
    )
    suggested = int(messages[0].split("; tokens_per_batch = ")[1].split(" ")[0].replace(",", ""))
    better, again = build(corpus, suggested)
    assert again == [] and 2 * better.order.steps * suggested >= held
    assert f"would use {better.order.steps * suggested:,}" in messages[0]


def test_an_epoch_that_uses_most_tokens_is_silent(corpus: Corpus) -> None:
    assert build(corpus, 128)[1] == []


def test_the_warning_of_a_worked_example() -> None:
    # pieces of 4, 8, 16, 32 tokens: 248 + 512 + 1,168 + 4,736 = 6,664 tokens. A batch of
    # 2,560 tokens needs 80 pieces of 32 (one batch) and more of the others than there are.
    pieces = np.array([62, 64, 73, 148])
    message = unused_tokens_warning(pieces, LENGTHS, 1, 2560)
    assert message == (
        "vsl: an epoch uses 2,560 of the 6,664 tokens in pieces (38 %): with tokens_per_batch "
        "= 2,560 the pieces of a length that do not fill a whole batch wait for later epochs; "
        "tokens_per_batch = 2,368 would use 4,736 (71 %)"
    )  # 2,368 = 74 pieces of 32: 148 // 74 = 2 batches
    assert unused_tokens_warning(pieces, LENGTHS, 2, 2368) is None
    assert "no smaller tokens_per_batch" in str(unused_tokens_warning(pieces, LENGTHS, 0, 32))
