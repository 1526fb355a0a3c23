"""The sequence table of a Megatron source (``streamload.modes.megatron.sequences``): built
once, mapped by every process, never rebuilt at a warm start, and sent to process workers by
the paths of its files."""

from __future__ import annotations

import dataclasses
import hashlib
import os
import pickle
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from streamload import load_config
from streamload.catalog.sources import describe_sources
from streamload.catalog.table import ShardTable
from streamload.modes.megatron.sequences import load_sequence_table, table_arrays
from streamload.modes.megatron.source import MegatronSource
from streamload.modes.megatron.stream import MegatronStream
from streamload.streams.interface import SampleStream
from tests.streams.test_megatron import config_of, load, prefixes
from tests.streams.test_megatron_cache import FIXTURE
from tests.streams.test_megatron_limits import read_only

__all__ = ["prefixes"]  # the module fixture, re-exported for pytest


def _stream(cfg: dict[str, Any]) -> MegatronStream:
    stream = SampleStream.from_config(load_config(cfg))
    assert isinstance(stream, MegatronStream)
    return stream


def _assert_golden(stream: MegatronStream, name: str) -> None:
    ids = np.arange(stream.pass_length or 0)
    np.testing.assert_array_equal(stream.read(0, ids)[0], load(name)[1]["text"][: ids.size])


def test_table_of_shards() -> None:
    """Starts over the stream, cumulative lengths, the longest, the digest of int32 lengths;
    an empty sequence at a shard's end keeps its place."""
    arrays = table_arrays([np.array([0, 3, 7, 7]), np.array([0, 5])], np.array([0, 7, 12]), "s")
    assert arrays["starts"].tolist() == [0, 3, 7, 7]
    assert arrays["cumulative"].tolist() == [0, 3, 7, 7, 12]
    assert arrays["longest"].tolist() == [5]
    digest = bytes(arrays["lengths_sha256"]).hex()
    assert digest == hashlib.sha256(np.array([3, 4, 0, 5], np.int32)).hexdigest()


def test_a_warm_start_reads_no_document_index(
    prefixes: dict[str, str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cfg = config_of("blend_train", prefixes)
    cfg["sampling"]["cache_dir"] = str(tmp_path)
    _stream(cfg)

    def refuse(self: MegatronSource, index: int) -> np.ndarray:
        raise AssertionError("a warm start read a shard's document index")

    monkeypatch.setattr(MegatronSource, "_bounds", refuse)
    stream = _stream(cfg)
    assert all(s.sequences.files is not None for s in stream.sources)
    _assert_golden(stream, "blend_train")


def test_the_table_travels_to_workers_by_path(prefixes: dict[str, str], tmp_path: Path) -> None:
    cfg = config_of("blend_train", prefixes)
    cfg["sampling"]["cache_dir"] = str(tmp_path)
    stream = _stream(cfg)
    payload = pickle.dumps(stream)
    for source in stream.sources:
        assert source.sequences.files is not None
        assert source.sequences.starts.tobytes() not in payload  # not copied
    restored = pickle.loads(payload)
    for source in restored.sources:
        assert isinstance(source.sequences.starts.base, np.memmap)  # mapped again
    _assert_golden(restored, "blend_train")


def test_without_cache_dir_the_table_goes_to_the_storage_folder(
    prefixes: dict[str, str],
) -> None:
    stream = _stream(config_of("gpt_e1_n", prefixes))
    files = stream.sources[0].sequences.files
    plans = Path(load_config(config_of("gpt_e1_n", prefixes)).storage.cache_root) / "plans"
    assert files is not None and {Path(f).parent for f in files.values()} == {plans}
    _assert_golden(stream, "gpt_e1_n")


def test_a_read_only_cache_dir_keeps_the_table_in_the_storage_folder(
    prefixes: dict[str, str], tmp_path: Path
) -> None:
    """megatron-core's files in a read-only folder: the indices are read there, the table
    goes to the default folder (nothing is written beside megatron-core's files)."""
    shutil.copytree(FIXTURE, tmp_path, dirs_exist_ok=True)
    cfg = config_of("gpt_e3_separate", prefixes)
    cfg["sampling"]["cache_dir"] = str(tmp_path)
    names = sorted(os.listdir(tmp_path))
    with read_only(tmp_path):
        stream = _stream(cfg)
    files = stream.sources[0].sequences.files
    assert files is not None and not any(f.startswith(str(tmp_path)) for f in files.values())
    assert sorted(os.listdir(tmp_path)) == names
    _assert_golden(stream, "gpt_e3_separate")


def test_files_without_a_version_build_the_table_in_memory(prefixes: dict[str, str]) -> None:
    config = load_config(config_of("gpt_e1_n", prefixes))
    (catalog,) = describe_sources(config)
    shards = ShardTable.of(tuple(dataclasses.replace(s, version="") for s in catalog.shards))
    bare = dataclasses.replace(catalog, shards=shards)
    built = table_arrays([np.array([0, 2, 5])], np.array([0, 5]), "A")
    with pytest.warns(UserWarning, match=r"not cached .*no version"):
        table = load_sequence_table(config, bare, lambda: built)
    assert table.files is None and table.count == 2 and table.longest == 3
    assert table.lengths(np.array([1, 0])).tolist() == [3, 2] and table.tokens(0, 2) == 5
    assert pickle.loads(pickle.dumps(table)).starts.tolist() == [0, 2]
