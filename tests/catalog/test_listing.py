"""Shard listing: folder, glob and list rules, listing errors, and the data fingerprint."""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from streamload.catalog.listing import list_source_files
from streamload.catalog.sources import describe_source
from streamload.config import SourceConfig
from streamload.errors import ConfigError, FormatError
from streamload.streams.shard_set import ShardSet


def touch(path: Path, tokens: int = 4) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    np.arange(1, tokens + 1, dtype="<u2").tofile(path)
    return path


def listed(path: str | list[str]) -> list[tuple[str, str, int]]:
    _, files = list_source_files(SourceConfig(name="web", path=path))
    return [(f.path, f.relpath, f.size) for f in files]


def test_folder_is_non_recursive_and_lexicographic(tmp_path: Path) -> None:
    for name in ("tokenized_2.bin", "tokenized_10.bin", "tokenized_1.bin", "b.npy", "a.npy"):
        touch(tmp_path / name)
    touch(tmp_path / "sub" / "tokenized_0.bin")  # not listed: no recursion
    (tmp_path / "notes.txt").write_text("x")
    (tmp_path / "metadata.yaml").write_text("tokenized_info: {dtype: uint16}\n")
    (tmp_path / "shard.idx").write_bytes(b"\0" * 8)
    got = listed(str(tmp_path))
    assert [rel for _, rel, _ in got] == [
        "a.npy",
        "b.npy",
        "tokenized_1.bin",
        "tokenized_10.bin",  # lexicographic, not natural order (the KempnerForge rule)
        "tokenized_2.bin",
    ]
    assert [p for p, _, _ in got] == [str(tmp_path / rel) for _, rel, _ in got]
    assert {size for _, _, size in got} == {8}


def test_folder_with_trailing_slash(tmp_path: Path) -> None:
    touch(tmp_path / "x.bin")
    assert listed(f"{tmp_path}/") == [(str(tmp_path / "x.bin"), "x.bin", 8)]


def test_symlinked_shards_are_listed(tmp_path: Path) -> None:
    """Corpora assembled from symlinks list like real files, in folders and globs alike."""
    for name in ("b.bin", "a.bin"):
        touch(tmp_path / "real" / name)
        (tmp_path / "links").mkdir(exist_ok=True)
        (tmp_path / "links" / name).symlink_to(tmp_path / "real" / name)
    expected = [(str(tmp_path / "links" / n), n, 8) for n in ("a.bin", "b.bin")]
    assert listed(f"{tmp_path}/links/*.bin") == expected
    assert listed(str(tmp_path / "links")) == expected


def test_glob_sorts_by_full_path(tmp_path: Path) -> None:
    for rel in ("b/part-1.npy", "a/part-2.npy", "a/part-10.npy", "a/skip.bin", "c/part-0.txt"):
        touch(tmp_path / rel)
    got = listed(f"{tmp_path}/*/part-*")
    assert [rel for _, rel, _ in got] == [
        "a/part-10.npy",
        "a/part-2.npy",
        "b/part-1.npy",
        "c/part-0.txt",  # a glob takes what it matches: the user chose the pattern
    ]


def test_glob_matching_nothing(tmp_path: Path) -> None:
    touch(tmp_path / "a.bin")
    with pytest.raises(
        ConfigError, match=rf"source 'web': path '{tmp_path}/\*\.npy' matches no token"
    ):
        listed(f"{tmp_path}/*.npy")


def test_explicit_list_keeps_its_order(tmp_path: Path) -> None:
    for name in ("a.bin", "b.bin", "c.bin"):
        touch(tmp_path / "d" / name)
    touch(tmp_path / "z" / "y.bin")
    touch(tmp_path / "z" / "x.bin")
    got = listed([str(tmp_path / "d" / "c.bin"), str(tmp_path / "z"), str(tmp_path / "d/a.bin")])
    assert [p for p, _, _ in got] == [
        str(tmp_path / "d" / "c.bin"),
        str(tmp_path / "z" / "x.bin"),  # a folder entry is sorted inside itself
        str(tmp_path / "z" / "y.bin"),
        str(tmp_path / "d" / "a.bin"),
    ]
    assert [rel for _, rel, _ in got] == ["c.bin", "x.bin", "y.bin", "a.bin"]


@pytest.mark.parametrize(
    "entries",
    [
        ["f/a.bin", "f/a.bin"],
        ["f", "f/a.bin"],  # the folder already lists it
        ["f/*.bin", "f/b.bin"],
        ["f", "f/"],
    ],
)
def test_duplicates_are_refused(tmp_path: Path, entries: list[str]) -> None:
    touch(tmp_path / "f" / "a.bin")
    touch(tmp_path / "f" / "b.bin")
    with pytest.raises(ConfigError, match=rf"source 'web': {tmp_path}/f/\w\.bin is listed twice"):
        listed([str(tmp_path / e) for e in entries])


