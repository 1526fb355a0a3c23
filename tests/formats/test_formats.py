"""Formats: real NPY shards, raw shards, headerless .npy, tatm metadata, dtype conflicts."""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from streamload.catalog.sources import SourceCatalog, describe_source
from streamload.config import SourceConfig
from streamload.errors import FormatError
from streamload.formats import open_shard
from streamload.formats.numpy.raw import tatm_dtype
from streamload.formats.registry import canonical_name
from tests.helpers.paths import TESTS
from tests.helpers.shards import is_mapped

KF = TESTS / "data" / "kempnerforge"


def describe(path: str | Path | list[str], **kwargs: str) -> SourceCatalog:
    paths = [str(p) for p in path] if isinstance(path, list) else str(path)
    return describe_source(SourceConfig(name="web", path=paths, **kwargs))


def read_all(catalog: SourceCatalog) -> list[list[int]]:
    out = []
    for info in catalog.shards:
        shard = open_shard(info)
        out.append(shard.tokens(0, info.num_tokens).tolist())
    return out


def copy(tmp_path: Path, *names: str) -> Path:
    for name in names:
        shutil.copy(KF / name, tmp_path / name)
    return tmp_path


def test_real_npy_shards_read_with_header_dtype() -> None:
    catalog = describe([KF / "shard_00000.npy", KF / "shard_00001.npy"])
    assert [s.format for s in catalog.shards] == ["numpy", "numpy"]
    assert [np.dtype(s.dtype) for s in catalog.shards] == [np.dtype("<u2")] * 2
    assert [s.num_tokens for s in catalog.shards] == [13, 5]
    assert [s.offset for s in catalog.shards] == [128, 128]
    expected = [np.load(KF / "shard_00000.npy").tolist(), np.load(KF / "shard_00001.npy").tolist()]
    assert read_all(catalog) == expected
    assert expected[1] == [32, 0, 40, 41, 0]


def test_npy_with_matching_configured_dtype() -> None:
    catalog = describe(KF / "shard_00001.npy", dtype="uint16")
    assert read_all(catalog) == [[32, 0, 40, 41, 0]]


def test_npy_slices_are_zero_copy() -> None:
    (info,) = describe(KF / "shard_00000.npy").shards
    view = open_shard(info).tokens(2, 9)
    assert is_mapped(view)  # a view of the file's map, not a copy
    assert not view.flags.owndata
    assert view.tolist() == [9, 0, 12, 13, 0, 22, 23]


def test_raw_bin_with_configured_dtype() -> None:
    catalog = describe(KF / "shard_0.bin", dtype="uint16")
    (info,) = catalog.shards
    assert (info.format, np.dtype(info.dtype), info.num_tokens, info.size) == (
        "raw", np.dtype("<u2"), 7, 14,
    )  # fmt: skip
    assert read_all(catalog) == [[7, 8, 9, 0, 12, 13, 0]]


def test_raw_bin_without_dtype_is_refused() -> None:
    with pytest.raises(FormatError, match=r"shard_0\.bin: a headerless token file .*set dtype"):
        describe(KF / "shard_0.bin")


def test_raw_bin_size_is_not_a_width_rule() -> None:
    """14 bytes is not a multiple of 4: a uint32 config is refused, never silently misread."""
    with pytest.raises(FormatError, match=r"shard_0\.bin: file size 14 bytes .* uint32 .* 4"):
        describe(KF / "shard_0.bin", dtype="uint32")


def test_headerless_npy_is_read_as_raw() -> None:
    with pytest.raises(ValueError):
        np.load(KF / "headerless_raw.npy")  # not a real NPY file
    catalog = describe(KF / "headerless_raw.npy", dtype="uint16")
    (info,) = catalog.shards
    assert info.format == "raw"
    assert read_all(catalog) == [[1, 12, 13, 0, 1, 22, 23, 24, 25, 26, 0, 1, 7, 8, 9, 0]]


def test_headerless_npy_as_uint32() -> None:
    """The configured width is obeyed (32 bytes = 8 uint32 tokens)."""
    catalog = describe(KF / "headerless_raw.npy", dtype="uint32")
    raw = np.fromfile(KF / "headerless_raw.npy", dtype="<u4")
    assert read_all(catalog) == [raw.tolist()]


