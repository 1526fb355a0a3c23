"""tatm ``.bin`` folders (zero-padded tails) and KempnerForge-style NPY shard folders.

tatm pre-allocates every file and never truncates it (FORMATS §5.2): beside a ``metadata.yaml``
declaring ``tokenized_info.dtype``, the trailing zero tokens are excluded with a warning.
``NumpyShardWriter`` writes the NPY shards KempnerForge reads.
"""

from __future__ import annotations

import io
import os
import re
import shutil
import warnings
from pathlib import Path
from typing import Any

import fsspec
import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import streamload
from streamload.catalog.sources import SourceCatalog, describe_source, describe_sources
from streamload.config import SourceConfig
from streamload.errors import FormatError
from streamload.formats import open_shard
from streamload.formats.base import ListedFile, ReadOptions
from streamload.formats.numpy.folder import NumpyShardWriter
from streamload.formats.numpy.raw import zero_tail_tokens
from streamload.formats.sniff import describe_shard
from tests.helpers.paths import TESTS

KF = TESTS / "data" / "kempnerforge"

TATM_METADATA = """\
content_field: NA
corpuses: []
data_content: text
dataset_path: /data/out
date_downloaded: ''
description: ''
download_source: Tokenized by tatm
name: tokenized
tokenized_info:
  dtype: {dtype}
  file_extension: bin
  file_prefix: /data/out/tokenized
  parent_datasets: []
  tatm_version: 0.1.0
  tokenizer: t300.json
  tokenizers_version: 0.21.0
  vocab_size: 300
"""


def describe(path: Path | str, **kw: str) -> SourceCatalog:
    return describe_source(SourceConfig(name="t", path=str(path), **kw))


def write_tatm(folder: Path, files: list[np.ndarray], capacity: int, dtype: str) -> Path:
    """Files as tatm leaves them: the tokens, then zeros up to ``capacity`` tokens."""
    for n, tokens in enumerate(files):
        out = np.zeros(capacity, dtype=dtype)
        out[: tokens.size] = tokens
        out.tofile(folder / f"tokenized_{n}.bin")
    (folder / "metadata.yaml").write_text(TATM_METADATA.format(dtype=dtype))
    return folder


def read_all(catalog: SourceCatalog) -> list[list[int]]:
    return [open_shard(s).tokens(0, s.num_tokens).tolist() for s in catalog.shards]


@pytest.mark.parametrize("dtype", ["uint16", "uint32"])
def test_zero_tails_are_excluded_with_a_warning(tmp_path: Path, dtype: str) -> None:
    # 256 is 00 01 in uint16 and 65536 is 00 00 01 00 in uint32: zero low bytes, not padding
    last = 256 if dtype == "uint16" else 65536
    files = [np.array([5, 6, 0, 7, last]), np.array([9, 0, 3])]
    write_tatm(tmp_path, files, capacity=12, dtype=dtype)
    with pytest.warns(UserWarning) as record:
        catalog = describe(tmp_path)
    messages = [str(w.message) for w in record]
    assert any("tokenized_0.bin: excluded 7 trailing zero tokens" in m for m in messages)
    assert any("tokenized_1.bin: excluded 9 trailing zero tokens" in m for m in messages)
    assert [s.num_tokens for s in catalog.shards] == [5, 3]
    assert [s.meta["zero_tail"] for s in catalog.shards] == [7, 9]
    assert [s.size for s in catalog.shards] == [12 * np.dtype(dtype).itemsize] * 2
    assert read_all(catalog) == [f.tolist() for f in files]


def test_a_real_final_token_zero_is_excluded_too(tmp_path: Path) -> None:
    """Documented limitation: padding and a final token 0 look the same."""
    write_tatm(tmp_path, [np.array([5, 6, 0, 7, 0])], capacity=5, dtype="uint32")
    with pytest.warns(UserWarning, match=r"excluded 1 trailing zero tokens .* excluded too"):
        assert read_all(describe(tmp_path)) == [[5, 6, 0, 7]]


def test_file_without_a_tail_gives_no_warning(
    tmp_path: Path, recwarn: pytest.WarningsRecorder
) -> None:
    write_tatm(tmp_path, [np.array([5, 6, 0, 7])], capacity=4, dtype="uint32")
    assert read_all(describe(tmp_path, dtype="uint32")) == [[5, 6, 0, 7]]
    assert not [w for w in recwarn if "zero tokens" in str(w.message)]


def test_all_zero_file_is_refused(tmp_path: Path) -> None:
    write_tatm(tmp_path, [np.array([], dtype=np.int64)], capacity=6, dtype="uint16")
    with (
        pytest.warns(UserWarning, match="excluded 6"),
        pytest.raises(FormatError, match=r"tokenized_0\.bin: shard holds 0 tokens"),
    ):
        describe(tmp_path)


