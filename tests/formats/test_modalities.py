"""Modalities ``.pbin``: fixtures, writer, merge defect repair, corruption, loader."""

from __future__ import annotations

import os
import pickle
import shutil
import struct
import warnings
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from streamload.catalog.sources import SourceCatalog, describe_source
from streamload.config import SourceConfig
from streamload.errors import FormatError
from streamload.formats import open_shard
from streamload.formats.modalities.modalities import (
    ModalitiesWriter,
    merge_pbin,
    token_size_for_vocab,
)
from tests.helpers.masks import assert_masks_follow_documents
from tests.helpers.paths import TESTS
from tests.helpers.shards import documents, is_mapped

DATA = TESTS / "data" / "modalities"
DOCS = [[7, 8, 9, 0], [12, 13, 0], [22, 23, 24, 25, 26, 0], [32, 0]]
INPUT = [[7, 8, 9], [12, 13], [22, 23, 24, 25, 26, 0], [32]]  # what the tokenizer gave
MERGE_WARNING = r"merged\.pbin: .*merge_packed_data defect .*repaired"


def describe(path: Path | str, **kw: str) -> SourceCatalog:
    return describe_source(SourceConfig(name="m", path=str(path), **kw))


def copy(folder: Path, name: str = "docs.pbin") -> Path:
    shutil.copy(DATA / name, folder / name)
    return folder / name


def reference_pbin(docs: list[list[int]], token_size: int) -> bytes:
    """FORMATS §9.3 recipe with the stdlib pickle: header, data, pickled (offset, length)."""
    dtype = {1: "u1", 2: "<u2", 4: "<u4"}[token_size]
    data = [np.asarray(d, dtype=dtype).tobytes() for d in docs]
    offsets = np.cumsum([0] + [len(d) for d in data])
    index = [(int(offsets[i]), len(d)) for i, d in enumerate(data)]
    body = b"".join(data)
    return struct.pack("<QI", len(body), token_size) + body + pickle.dumps(index, protocol=4)


def write(path: Path, docs: list, token_size: int = 2, eod: int | None = None) -> Path:
    with ModalitiesWriter(path, token_size, eod_token_id=eod) as writer:
        for doc in docs:
            writer.add_document(np.asarray(doc, dtype=np.int64))
    return path


@pytest.mark.parametrize("kw", [{}, {"format": "modalities"}, {"dtype": "uint16"}])
def test_fixture_reads_back_its_documents(kw: dict[str, str]) -> None:
    (info,) = describe(DATA / "docs.pbin", **kw).shards
    assert (info.format, info.dtype, info.offset, info.num_tokens) == ("modalities", "<u2", 12, 15)
    assert info.index_path is None
    assert info.meta == {
        "token_size": 2, "num_documents": 4, "index_offset": 42, "index_repairs": 0,
    }  # fmt: skip
    shard = open_shard(info)
    assert shard.document_bounds().tolist() == [0, 4, 7, 13, 15]
    assert documents(shard) == DOCS
    assert is_mapped(shard.tokens(2, 9))


def test_merged_fixture_is_repaired_with_a_warning() -> None:
    """merge_packed_data shifts the second file's offsets by -12 bytes (FORMATS §3.3)."""
    with pytest.warns(UserWarning, match=MERGE_WARNING):
        (info,) = describe(DATA / "merged.pbin").shards
    assert info.meta["index_repairs"] == 1 and info.num_tokens == 30
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert documents(open_shard(info)) == DOCS + DOCS


def test_writer_is_byte_identical_to_pack_encoded_data(tmp_path: Path) -> None:
    expected = (DATA / "docs.pbin").read_bytes()
    assert write(tmp_path / "a.pbin", INPUT, eod=0).read_bytes() == expected
    assert write(tmp_path / "b.pbin", DOCS, eod=0).read_bytes() == expected  # no second EOD
    assert write(tmp_path / "c.pbin", DOCS).read_bytes() == expected
    assert sorted(os.listdir(tmp_path)) == ["a.pbin", "b.pbin", "c.pbin"]


def test_writer_skips_empty_documents_like_the_tool(tmp_path: Path) -> None:
    warns = pytest.warns(UserWarning, match=r"x\.pbin: skipped 2 empty documents")
    with warns, ModalitiesWriter(tmp_path / "x.pbin", 2, eod_token_id=0) as writer:
        for doc in [[], *INPUT[:2], np.array([], dtype=np.uint16), *INPUT[2:]]:
            writer.add_document(doc)
    assert (writer.skipped_empty, writer.num_documents) == (2, 4)
    assert (tmp_path / "x.pbin").read_bytes() == (DATA / "docs.pbin").read_bytes()