def test_remote_duplicates_are_named_by_url(tmp_path: Path, s3: Any) -> None:
    touch(tmp_path / "f" / "a.bin")
    url = s3.upload_folder(tmp_path / "f", "corpora", "dup")
    source = SourceConfig(
        name="web", path=[url, f"{url}/a.bin"], storage_options=s3.storage_options()
    )
    with pytest.raises(ConfigError, match=rf"source 'web': {url}/a.bin is listed twice"):
        list_source_files(source)


def test_missing_path(tmp_path: Path) -> None:
    """A path naming nothing says which source, which field and which entry."""
    missing = tmp_path / "nope"
    with pytest.raises(ConfigError, match=rf"source 'web': path '{missing}': no such file or"):
        listed(str(missing))
    touch(tmp_path / "a.bin")
    with pytest.raises(ConfigError, match=rf"source 'web': path '{missing}\.bin': no such file"):
        listed([str(tmp_path / "a.bin"), f"{missing}.bin"])
    with pytest.raises(ConfigError, match=rf"source 'web': path '{missing}/\*\.npy' matches no "):
        listed(f"{missing}/*.npy")


def test_missing_mask_path_names_label_masks(tmp_path: Path) -> None:
    touch(tmp_path / "a.bin")
    source = SourceConfig(
        name="web", path=str(tmp_path / "a.bin"), dtype="uint16", label_masks=str(tmp_path / "gone")
    )
    with pytest.raises(ConfigError, match=rf"source 'web': label_masks '{tmp_path}/gone': no "):
        describe_source(source)


def test_empty_folder(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=rf"source 'web': path '{tmp_path}' holds no token files"):
        listed(str(tmp_path))
    (tmp_path / "readme.txt").write_text("no shards here")
    touch(tmp_path / "sub" / "a.bin")
    with pytest.raises(ConfigError, match=rf"'{tmp_path}' holds no token files .*\.npy.*\.bin"):
        listed(str(tmp_path))


def fingerprint(path: Path | str, dtype: str = "auto") -> str:
    return describe_source(SourceConfig(name="web", path=str(path), dtype=dtype)).fingerprint()


def test_fingerprint_survives_moving_and_copying(make_corpus: Callable, tmp_path: Path) -> None:
    corpus = make_corpus([50, 60, 70])
    before = fingerprint(corpus.folder)
    copied = tmp_path / "mirror" / "deeper" / "copy"
    shutil.copytree(corpus.folder, copied)
    assert fingerprint(copied) == before
    moved = tmp_path / "moved"
    shutil.move(str(copied), moved)
    assert fingerprint(moved) == before
    assert fingerprint(f"{moved}/*.npy") == before  # a glob of the same folder
    assert fingerprint(f"{moved}/") == before


def _rewritten_in_place(folder: Path, changed: Path) -> str:
    """A file rewritten under its own name changes neither its folder's time nor its names:
    the cached catalog still serves, and the shard is refused when first opened (which
    removes the stale entry); the next start describes it again."""
    catalog = describe_source(SourceConfig(name="web", path=str(folder), dtype="uint16"))
    shards = ShardSet(catalog.shards)
    with pytest.raises(FormatError, match=rf"{changed} changed since the catalog was built"):
        for index in range(len(catalog.shards)):
            shards.shard(index)
    return fingerprint(folder, "uint16")


def test_fingerprint_changes_with_the_data(make_corpus: Callable) -> None:
    corpus = make_corpus([50, 60, 70], fmt="raw")
    before = fingerprint(corpus.folder, "uint16")
    assert fingerprint(corpus.folder, "uint16") == before  # stable
    with open(corpus.paths[1], "ab") as fh:
        fh.write(np.array([5, 6], dtype="<u2").tobytes())
    grown = _rewritten_in_place(corpus.folder, corpus.paths[1])
    assert grown != before
    corpus.paths[1].write_bytes(corpus.paths[1].read_bytes()[:-8])  # shrink below the original
    assert _rewritten_in_place(corpus.folder, corpus.paths[1]) not in (before, grown)
    (corpus.folder / "shard_00009.bin").write_bytes(b"\1\0" * 40)  # a new file: one listing
    assert fingerprint(corpus.folder, "uint16") not in (before, grown)


def test_fingerprint_changes_with_names_order_and_dtype(make_corpus: Callable) -> None:
    corpus = make_corpus([50, 60], fmt="raw")
    before = fingerprint(corpus.folder, "uint16")
    assert fingerprint(corpus.folder, "uint8") != before  # same bytes, other tokens
    reordered = describe_source(
        SourceConfig(name="web", path=[str(p) for p in reversed(corpus.paths)], dtype="uint16")
    ).fingerprint()
    assert reordered != before
    corpus.paths[0].rename(corpus.folder / "shard_00009.bin")
    assert fingerprint(corpus.folder, "uint16") != before