def test_without_tatm_metadata_zeros_are_tokens(tmp_path: Path) -> None:
    np.array([5, 6, 0, 0, 0], dtype="<u2").tofile(tmp_path / "a.bin")
    assert read_all(describe(tmp_path, dtype="uint16")) == [[5, 6, 0, 0, 0]]
    (tmp_path / "metadata.yaml").write_text("tokenized_info: {tokenizer: gpt2}\n")  # no dtype
    assert read_all(describe(tmp_path, dtype="uint16")) == [[5, 6, 0, 0, 0]]


@pytest.mark.parametrize("tail", [0, 1, 16_383, 16_384, 16_385, 250_000])
@pytest.mark.parametrize("itemsize", [2, 4])
def test_zero_tail_scan_over_many_blocks(tmp_path: Path, tail: int, itemsize: int) -> None:
    """Tails longer than the first 64 KiB block are found across doubling blocks."""
    dtype = np.dtype(f"<u{itemsize}")
    tokens = np.concatenate([np.arange(1, 1001), np.zeros(tail, dtype=np.int64)]).astype(dtype)
    tokens.tofile(tmp_path / "x.bin")
    fs = fsspec.filesystem("file")
    size = tokens.nbytes
    assert zero_tail_tokens(fs, str(tmp_path / "x.bin"), size, itemsize) == tail


@settings(max_examples=40, deadline=None)
@given(
    head=st.lists(st.integers(0, 2**32 - 1), max_size=40),
    tail=st.integers(0, 70_000),
    itemsize=st.sampled_from([1, 2, 4, 8]),
)
def test_zero_tail_matches_a_plain_count(
    tmp_path_factory: pytest.TempPathFactory, head: list[int], tail: int, itemsize: int
) -> None:
    dtype = np.dtype(f"<u{itemsize}")
    wrapped = np.array(head, dtype=np.uint64).astype(dtype)  # unsigned casts wrap
    tokens = np.concatenate([wrapped, np.zeros(tail, dtype=dtype)])
    path = tmp_path_factory.mktemp("zt") / "x.bin"
    tokens.tofile(path)
    nonzero = np.flatnonzero(tokens)
    expected = tokens.size - (int(nonzero[-1]) + 1 if nonzero.size else 0)
    assert zero_tail_tokens(fsspec.filesystem("file"), str(path), tokens.nbytes, itemsize) == (
        expected
    )


@pytest.mark.filterwarnings("ignore:each pass")
@pytest.mark.filterwarnings("ignore:.*trailing zero tokens")
@pytest.mark.parametrize("fmt", ["auto", "raw"])
def test_loader_never_serves_padding(tmp_path: Path, fmt: str) -> None:
    rng = np.random.default_rng(7)
    files = [rng.integers(1, 300, size=n) for n in (70, 45)]
    write_tatm(tmp_path, files, capacity=100, dtype="uint16")
    stream = np.concatenate(files)
    cfg = {
        "seq_len": 8,
        "seed": 4,
        "vocab_size": 300,
        "sources": [{"name": "t", "path": str(tmp_path), "format": fmt}],
    }
    loader = streamload.build_loader(cfg, batch_size=2)
    sample_stream = streamload.SampleStream.from_config(streamload.load_config(cfg))
    assert sample_stream.num_windows == (stream.size - 1) // 8  # padding holds no windows
    rows = 0
    for batch in loader:
        starts = sample_stream.window_starts(0, batch["sample_index"].numpy())
        for row, start in enumerate(starts.tolist()):
            window = torch.from_numpy(stream[start : start + 9].astype(np.int64))
            assert torch.equal(batch["input_ids"][row], window[:-1])
            assert torch.equal(batch["labels"][row], window[1:])
            rows += 1
    assert rows == len(loader) * 2 > 0


# -- KempnerForge-style NPY shard folders -------------------------------------------------


def npy_bytes(tokens: np.ndarray) -> bytes:
    buf = io.BytesIO()
    np.save(buf, tokens)
    return buf.getvalue()


def test_npy_shards_are_byte_identical_to_kempnerforge_fixture(tmp_path: Path) -> None:
    docs = [[7, 8, 9, 0], [12, 13, 0], [22, 23, 24, 25, 26, 0], [32, 0], [40, 41, 0]]
    with NumpyShardWriter(tmp_path, "uint16", 13) as writer:
        for doc in docs:
            writer.add_document(np.array(doc))
    assert [os.path.basename(p) for p in writer.paths] == ["shard_00000.npy", "shard_00001.npy"]
    for name in ("shard_00000.npy", "shard_00001.npy"):
        assert (tmp_path / name).read_bytes() == (KF / name).read_bytes()
    assert sorted(os.listdir(tmp_path)) == ["shard_00000.npy", "shard_00001.npy"]