def test_writer_refuses_bad_input_and_leaves_nothing(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="token_size = 3 must be 1, 2 or 4"):
        ModalitiesWriter(tmp_path / "x.pbin", 3)
    with pytest.raises(ValueError, match=r"eod_token_id: token id 256 does not fit uint8"):
        ModalitiesWriter(tmp_path / "x.pbin", 1, eod_token_id=256)
    refused = pytest.raises(ValueError, match=r"x\.pbin: document 1: token id 65536 does not fit")
    with refused, ModalitiesWriter(tmp_path / "x.pbin", 2) as writer:
        writer.add_document([1, 2])
        writer.add_document([65536])
    assert os.listdir(tmp_path) == []


@settings(max_examples=40, deadline=None)
@given(
    token_size=st.sampled_from([1, 2, 4]),
    shape=st.lists(st.integers(0, 300), min_size=1, max_size=12),
    eod=st.one_of(st.none(), st.integers(0, 3)),
    seed=st.integers(0, 2**32 - 1),
)
def test_round_trip_writer_reader(
    tmp_path_factory: pytest.TempPathFactory, token_size: int, shape: list, eod, seed: int
) -> None:
    """Empty, one-token and long documents, ids up to the dtype maximum, EOD or none."""
    high = 2 ** (8 * token_size)
    rng = np.random.default_rng(seed)
    docs = [rng.integers(0, high, size=n, dtype=np.int64) for n in shape]
    docs[0][-1:] = high - 1
    expected = [
        [*d.tolist(), *([] if eod is None or d[-1] == eod else [eod])] for d in docs if d.size
    ]
    folder = tmp_path_factory.mktemp("rt")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # skipped empty documents
        path = write(folder / "r.pbin", docs, token_size, eod)
    assert path.read_bytes() == reference_pbin(expected, token_size)
    if not expected:
        with pytest.raises(FormatError, match=r"r\.pbin: shard holds 0 tokens"):
            describe(path)
        return
    (info,) = describe(path).shards
    assert info.meta["num_documents"] == len(expected)
    assert documents(open_shard(info)) == expected


def test_many_documents_use_several_pickle_frames(tmp_path: Path) -> None:
    rng = np.random.default_rng(0)
    docs = [rng.integers(0, 65536, size=int(n)) for n in rng.integers(1, 40, size=10_000)]
    path = write(tmp_path / "big.pbin", docs)
    assert path.read_bytes() == reference_pbin([d.tolist() for d in docs], 2)
    (info,) = describe(path).shards
    assert info.size - info.meta["index_offset"] > 64 * 1024
    shard = open_shard(info)
    assert np.array_equal(shard.document_bounds(), np.cumsum([0, *map(len, docs)]))
    assert shard.tokens(0, info.num_tokens).tolist() == np.concatenate(docs).tolist()


def test_merge_pbin_merges_without_the_defect(tmp_path: Path) -> None:
    docs = str(DATA / "docs.pbin")
    merge_pbin([docs, docs], tmp_path / "m.pbin")
    ours, tools = (tmp_path / "m.pbin").read_bytes(), (DATA / "merged.pbin").read_bytes()
    assert ours[:72] == tools[:72]  # header and data segment
    good = [(0, 8), (8, 6), (14, 12), (26, 4), (30, 8), (38, 6), (44, 12), (56, 4)]
    assert ours[72:] == pickle.dumps(good, protocol=4)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        (info,) = describe(tmp_path / "m.pbin").shards
    assert documents(open_shard(info)) == DOCS * 2


def test_merge_pbin_repairs_defective_inputs(tmp_path: Path) -> None:
    with pytest.warns(UserWarning, match=MERGE_WARNING):
        merge_pbin([DATA / "merged.pbin", DATA / "docs.pbin"], tmp_path / "m.pbin")
    (info,) = describe(tmp_path / "m.pbin").shards
    assert documents(open_shard(info)) == DOCS * 3
    write(tmp_path / "one.pbin", [[1, 2]], token_size=4)
    with pytest.raises(ValueError, match=r"different token sizes \[2, 4\]"):
        merge_pbin([DATA / "docs.pbin", tmp_path / "one.pbin"], tmp_path / "bad.pbin")