@pytest.mark.parametrize(
    ("entry", "mode"),
    [("corpus/", "request"), ("corpus/shard.bin", "body"), ("corpus/*.bin", "request")],
)
def test_a_stalled_http_listing_fails_within_the_budget(mode: str, entry: str) -> None:
    """A store that accepts the connection and never answers (or answers the headers, never
    the body): listing a folder, a file or a glob fails naming it once every attempt has
    timed out (docs/remote.md, "Faults"), not after the client library's own timeouts."""
    import threading
    import time

    from streamload.config.storage import StorageConfig
    from streamload.errors import RemoteStallError
    from tests.servers.stall import StallingProxy, StallPlan

    storage = StorageConfig(timeout=0.5, retries=1, backoff=0.01)
    budget = 2 * 0.5 + 0.01
    with StallingProxy(None, StallPlan(mode=mode)) as proxy:
        source = SourceConfig(name="web", path=f"{proxy.endpoint}/{entry}")
        failed: list[BaseException] = []

        def run() -> None:
            try:
                list_source_files(source, storage)
            except BaseException as exc:
                failed.append(exc)

        began = time.monotonic()
        thread = threading.Thread(target=run, daemon=True)
        thread.start()
        thread.join(budget + 15.0)
        assert failed, f"still listing after {time.monotonic() - began:.0f} s"
    assert isinstance(failed[0], RemoteStallError), repr(failed[0])
    assert f"{proxy.endpoint}/corpus" in str(failed[0])
    assert "storage.timeout = 0.5" in str(failed[0])


def test_companion_arrays_are_never_tokens(tmp_path: Path) -> None:
    """OLMo-core-style int64 ``doc_lens_*.npy`` beside uint32 ``shard_*.npy`` (issue 36: read
    as 8 extra token shards): only the shards are listed, and read exactly."""
    rng = np.random.default_rng(0)
    shards = [rng.integers(0, 100_000, 50 + i).astype(np.uint32) for i in range(8)]
    for i, tokens in enumerate(shards):
        np.save(tmp_path / f"shard_{i:05d}.npy", tokens)
        np.save(tmp_path / f"doc_lens_{i:05d}.npy", np.array([20, 30 + i], dtype=np.int64))
    np.save(tmp_path / "label_mask.npy", np.ones(10, dtype=np.bool_))
    catalog = describe_source(SourceConfig(name="s", path=str(tmp_path)))
    assert [s.relpath for s in catalog.shards] == [f"shard_{i:05d}.npy" for i in range(8)]
    assert {s.dtype for s in catalog.shards} == {np.dtype(np.uint32).str}
    assert catalog.num_tokens == sum(t.size for t in shards)


def test_files_of_two_dtypes_are_refused_unless_the_config_names_one(tmp_path: Path) -> None:
    np.save(tmp_path / "a.npy", np.arange(50, dtype=np.uint32))
    np.save(tmp_path / "b.npy", np.arange(50, dtype=np.int64))
    np.save(tmp_path / "c.npy", np.arange(50, dtype=np.uint16))
    message = r"a\.npy holds uint32 tokens but .*b\.npy holds int64; .*set dtype = 'int64'"
    with pytest.raises(FormatError, match=message):
        describe_source(SourceConfig(name="s", path=str(tmp_path)))
    catalog = describe_source(SourceConfig(name="s", path=str(tmp_path), dtype="int64"))
    assert [np.dtype(s.dtype).name for s in catalog.shards] == ["uint32", "int64", "uint16"]
    with pytest.raises(FormatError, match=r"a\.npy: NPY header says dtype uint32 .*'int32'"):
        describe_source(SourceConfig(name="s", path=str(tmp_path), dtype="int32"))


def test_a_dataset_dict_root_names_its_splits(tmp_path: Path) -> None:
    """``DatasetDict.save_to_disk`` output (issue 36: "holds no token files" only)."""
    from tests.helpers.paths import TESTS

    root = tmp_path / "dd"
    for split in ("train", "test"):
        shutil.copytree(TESTS / "fixtures" / "hf" / "save_to_disk", root / split)
    (root / "dataset_dict.json").write_text('{"splits": ["train", "test"]}')
    message = (
        r"holds no token files .*DatasetDict \(dataset_dict\.json\) whose splits are the "
        r"folders test, train: set path = '.*/dd/test'"
    )
    with pytest.raises(ConfigError, match=message):
        describe_source(SourceConfig(name="s", path=str(root)))
    assert describe_source(SourceConfig(name="s", path=str(root / "train"))).num_tokens > 0
