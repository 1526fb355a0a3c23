"""The ``.tok.json`` record of a ``format = "jsonl"`` source is checked, never trusted.

A record names its tokenizer; its vocabulary size, BOS/EOS ids and every field's type are
checked against that tokenizer and the file, so an edited or damaged record is a
``FormatError`` naming it instead of a traceback or ids that wrap in a too-narrow dtype.
"""

from __future__ import annotations

import dataclasses
import json
import random
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from streamload.catalog.sources import describe_source
from streamload.config import SourceConfig
from streamload.errors import FormatError
from streamload.formats.jsonl.jsonl import prepare_jsonl
from streamload.formats.registry import open_shard
from tests.helpers.tokenizer import train_bpe

WORDS = ["fox", "dog", "über", "naïve", "zebra", "quartz", "jump", "over", "lazy", "the"]


@pytest.fixture(scope="module")
def tokenizer(tmp_path_factory: pytest.TempPathFactory) -> str:
    """A 300-id byte-level BPE (EOS = 0, BOS = 1)."""
    rng = random.Random(0)
    texts = [" ".join(rng.choice(WORDS) for _ in range(12)) for _ in range(200)]
    path = tmp_path_factory.mktemp("tok") / "tokenizer.json"
    train_bpe(path, texts)
    return str(path)


@pytest.fixture
def jsonl(tokenizer: str, tmp_path: Path) -> Path:
    """``a.jsonl`` (20 documents) prepared with EOS 0; its record is ``a.tok.json``."""
    rng = random.Random(1)
    path = tmp_path / "a.jsonl"
    with open(path, "w", encoding="utf-8") as fh:
        for i in range(20):
            text = " ".join(rng.choice(WORDS) for _ in range(rng.randint(1, 20)))
            fh.write(json.dumps({"id": str(i), "text": text}) + "\n")
    prepare_jsonl(path, tokenizer, eos_token_id=0)
    return path


def describe(path: Path, **kw: Any) -> Any:
    return describe_source(SourceConfig(name="j", path=str(path), format="jsonl", **kw)).shards[0]


def edit_record(jsonl: Path, **changes: Any) -> Path:
    record_file = jsonl.with_suffix(".tok.json")
    record = json.loads(record_file.read_text())
    record.update(changes)
    record_file.write_text(json.dumps(record))
    return record_file


def test_a_sound_record_reads_ids_below_the_vocabulary(jsonl: Path) -> None:
    info = describe(jsonl)
    assert np.dtype(info.dtype) == np.dtype("<u2")
    tokens = open_shard(info).tokens(0, info.num_tokens)
    assert tokens.size == info.num_tokens and int(tokens.max()) < 300


@pytest.mark.parametrize("vocab", [200, 256, 301, 70_000])
def test_wrong_vocab_size_is_refused(jsonl: Path, vocab: int) -> None:
    """vocab_size 200 used to make the dtype uint8 and ids >= 256 wrap silently."""
    record = edit_record(jsonl, vocab_size=vocab)
    with pytest.raises(FormatError, match=rf"{record}: vocab_size = {vocab} .* 300"):
        describe(jsonl)


@pytest.mark.parametrize("key", ["bos_token_id", "eos_token_id"])
def test_special_ids_outside_the_vocabulary_are_refused(jsonl: Path, key: str) -> None:
    record = edit_record(jsonl, **{key: 300})
    with pytest.raises(FormatError, match=rf"{record}: {key} = 300 .*vocab"):
        describe(jsonl)


def test_dtype_too_narrow_is_refused(jsonl: Path) -> None:
    with pytest.raises(FormatError, match=r"a\.jsonl: dtype uint8 cannot hold 300 token ids"):
        describe(jsonl, dtype="uint8")


@pytest.mark.parametrize("cut", [0, 1, 2, 17, 100, -40, -1])
def test_truncated_record_is_a_format_error(jsonl: Path, cut: int) -> None:
    record = jsonl.with_suffix(".tok.json")
    text = record.read_bytes()
    record.write_bytes(text[:cut])
    with pytest.raises(FormatError, match=rf"{record}: "):
        describe(jsonl)


@pytest.mark.parametrize(
    ("changes", "field"),
    [
        ({"vocab_size": "300"}, "vocab_size"),
        ({"vocab_size": True}, "vocab_size"),
        ({"vocab_size": 0}, "vocab_size"),
        ({"lengths": "12"}, "lengths"),
        ({"lengths": [3, -1]}, "lengths"),
        ({"lengths": [3, 2.5]}, "lengths"),
        ({"lengths": [2**70]}, "lengths"),
        ({"index": 5}, "index"),
        ({"index": "missing.idx"}, "index"),
        ({"tokenizer": None}, "tokenizer"),
        ({"tokenizer_sha256": 7}, "tokenizer_sha256"),
        ({"bos_token_id": "1"}, "bos_token_id"),
        ({"eos_token_id": -1}, "eos_token_id"),
        ({"text_field": ["text"]}, "text_field"),
        ({"jsonl_size": None}, "jsonl_size"),
    ],
)
def test_malformed_record_field_is_named(jsonl: Path, changes: dict, field: str) -> None:
    record = edit_record(jsonl, **changes)
    with pytest.raises(FormatError, match=rf"{record}: .*{field}"):
        describe(jsonl)


@pytest.mark.parametrize("body", ["[]", "null", "7", '"text"', "{}", '{"lengths": []}'])
def test_record_that_is_not_a_record_is_refused(jsonl: Path, body: str) -> None:
    record = jsonl.with_suffix(".tok.json")
    record.write_text(body)
    with pytest.raises(FormatError, match=rf"{record}: "):
        describe(jsonl)


def test_record_of_invalid_utf8_is_refused(jsonl: Path) -> None:
    record = jsonl.with_suffix(".tok.json")
    record.write_bytes(b'{"vocab_size": "\xff\xfe"}')
    with pytest.raises(FormatError, match=rf"{record}: "):
        describe(jsonl)


def test_ids_that_do_not_fit_the_dtype_are_refused_at_read_time(jsonl: Path) -> None:
    """A description that slipped past the checks (here forced to uint8) never wraps ids:
    reading a document with an id above 255 is a FormatError naming the file."""
    info = dataclasses.replace(describe(jsonl), dtype="|u1")
    shard = open_shard(info)
    with pytest.raises(FormatError, match=r"a\.jsonl: document \d+ holds token id \d+, outside"):
        shard.tokens(0, info.num_tokens)