@settings(max_examples=30, deadline=None)
@given(
    docs=st.lists(st.lists(st.integers(0, 2**16 - 1), max_size=30), max_size=10),
    per_shard=st.integers(1, 25),
    dtype=st.sampled_from(["uint16", "uint32", "int64"]),
)
def test_npy_shards_round_trip(
    tmp_path_factory: pytest.TempPathFactory, docs: list, per_shard: int, dtype: str
) -> None:
    folder = tmp_path_factory.mktemp("npy")
    with NumpyShardWriter(folder, dtype, per_shard, prefix="part_") as writer:
        for doc in docs:
            writer.add_document(doc)
    stream = np.array([t for doc in docs for t in doc], dtype=dtype)
    pieces = [stream[i : i + per_shard] for i in range(0, stream.size, per_shard)]
    assert [os.path.basename(p) for p in writer.paths] == [
        f"part_{i:05d}.npy" for i in range(len(pieces))
    ]
    assert sorted(os.listdir(folder)) == [os.path.basename(p) for p in writer.paths]
    for path, piece in zip(writer.paths, pieces, strict=True):
        assert Path(path).read_bytes() == npy_bytes(piece)  # what numpy.save writes
    if pieces:
        assert read_all(describe(folder)) == [p.tolist() for p in pieces]


def test_npy_writer_interrupted_keeps_only_full_shards(tmp_path: Path) -> None:
    with pytest.raises(RuntimeError, match="boom"), NumpyShardWriter(tmp_path, "uint16", 4) as w:
        w.add_document(np.arange(1, 7))
        raise RuntimeError("boom")
    assert os.listdir(tmp_path) == ["shard_00000.npy"]
    assert np.load(tmp_path / "shard_00000.npy").tolist() == [1, 2, 3, 4]


def test_npy_writer_checks_its_input(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="max_tokens_per_shard = 0"):
        NumpyShardWriter(tmp_path, "uint16", 0)
    with pytest.raises(ValueError, match="dtype float32 cannot hold token ids"):
        NumpyShardWriter(tmp_path, "float32", 4)
    with NumpyShardWriter(tmp_path, "uint8", 4) as writer:
        with pytest.raises(ValueError, match=r"document 0: token id 256 does not fit uint8"):
            writer.add_document([1, 256])
        with pytest.raises(ValueError, match=r"1-D array of integer token ids"):
            writer.add_document([[1, 2]])
    assert os.listdir(tmp_path) == []


def test_kempnerforge_fixture_copy_still_reads(tmp_path: Path) -> None:
    shutil.copy(KF / "shard_00001.npy", tmp_path / "shard_00001.npy")
    assert read_all(describe(tmp_path)) == [[32, 0, 40, 41, 0]]


# -- tatm zero tails with eos_token_id = 0 (issue 22, item 3) -----------------------------


def describe_tatm(path: Path, eos: int | None) -> Any:
    """One tatm file described as the catalog does, with the config's ``eos_token_id``."""
    fs = fsspec.filesystem("file")
    listed = ListedFile(str(path), path.name, path.stat().st_size)
    options = ReadOptions(meta_dtype="uint32", eos_token_id=eos)
    return describe_shard(fs, listed, "auto", options, frozenset([path.name, "metadata.yaml"]))


def test_eos_zero_ending_the_last_document_is_kept(tmp_path: Path) -> None:
    """514,128 tokens of documents each ending in EOS 0, padded as tatm pads: every token
    is read, the final EOS included (it used to read 514,127)."""
    rng = np.random.default_rng(3)
    ends = np.cumsum(rng.integers(1, 400, size=5000))
    ends = np.append(ends[ends < 514_128], 514_128)
    lengths = np.diff(ends, prepend=0)
    docs = [np.append(rng.integers(1, 300, size=int(n) - 1), 0) for n in lengths]
    stream = np.concatenate(docs)
    write_tatm(tmp_path, [stream], capacity=stream.size + 777, dtype="uint32")
    with pytest.warns(UserWarning, match=r"excluded 777 trailing zero tokens .*EOS"):
        info = describe_tatm(tmp_path / "tokenized_0.bin", eos=0)
    assert info.num_tokens == 514_128
    assert info.meta["zero_tail"] == 777
    assert np.array_equal(open_shard(info).tokens(0, info.num_tokens), stream)


def test_a_configs_eos_token_id_reaches_the_zero_tail_rule(tmp_path: Path) -> None:
    """Through a config (describe_sources), not only the format API: eos_token_id = 0 keeps
    the final EOS; without it the trailing zero is padding."""
    write_tatm(tmp_path, [np.array([5, 6, 0, 7, 0])], capacity=9, dtype="uint16")
    base: dict[str, Any] = {"seq_len": 2, "sources": [{"name": "t", "path": str(tmp_path)}]}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the zero-tail warning
        with_eos = describe_sources(streamload.load_config({**base, "eos_token_id": 0}))
        without = describe_sources(streamload.load_config(base))
    assert with_eos[0].num_tokens == 5
    assert without[0].num_tokens == 4


