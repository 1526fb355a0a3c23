"""Text sources over every kind of text file the real tools write (tests/fixtures/text/:
``datasets`` ``save_to_disk`` and ``to_parquet``, an Arrow IPC file, Mosaic's ``MDSWriter``
plain and zstd, JSONL plain, gzip and zstd): each gives the documents of the same texts, and
its batches equal ``streamload tokenize --keep-order`` of the same files read as tokens."""

from __future__ import annotations

import itertools
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from streamload.catalog.sources import describe_source
from streamload.config import SourceConfig
from streamload.errors import ConfigError, FormatError
from streamload.formats.registry import open_shard
from tests.catalog.test_text_source import assert_same, batches, text_config, tokenize_to

pytest.importorskip("pyarrow")
FIXTURES = Path(__file__).parents[1] / "fixtures" / "text"
KINDS = {
    "save_to_disk": "save_to_disk",
    "parquet": "to_parquet",
    "arrow_file": "ipc_file",
    "mds": "mds/plain",
    "mds_zstd": "mds/zstd",
    "jsonl": "jsonl/docs.jsonl",
    "jsonl_gz": "jsonl/docs.jsonl.gz",
    "jsonl_zst": "jsonl/docs.jsonl.zst",
}


def documents(source: SourceConfig) -> list[list[int]]:
    catalog = describe_source(source)
    out = []
    for info in catalog.shards:
        shard = open_shard(info)
        bounds = shard.document_bounds()
        tokens = shard.tokens(0, info.num_tokens)
        out += [tokens[a:b].tolist() for a, b in itertools.pairwise(bounds)]
    return out


def source_of(kind: str, cache: Path, **extra: Any) -> SourceConfig:
    return SourceConfig(**text_config(FIXTURES / KINDS[kind], cache, **extra)["sources"][0])


@pytest.mark.parametrize("kind", list(KINDS))
def test_every_kind_gives_the_same_documents(kind: str, tmp_path: Path) -> None:
    reference = documents(source_of("jsonl", tmp_path / "cache"))
    assert len(reference) == 11  # 12 texts, one of them only whitespace
    assert documents(source_of(kind, tmp_path / "cache")) == reference


@pytest.mark.parametrize("kind", ["save_to_disk", "parquet", "mds_zstd"])
def test_batches_equal_tokenize_keep_order_of_the_same_files(kind: str, tmp_path: Path) -> None:
    folder = FIXTURES / KINDS[kind]
    files = sorted(p for p in folder.iterdir() if p.suffix in (".arrow", ".parquet", ".zstd"))
    tokenize_to(tmp_path / "tok", *(str(f) for f in files))
    for mode in ("concat", "packed"):
        config = text_config(folder, tmp_path / "cache", mode)
        config["seq_len"] = 8
        tokens = {**config, "sources": [{"name": "web", "path": str(tmp_path / "tok")}]}
        assert_same(batches(config, 6), batches(tokens, 6))


def test_a_missing_column_is_named(tmp_path: Path) -> None:
    source = source_of("parquet", tmp_path / "cache", text_field="content")
    with pytest.raises(FormatError, match=r"train\.parquet has no column 'content'"):
        describe_source(source)


def test_a_nested_field_reaches_into_structs(tmp_path: Path) -> None:
    lang = documents(source_of("save_to_disk", tmp_path / "cache", text_field="meta.lang"))
    assert lang and all(isinstance(t, int) for doc in lang for t in doc)


def test_a_format_asks_for_one_kind(tmp_path: Path) -> None:
    source = source_of("jsonl", tmp_path / "cache", format="parquet")
    with pytest.raises(ConfigError, match=r"docs\.jsonl is a jsonl file but format = 'parquet'"):
        describe_source(source)


def test_a_token_source_folder_is_not_text(tmp_path: Path) -> None:
    np.save(tmp_path / "tokens.npy", np.arange(10, dtype=np.uint16))
    source = SourceConfig(**text_config(tmp_path, tmp_path / "cache")["sources"][0])
    with pytest.raises(ConfigError, match="holds no text files"):
        describe_source(source)