def test_three_file_merge_defect_and_empty_inputs_are_repaired(tmp_path: Path) -> None:
    """File k is shifted by -12·k; an input with no documents adds its shift to the next."""
    parts = [[[1, 2, 3]], [], [[4, 5], [6]], [[7]]]
    data, index, shift = b"", [], 0
    for part in parts:
        for doc in part:
            index.append((len(data) - shift, 2 * len(doc)))
            data += np.asarray(doc, "<u2").tobytes()
        shift += 12
    path = tmp_path / "merged.pbin"
    path.write_bytes(struct.pack("<QI", len(data), 2) + data + pickle.dumps(index, protocol=4))
    assert [off for off, _ in index] == [0, 6 - 24, 10 - 24, 12 - 36]
    with pytest.warns(UserWarning, match=MERGE_WARNING):
        (info,) = describe(path).shards
    assert info.meta["index_repairs"] == 3
    assert documents(open_shard(info)) == [[1, 2, 3], [4, 5], [6], [7]]


def fixture_bytes() -> bytearray:
    return bytearray((DATA / "docs.pbin").read_bytes())


def index_bytes(index: list[tuple[int, int]], data_len: int = 30) -> bytes:
    return fixture_bytes()[: 12 + data_len] + pickle.dumps(index, protocol=4)


@pytest.mark.parametrize(
    ("blob", "message"),
    [
        (fixture_bytes()[:11], r"file is 11 bytes, shorter than the 12-byte \.pbin header"),
        (fixture_bytes()[:42], "data_len = 30 bytes needs at least 43 bytes .* file is 42"),
        (fixture_bytes()[:30], "data_len = 30 bytes needs at least 43 bytes .* file is 30"),
        (struct.pack("<QI", 30, 3) + fixture_bytes()[12:], "token_size = 3 at byte 8"),
        (struct.pack("<QI", 29, 2) + fixture_bytes()[12:], "data_len = 29 is not a multiple"),
        (struct.pack("<QI", 2**63, 2) + fixture_bytes()[12:], "needs at least"),
        (fixture_bytes() + bytes(400), r"index segment .* is 440 bytes, more than .* 15 doc"),
        (index_bytes([(0, 8), (8, 6), (14, 12)]), "documents end at byte 26 but header data_len"),
        (index_bytes([(0, 8), (8, 6), (12, 12), (24, 6)]), "document 2 starts at byte 12 .*overl"),
        (index_bytes([(0, 8), (10, 6), (16, 14)]), "document 1 starts at byte 10 .*leaves a gap"),
        (
            index_bytes([(2, 28)]),
            "document 0 starts at byte 2 but the data segment starts at byte 0",
        ),
        (index_bytes([(0, 8), (8, 7), (15, 15)]), "document 1 has byte length 7; expected a"),
        (index_bytes([(0, 8), (-2, 24)]), "document 1 starts at byte -2 .* overlaps"),
        (index_bytes([]), "document index is empty but data_len = 30"),
        (index_bytes([(0, 30), (30, -4)]), "document 1 has byte length -4"),
        (
            fixture_bytes()[:42] + pickle.dumps({"a": 1}),
            r"EMPTY_DICT \(0x7d\) is not allowed at byte 53",
        ),
        (
            fixture_bytes()[:42] + b"cos\nsystem\n(S'x'\ntR.",
            r"GLOBAL \(0x63\) is not allowed at byte 42",
        ),
    ],
)
def test_corrupt_files_are_refused_naming_the_file(
    tmp_path: Path, blob: bytes, message: str
) -> None:
    (tmp_path / "bad.pbin").write_bytes(bytes(blob))
    with pytest.raises(FormatError, match=r"bad\.pbin: .*" + message):
        describe(tmp_path / "bad.pbin")


def test_merge_like_jump_that_does_not_fit_is_refused(tmp_path: Path) -> None:
    """-12 jumps whose repair does not end at data_len are not the merge defect."""
    (tmp_path / "bad.pbin").write_bytes(index_bytes([(0, 8), (-4, 6), (2, 12)], 30))
    with pytest.raises(FormatError, match=r"bad\.pbin: document index: document 1 starts"):
        describe(tmp_path / "bad.pbin")