@pytest.mark.parametrize(
    ("tokens", "capacity", "eos", "kept"),
    [
        ([5, 6, 0, 7, 0], 5, 0, 5),  # a full file ending in its EOS: nothing is padding
        ([5, 6, 0, 7, 0], 9, 0, 5),  # EOS then padding: the EOS stays
        ([5, 6, 0, 7, 0, 0], 9, 0, 5),  # a real 0 before the final EOS: cannot be told apart
        ([5, 6, 0, 7, 0], 9, 7, 4),  # another EOS: every trailing zero is padding
        ([5, 6, 0, 7, 0], 9, None, 4),  # no EOS configured: as before
    ],
)
def test_zero_tail_rule(
    tmp_path: Path, tokens: list[int], capacity: int, eos: int | None, kept: int
) -> None:
    write_tatm(tmp_path, [np.array(tokens)], capacity=capacity, dtype="uint32")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        info = describe_tatm(tmp_path / "tokenized_0.bin", eos=eos)
    assert info.num_tokens == kept
    assert open_shard(info).tokens(0, kept).tolist() == tokens[:kept]


def test_a_file_of_zeros_holds_no_document_even_with_eos_zero(tmp_path: Path) -> None:
    write_tatm(tmp_path, [np.array([], dtype=np.int64)], capacity=6, dtype="uint32")
    with (
        pytest.warns(UserWarning, match="excluded 6"),
        pytest.raises(FormatError, match=r"tokenized_0\.bin: shard holds 0 tokens"),
    ):
        describe_tatm(tmp_path / "tokenized_0.bin", eos=0)


@pytest.mark.parametrize(
    ("text", "match"),
    [
        ("[" * 1200, "cannot parse YAML: nested too deep"),
        ('tokenized_info: {dtype: "(99999999999999,)i4"}', "expected a little-endian integer"),
        ("tokenized_info: {dtype: float32}", "expected a little-endian integer"),
        ("tokenized_info: {dtype: U3}", "expected a little-endian integer"),
        ('tokenized_info: {dtype: ">u2"}', "expected a little-endian integer"),
        ("tokenized_info: {dtype: [1, 2]}", "expected a little-endian integer"),
    ],
)
def test_bad_tatm_metadata_is_a_format_error(tmp_path: Path, text: str, match: str) -> None:
    np.array([5, 6, 7], dtype="<u2").tofile(tmp_path / "tokenized_0.bin")
    (tmp_path / "metadata.yaml").write_text(text)
    with pytest.raises(FormatError, match=rf"metadata\.yaml: .*{re.escape(match)}"):
        describe(tmp_path)


def test_huge_tatm_metadata_is_refused_unread(tmp_path: Path) -> None:
    np.array([5, 6, 7], dtype="<u2").tofile(tmp_path / "tokenized_0.bin")
    (tmp_path / "metadata.yaml").write_bytes(b"#" * (2 << 20))
    with pytest.raises(FormatError, match=r"metadata\.yaml: larger than 1048576 bytes"):
        describe(tmp_path)


@pytest.mark.filterwarnings("ignore:.*trailing zero")
def test_eos_reaches_the_describe_step_of_every_command(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``docs``, ``inspect``, ``convert`` and ``merge`` (to a NumPy folder) with ``--eos 0``
    on a tatm folder keep the last document's trailing EOS 0 (issue 36: ``docs`` dropped it
    while ``inspect`` counted it)."""
    import json

    from streamload.cli.main import main

    docs = [[5, 6, 0], [7, 8, 9, 0], [4, 0]]
    tokens = np.array([t for d in docs for t in d], dtype=np.uint16)
    folder = write_tatm(tmp_path, [tokens], 16, "uint16")
    assert main(["docs", str(folder), "--eos", "0", "--count", "9", "--json"]) == 0
    assert json.loads(capsys.readouterr().out) == {"documents": docs}
    assert main(["inspect", str(folder), "--eos", "0", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["num_tokens"] == 9
    out = tmp_path / "out"
    for command in (["convert", str(folder), str(out / "a.pbin"), "--to", "modalities"],
                    ["merge", str(folder), str(folder), str(out / "merged")]):  # fmt: skip
        assert main([*command, "--eos", "0"]) == 0, command
    capsys.readouterr()
    assert main(["docs", str(out / "a.pbin"), "--count", "9", "--json"]) == 0
    assert json.loads(capsys.readouterr().out) == {"documents": docs}
    assert main(["docs", str(out / "merged"), "--eos", "0", "--count", "9", "--json"]) == 0
    assert json.loads(capsys.readouterr().out) == {"documents": docs + docs}
