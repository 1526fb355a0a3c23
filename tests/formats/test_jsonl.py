"""``format = "jsonl"`` sources: tokenized on the fly, equal to the pre-tokenized corpus,
exactly resumable, and strict about files or tokenizers that changed after preparation."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from streamload import build_loader
from streamload.catalog.sources import describe_source
from streamload.cli.main import main
from streamload.config import SourceConfig
from streamload.errors import FormatError
from streamload.formats.jsonl.jsonl import prepare_jsonl
from streamload.formats.registry import open_shard
from streamload.testing import assert_resumes_exactly, collect_global_batches
from tests.helpers.catalog import rewrote_in_place
from tests.tokenize.test_tokenize import sentences, tokenizer_path  # noqa: F401 - the fixture

pytestmark = pytest.mark.filterwarnings("ignore:each pass of")


@pytest.fixture
def prepared(tokenizer_path: str, tmp_path: Path) -> Path:  # noqa: F811
    """``docs/a.jsonl`` and ``docs/b.jsonl`` prepared for a jsonl source, plus the same
    corpus pre-tokenized in input order as NumPy shards under ``npy/``."""
    docs = tmp_path / "docs"
    docs.mkdir()
    for name, seed in (("a", 1), ("b", 2)):
        texts = sentences(60, seed)
        texts[4] = "  spaced  "
        with open(docs / f"{name}.jsonl", "w") as fh:
            fh.writelines(json.dumps({"id": str(i), "text": t}) + "\n" for i, t in enumerate(texts))
    common = ["--tokenizer", tokenizer_path, "--eos-token-id", "0", "--no-progress"]
    assert (
        main(["tokenize", "--format", "jsonl", "--documents", str(docs / "*.jsonl"), *common]) == 0
    )
    for name in ("a", "b"):  # ring of one, batches of one: input order
        args = ["tokenize", "--format", "numpy", "--documents", str(docs / f"{name}.jsonl"),
                "--destination", str(tmp_path / f"npy_{name}"), "--ring-size", "1",
                "--batch-size", "1", *common]  # fmt: skip
        assert main(args) == 0
    npy = tmp_path / "npy"
    npy.mkdir()
    for name in ("a", "b"):
        shutil.copy(tmp_path / f"npy_{name}" / "part-0-00000.npy", npy / f"{name}.npy")
    return tmp_path


def config(path: str, fmt: str) -> dict[str, Any]:
    return {
        "seq_len": 16,
        "seed": 3,
        "eos_token_id": 0,
        "vocab_size": 300,
        "sources": [{"name": "s", "path": path, "format": fmt}],
        "packing": {"masks": True},
    }


def test_loader_over_jsonl_equals_loader_over_pretokenized(prepared: Path) -> None:
    jsonl = config(str(prepared / "docs" / "*.jsonl"), "jsonl")
    numpy = config(str(prepared / "npy"), "auto")
    got = collect_global_batches([build_loader(jsonl, batch_size=4)])
    want = collect_global_batches([build_loader(numpy, batch_size=4)])
    assert len(got) == len(want) > 10
    for a, b in zip(got, want, strict=True):
        assert a.keys() == b.keys()
        for key in a:
            assert a[key].equal(b[key]), key


def test_auto_sniffs_a_prepared_jsonl(prepared: Path) -> None:
    source = SourceConfig(name="s", path=str(prepared / "docs" / "*.jsonl"))
    infos = describe_source(source).shards
    assert [i.format for i in infos] == ["jsonl", "jsonl"]
    shard = open_shard(infos[0])
    bounds = shard.document_bounds()
    assert bounds is not None and bounds.size == 61
    assert shard.tokens(int(bounds[5]) - 2, int(bounds[5]) + 3).size == 5


def test_jsonl_source_resumes_exactly(prepared: Path) -> None:
    cfg = config(str(prepared / "docs" / "*.jsonl"), "jsonl")
    assert_resumes_exactly(lambda: build_loader(cfg, batch_size=4), save_points=[0, 1, 7, 20])


def test_changed_file_or_tokenizer_is_refused(prepared: Path, tokenizer_path: str) -> None:  # noqa: F811
    source = SourceConfig(name="s", path=str(prepared / "docs" / "a.jsonl"), format="jsonl")
    with open(prepared / "docs" / "a.jsonl", "a") as fh:
        fh.write(json.dumps({"id": "new", "text": "fox"}) + "\n")
    with pytest.raises(FormatError, match="the file changed: prepare it again"):
        describe_source(source)
    prepare_jsonl(prepared / "docs" / "a.jsonl", tokenizer_path, eos_token_id=0)
    (info,) = describe_source(source).shards  # an evolving corpus: prepared again
    assert info.meta["num_documents"] == 61
    (prepared / "docs" / "b.tok.json").unlink()
    other = SourceConfig(name="s", path=str(prepared / "docs" / "b.jsonl"), format="jsonl")
    with pytest.raises(FormatError, match=r"tokenization record .* is missing"):
        describe_source(other)


def test_source_with_a_tokenizer_prepares_its_files(
    tokenizer_path: str,  # noqa: F811
    prepared: Path,
    tmp_path: Path,
) -> None:
    """No prepare step: the source names its tokenizer; batches equal the prepared ones."""
    fresh = tmp_path / "fresh"
    fresh.mkdir()
    for name in ("a", "b"):
        shutil.copy(prepared / "docs" / f"{name}.jsonl", fresh / f"{name}.jsonl")
    cfg = config(str(fresh / "*.jsonl"), "jsonl")
    cfg["sources"][0].update(tokenizer=tokenizer_path, eos_token_id=0)
    got = collect_global_batches([build_loader(cfg, batch_size=4)])
    assert (fresh / "a.tok.json").is_file() and (fresh / "a.idx").is_file()
    want = collect_global_batches(
        [build_loader(config(str(prepared / "docs" / "*.jsonl"), "jsonl"), batch_size=4)]
    )
    assert len(got) == len(want) > 10
    for a, b in zip(got, want, strict=True):
        for key in a:
            assert a[key].equal(b[key]), key
    assert_resumes_exactly(lambda: build_loader(cfg, batch_size=4), save_points=[0, 3])


def test_other_tokenizing_settings_reprepare_and_change_the_fingerprint(
    tokenizer_path: str,  # noqa: F811
    prepared: Path,
) -> None:
    path = str(prepared / "docs" / "*.jsonl")
    eos = SourceConfig(
        name="s", path=path, format="jsonl", tokenizer=tokenizer_path, eos_token_id=0
    )
    both = SourceConfig(
        name="s",
        path=path,
        format="jsonl",
        tokenizer=tokenizer_path,
        bos_token_id=1,
        eos_token_id=0,
    )
    first = describe_source(eos)
    second = describe_source(both)
    assert second.shards[0].meta["bos"] == 1
    assert sum(s.num_tokens for s in second.shards) > sum(s.num_tokens for s in first.shards)
    assert first.fingerprint() != second.fingerprint()
    record = json.loads((prepared / "docs" / "a.tok.json").read_text())
    assert record["bos_token_id"] == 1  # the file now carries the configured settings


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        ({"tokenizer": "t.json"}, "needs bos_token_id or eos_token_id"),
        ({"eos_token_id": 0}, "only apply with a tokenizer"),
        (
            {"tokenizer": "t.json", "eos_token_id": 0, "format": "npy"},
            "a source with a tokenizer reads text",
        ),
        ({"tokenizer": "t.json", "eos_token_id": -1}, "eos_token_id"),
    ],
)
def test_tokenizer_options_are_checked(extra: dict[str, Any], message: str) -> None:
    from streamload.errors import ConfigError

    kwargs: dict[str, Any] = {"name": "s", "path": "x.jsonl", "format": "jsonl", **extra}
    with pytest.raises(ConfigError, match=message):
        SourceConfig(**kwargs)


def test_an_edit_that_keeps_the_size_is_refused(prepared: Path) -> None:
    path = prepared / "docs" / "a.jsonl"
    source = SourceConfig(name="s", path=str(path), format="jsonl")
    describe_source(source)  # as prepared
    data = path.read_bytes()
    at = data.index(b'"text": "') + len(b'"text": "')
    path.write_bytes(data[:at] + (b"Z" if data[at : at + 1] != b"Z" else b"Y") + data[at + 1 :])
    rewrote_in_place(path)
    with pytest.raises(FormatError, match=r"a\.jsonl: its content \(sha256\) differs"):
        describe_source(source)