@settings(max_examples=40, deadline=None)
@given(cut=st.integers(0, 81))
def test_truncated_files_are_refused(tmp_path_factory: pytest.TempPathFactory, cut: int) -> None:
    path = tmp_path_factory.mktemp("cut") / "docs.pbin"
    path.write_bytes(fixture_bytes()[:cut])
    with pytest.raises(FormatError, match=r"docs\.pbin: "):
        describe(path)


@settings(max_examples=50, deadline=None)
@given(index=st.lists(st.tuples(st.integers(-40, 40), st.integers(-4, 30)), max_size=6))
def test_any_index_is_refused_or_tiles_the_data(
    tmp_path_factory: pytest.TempPathFactory, index: list[tuple[int, int]]
) -> None:
    path = tmp_path_factory.mktemp("idx") / "x.pbin"
    path.write_bytes(index_bytes(index))
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            (info,) = describe(path).shards
    except FormatError as exc:
        assert str(exc).startswith(str(path))
        return
    bounds = open_shard(info).document_bounds()
    lengths = [length for _, length in index]  # in bytes; bounds are in 2-byte tokens
    assert (bounds * 2).tolist() == np.cumsum([0, *lengths]).tolist()
    assert bounds.tolist() == sorted(bounds.tolist())
    assert bounds[-1] == 15 and all(length % 2 == 0 for length in lengths)


@settings(max_examples=50, deadline=None)
@given(position=st.integers(0, 81), value=st.integers(0, 255))
def test_flipped_bytes_are_refused_or_read(
    tmp_path_factory: pytest.TempPathFactory, position: int, value: int
) -> None:
    """Any single byte changed: a FormatError naming the file, or a consistent read."""
    blob = fixture_bytes()
    blob[position] = value
    path = tmp_path_factory.mktemp("flip") / "x.pbin"
    path.write_bytes(bytes(blob))
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            (info,) = describe(path).shards
            shard = open_shard(info)
            docs = documents(shard)
    except FormatError as exc:
        assert str(exc).startswith(str(path))
        return
    assert sum(map(len, docs)) == info.num_tokens
    assert [t for d in docs for t in d] == shard.tokens(0, info.num_tokens).tolist()


def test_wrong_configured_dtype_is_refused() -> None:
    with pytest.raises(FormatError, match=r"docs\.pbin: header token_size = 2 means uint16 .*"):
        describe(DATA / "docs.pbin", dtype="uint8")  # uint16 does not cast to it


def test_file_changed_after_start_up(tmp_path: Path) -> None:
    path = copy(tmp_path)
    (info,) = describe(path).shards
    path.write_bytes(fixture_bytes() + b"\x00")
    with pytest.raises(FormatError, match=r"docs\.pbin: file is 83 bytes but was 82"):
        open_shard(info)


def test_sniffing_needs_the_pbin_suffix(tmp_path: Path) -> None:
    shutil.copy(DATA / "docs.pbin", tmp_path / "docs.bin")
    with pytest.raises(FormatError, match="headerless token file"):
        describe(tmp_path / "docs.bin")
    (info,) = describe(tmp_path / "docs.bin", format="modalities").shards
    assert documents(open_shard(info)) == DOCS


@pytest.mark.parametrize(
    ("vocab", "size"),
    [(1, 4), (2, 1), (256, 1), (257, 2), (50_257, 2), (65_536, 2), (65_537, 4), (2**32, 4)],
)
def test_token_size_for_vocab(vocab: int, size: int) -> None:
    assert token_size_for_vocab(vocab) == size


def test_token_size_for_vocab_refuses_huge_vocabularies() -> None:
    with pytest.raises(ValueError, match="more than 4 bytes"):
        token_size_for_vocab(2**32 + 1)


@pytest.mark.filterwarnings("ignore:each pass")
@pytest.mark.parametrize("fmt", ["auto", "modalities"])
def test_loader_masks_come_from_the_index(tmp_path: Path, fmt: str) -> None:
    """Documents without EOD over two files: only the pickled index places the boundaries."""
    rng = np.random.default_rng(7)
    docs = [rng.integers(1, 500, size=int(n)) for n in rng.integers(1, 25, size=40)]
    write(tmp_path / "a.pbin", docs[:20])
    write(tmp_path / "b.pbin", docs[20:])
    cfg = {
        "seq_len": 8,
        "seed": 3,
        "vocab_size": 512,
        "sources": [{"name": "m", "path": str(tmp_path), "format": fmt}],
        "packing": {"masks": True},
    }
    assert_masks_follow_documents(cfg, docs)