def test_headerless_npy_without_dtype_asks_for_it() -> None:
    with pytest.raises(FormatError, match=r"headerless_raw\.npy: .*\\x93NUMPY.*set dtype"):
        describe(KF / "headerless_raw.npy")


@pytest.mark.parametrize("fmt", ["numpy", "npy"])  # the format's name, and its former name
def test_headerless_npy_with_format_numpy_is_refused(fmt: str) -> None:
    with pytest.raises(FormatError, match=r"headerless_raw\.npy: format = 'numpy' .*no NPY magic"):
        describe(KF / "headerless_raw.npy", format=fmt, dtype="uint16")


def test_format_raw_on_a_real_npy_reads_its_bytes(tmp_path: Path) -> None:
    """format = 'raw' is obeyed literally: the header bytes are tokens too."""
    catalog = describe(KF / "shard_00001.npy", format="raw", dtype="uint16")
    (info,) = catalog.shards
    assert (info.format, info.offset, info.num_tokens) == ("raw", 0, 138 // 2)
    assert read_all(catalog)[0][-5:] == [32, 0, 40, 41, 0]


def test_npy_header_dtype_conflicts_with_config() -> None:
    with pytest.raises(
        FormatError, match=r"shard_00000\.npy: NPY header says dtype uint16 .*'uint8'"
    ):
        describe(KF / "shard_00000.npy", dtype="uint8")
    (info,) = describe(KF / "shard_00000.npy", dtype="uint32").shards  # holds every uint16
    assert np.dtype(info.dtype) == np.dtype("<u2")  # read in the file's own dtype


def test_tatm_metadata_gives_the_dtype(tmp_path: Path) -> None:
    folder = copy(tmp_path, "shard_0.bin")
    (folder / "metadata.yaml").write_text("tokenized_info: {dtype: uint16}\n")
    # tatm pads its files with 0, so a trailing 0 beside tatm metadata is excluded, loudly
    with pytest.warns(UserWarning, match="excluded 1 trailing zero"):
        catalog = describe(folder)
    assert [s.relpath for s in catalog.shards] == ["shard_0.bin"]  # metadata is not a shard
    assert np.dtype(catalog.shards[0].dtype) == np.dtype("<u2")
    assert read_all(catalog) == [[7, 8, 9, 0, 12, 13]]
    with pytest.warns(UserWarning, match="excluded 1 trailing zero"):  # a matching config dtype
        assert read_all(describe(folder, dtype="uint16")) == [[7, 8, 9, 0, 12, 13]]


def test_tatm_metadata_for_a_single_file_entry(tmp_path: Path) -> None:
    folder = copy(tmp_path, "shard_0.bin")
    (folder / "metadata.yaml").write_text("tokenized_info:\n  dtype: uint16\n  other: 1\n")
    with pytest.warns(UserWarning, match="excluded 1 trailing zero"):
        assert read_all(describe(folder / "shard_0.bin")) == [[7, 8, 9, 0, 12, 13]]


def test_tatm_metadata_conflicts_with_config(tmp_path: Path) -> None:
    folder = copy(tmp_path, "shard_0.bin")
    (folder / "metadata.yaml").write_text("tokenized_info: {dtype: uint16}\n")
    with pytest.raises(
        FormatError, match=r"shard_0\.bin: the config says dtype = 'uint32' .*'uint16'"
    ):
        describe(folder, dtype="uint32")


def test_tatm_metadata_without_dtype(tmp_path: Path) -> None:
    folder = copy(tmp_path, "shard_0.bin")
    (folder / "metadata.yaml").write_text("tokenized_info: {tokenizer: gpt2}\n")
    with pytest.raises(FormatError, match=r"shard_0\.bin: .*set dtype"):
        describe(folder)
    assert read_all(describe(folder, dtype="uint16")) == [[7, 8, 9, 0, 12, 13, 0]]


@pytest.mark.parametrize(
    ("text", "match"),
    [
        ("tokenized_info: {dtype: notatype}\n", r"metadata\.yaml: tokenized_info\.dtype"),
        ("tokenized_info: [unclosed\n", r"metadata\.yaml: cannot parse YAML"),
    ],
)
def test_bad_tatm_metadata(tmp_path: Path, text: str, match: str) -> None:
    folder = copy(tmp_path, "shard_0.bin")
    (folder / "metadata.yaml").write_text(text)
    with pytest.raises(FormatError, match=match):
        describe(folder)


def test_tatm_dtype_parser() -> None:
    assert tatm_dtype("tokenized_info: {dtype: uint32}", "m.yaml") == "uint32"
    assert tatm_dtype("tokenized_info: {dtype: <u2}", "m.yaml") == "uint16"
    assert tatm_dtype("name: x", "m.yaml") is None
    assert tatm_dtype("", "m.yaml") is None


def test_metadata_applies_only_to_raw_files(tmp_path: Path) -> None:
    """A real NPY beside a tatm metadata.yaml still takes its dtype from its header."""
    folder = copy(tmp_path, "shard_0.bin", "shard_00001.npy")
    (folder / "metadata.yaml").write_text("tokenized_info: {dtype: uint16}\n")
    with pytest.warns(UserWarning, match="excluded 1 trailing zero"):
        catalog = describe(folder)
    assert [(s.relpath, s.format) for s in catalog.shards] == [
        ("shard_0.bin", "raw"), ("shard_00001.npy", "numpy"),
    ]  # fmt: skip
    assert read_all(catalog) == [[7, 8, 9, 0, 12, 13], [32, 0, 40, 41, 0]]  # NPY keeps its 0


@pytest.mark.parametrize("dtype", ["uint8", "uint16", "uint32", "int32", "int64", "uint64"])
def test_npy_dtypes_round_trip(tmp_path: Path, dtype: str) -> None:
    tokens = np.array([0, 1, 2, 100, 127], dtype=dtype)
    np.save(tmp_path / "a.npy", tokens)
    catalog = describe(tmp_path)
    assert np.dtype(catalog.shards[0].dtype) == np.dtype(dtype)
    assert read_all(catalog) == [tokens.tolist()]


def test_npy_version_2_header(tmp_path: Path) -> None:
    tokens = np.arange(10, dtype=np.uint32)
    with open(tmp_path / "a.npy", "wb") as fh:
        np.lib.format.write_array(fh, tokens, version=(2, 0))
    (info,) = describe(tmp_path).shards
    assert info.offset % 64 == 0 and info.num_tokens == 10
    assert read_all(describe(tmp_path)) == [list(range(10))]


def test_big_endian_npy(tmp_path: Path) -> None:
    tokens = np.array([1, 258, 65_535], dtype=">u2")
    np.save(tmp_path / "a.npy", tokens)
    assert read_all(describe(tmp_path)) == [[1, 258, 65_535]]
    assert read_all(describe(tmp_path, dtype="uint16")) == [[1, 258, 65_535]]


def test_raw_files_are_little_endian(tmp_path: Path) -> None:
    np.array([1, 258, 65_535], dtype="<u2").tofile(tmp_path / "a.bin")
    assert read_all(describe(tmp_path, dtype="uint16")) == [[1, 258, 65_535]]


@pytest.mark.parametrize(("fmt", "dtype"), [("npy", "uint16"), ("raw", "uint32"), ("npy", "int64")])
def test_make_corpus_writes_what_it_says(make_corpus: Callable, fmt: str, dtype: str) -> None:
    corpus = make_corpus([300, 1, 250], fmt=fmt, dtype=dtype, eos_token_id=3, vocab_size=70)
    folder, tokens = corpus
    assert folder == corpus.folder and len(tokens) == 3
    catalog = describe(folder, dtype=dtype)
    assert [s.format for s in catalog.shards] == [canonical_name(fmt)] * 3
    assert read_all(catalog) == [t.tolist() for t in tokens]
    stream = corpus.stream
    assert stream.size == 551 and stream.dtype == np.dtype(dtype)
    assert stream[-1] == 3 and stream.min() >= 0 and stream.max() < 70
    assert 10 < np.count_nonzero(stream == 3) < 100  # documents of ~20 tokens
