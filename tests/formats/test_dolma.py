"""Dolma ``part-*.npy`` + ``part-*.csv.gz``: the dolma fixture, writer, corruption, loader."""

from __future__ import annotations

import gzip
import io
import os
import shutil
import struct
import tracemalloc
import zlib
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from streamload.catalog.sources import SourceCatalog, describe_source
from streamload.config import SourceConfig
from streamload.errors import FormatError
from streamload.formats import ReadOptions, open_shard
from streamload.formats.dolma import _csv as _dolma_csv
from streamload.formats.dolma.dolma import DolmaShard, DolmaWriter, dolma_dtype
from tests.helpers.masks import assert_masks_follow_documents
from tests.helpers.paths import TESTS
from tests.helpers.shards import documents, is_mapped

DATA = TESTS / "data" / "dolma"
NPY, CSV = "part-0-00000.npy", "part-0-00000.csv.gz"
DOCS = [[1, 12, 13, 0], [1, 22, 23, 24, 25, 26, 0], [1, 7, 8, 9, 0]]
ROWS = [("d2", "docs/a.jsonl.gz", 2), ("d4", "docs/a.jsonl.gz", 4), ("d1", "docs/a.jsonl.gz", 1)]


def describe(path: Path | str, vocab_size: int | None = None, **kw: str) -> SourceCatalog:
    return describe_source(SourceConfig(name="d", path=str(path), **kw), vocab_size)


def fixture_copy(tmp_path: Path) -> Path:
    for name in (NPY, CSV):
        shutil.copy(DATA / name, tmp_path / name)
    return tmp_path


def write_csv(path: Path, text: str) -> None:
    path.write_bytes(gzip.compress(text.encode()))


@pytest.mark.parametrize(("kw", "vocab"), [({"dtype": "uint16"}, None), ({}, 300)])
@pytest.mark.parametrize("fmt", ["auto", "dolma"])
def test_fixture_reads_back_its_documents(kw: dict[str, str], vocab: int | None, fmt: str) -> None:
    (info,) = describe(DATA, vocab, format=fmt, **kw).shards
    assert (info.format, info.dtype, info.num_tokens, info.offset) == ("dolma", "<u2", 16, 0)
    assert info.index_path == str(DATA / CSV)
    shard = open_shard(info)
    assert isinstance(shard, DolmaShard)
    assert shard.document_bounds().tolist() == [0, 4, 11, 16]
    assert shard.document_bounds().dtype == np.int64
    assert documents(shard) == DOCS
    assert is_mapped(shard.tokens(2, 9))
    assert [shard.document_metadata(i) for i in range(3)] == [
        {"id": i, "src": s, "loc": loc} for i, s, loc in ROWS
    ]
    with pytest.raises(IndexError):
        shard.document_metadata(3)


def test_without_dtype_or_vocab_size_is_refused() -> None:
    with pytest.raises(FormatError, match=r"part-0-00000\.npy: a dolma \.npy .*set dtype"):
        describe(DATA)


@pytest.mark.parametrize(
    ("vocab", "dtype"),
    [(2, "uint8"), (256, "uint8"), (257, "uint16"), (65536, "uint16"), (65537, "uint32")],
)
def test_vocab_size_rule_is_dolmas(vocab: int, dtype: str) -> None:
    assert dolma_dtype("x.npy", ReadOptions(vocab_size=vocab)) == np.dtype(dtype)
    assert dolma_dtype("x.npy", ReadOptions(vocab_size=vocab, dtype="int64")) == np.int64


def test_writer_is_byte_identical_to_dolma(tmp_path: Path) -> None:
    fixture_csv = (DATA / CSV).read_bytes()
    (mtime,) = struct.unpack("<I", fixture_csv[4:8])
    with DolmaWriter(tmp_path / NPY, "uint16", mtime=mtime) as writer:
        for doc, (doc_id, src, loc) in zip(DOCS, ROWS, strict=True):
            writer.add_document(np.array(doc), doc_id=doc_id, src=src, loc=loc)
    assert (tmp_path / NPY).read_bytes() == (DATA / NPY).read_bytes()
    assert gzip.decompress((tmp_path / CSV).read_bytes()) == gzip.decompress(fixture_csv)
    assert (tmp_path / CSV).read_bytes() == fixture_csv  # gzip header, name and stream too
    assert sorted(os.listdir(tmp_path)) == [CSV, NPY]


def test_writer_quotes_like_the_csv_module(tmp_path: Path) -> None:
    with DolmaWriter(tmp_path / NPY, "uint16", mtime=0) as writer:
        writer.add_document([5, 0], doc_id='a,"b"\nc', src="s")
        writer.add_document([6, 0])
    text = gzip.decompress((tmp_path / CSV).read_bytes())
    assert text == b'0,2,"a,""b""\nc",s,1\r\n2,4,1,,2\r\n'
    shard = open_shard(describe(tmp_path, dtype="uint16").shards[0])
    assert documents(shard) == [[5, 0], [6, 0]]
    assert shard.document_metadata(0) == {"id": 'a,"b"\nc', "src": "s", "loc": 1}
    assert shard.document_metadata(1) == {"id": "1", "src": "", "loc": 2}


def test_max_size_rolls_over_without_splitting_documents(tmp_path: Path) -> None:
    docs = [list(range(1, n + 1)) for n in (3, 4, 2, 5, 1, 4)]
    with DolmaWriter(tmp_path / "part-0-00000.npy", "uint32", max_size=8, mtime=0) as writer:
        for doc in docs:
            writer.add_document(doc)
    names = [os.path.basename(p) for p in writer.paths]
    assert names == ["part-0-00000.npy", "part-0-00001.npy", "part-0-00002.npy"]
    catalog = describe(tmp_path, dtype="uint32")
    assert [s.num_tokens for s in catalog.shards] == [7, 7, 5]  # each < max_size
    got = [d for s in catalog.shards for d in documents(open_shard(s))]
    assert got == docs
    with (
        pytest.raises(ValueError, match=r"document 0 has 8 tokens; .* max_size = 8"),
        DolmaWriter(tmp_path / "x" / "part-1-00000.npy", "uint8", max_size=8) as writer,
    ):
        writer.add_document([1] * 8)
    assert os.listdir(tmp_path / "x") == []


def test_writer_refuses_ids_outside_the_dtype(tmp_path: Path) -> None:
    with DolmaWriter(tmp_path / NPY, "uint16", mtime=0) as writer:
        writer.add_document([65535, 0])  # the largest uint16 id is fine
        with pytest.raises(ValueError, match=r"token id 65536 does not fit uint16"):
            writer.add_document([65536])
        with pytest.raises(ValueError, match=r"token id -1 does not fit uint16"):
            writer.add_document([-1])
    shard = open_shard(describe(tmp_path, dtype="uint16").shards[0])
    assert documents(shard) == [[65535, 0]]


def test_interrupted_write_leaves_no_shard(tmp_path: Path) -> None:
    with pytest.raises(RuntimeError, match="boom"), DolmaWriter(tmp_path / NPY, "uint16") as w:
        w.add_document([1, 2, 0])
        raise RuntimeError("boom")
    assert os.listdir(tmp_path) == []


documents_strategy = st.lists(
    st.lists(st.integers(0, 2**16 - 1), max_size=40)
    | st.just([2**16 - 1])
    | st.integers(200, 3000).map(lambda n: [n % 65536] * n),
    min_size=1,
    max_size=12,
).filter(lambda docs: sum(map(len, docs)) > 0)


@settings(
    max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(docs=documents_strategy, ids=st.lists(st.text(max_size=8), min_size=12, max_size=12))
def test_round_trip(tmp_path_factory: pytest.TempPathFactory, docs: list, ids: list) -> None:
    folder = tmp_path_factory.mktemp("rt")
    with DolmaWriter(folder / NPY, "uint16") as writer:
        for doc, doc_id in zip(docs, ids, strict=False):
            writer.add_document(np.array(doc, dtype=np.int64), doc_id=doc_id, src="s,x")
    shard = open_shard(describe(folder, 65536).shards[0])
    assert documents(shard) == docs  # empty documents keep their (empty) row
    assert [shard.document_metadata(i)["id"] for i in range(len(docs))] == ids[: len(docs)]


def test_legacy_start_end_rows(tmp_path: Path) -> None:
    shutil.copy(DATA / NPY, tmp_path / NPY)
    write_csv(tmp_path / CSV, "0,4\n4,11\n11,16")  # OLMo write_document_indices, no final \n
    shard = open_shard(describe(tmp_path, dtype="uint16").shards[0])
    assert documents(shard) == DOCS
    assert shard.document_metadata(2) == {"id": None, "src": None, "loc": None}


@pytest.mark.parametrize(
    ("text", "match"),
    [
        ("", r"csv\.gz: has no rows"),
        ("1,4,a,s,1\r\n4,16,b,s,2\r\n", r"row 1 starts at token 1; expected 0"),
        ("0,4,a,s,1\r\n5,16,b,s,2\r\n", r"row 1 ends at token 4 but row 2 starts at 5"),
        ("0,4,a,s,1\r\n3,16,b,s,2\r\n", r"row 1 ends at token 4 but row 2 starts at 3"),
        ("0,4\r\n4,3\r\n3,16\r\n", r"row 2 starts at token 4 after its end 3"),
        ("0,4,a,s,1\r\n4,15,b,s,2\r\n", r"last row ends at token 15 .* 32 bytes"),
        ("0,4,a,s,1\r\n4,17,b,s,2\r\n", r"last row ends at token 17"),
        ("0,4,a,s,1\r\n4,x6,b,s,2\r\n", r"row 2: end field is 'x6'"),
        ("0,4,a,s,1\r\n\r\n4,16,b,s,2\r\n", r"row 2 is ''; expected at least start,end"),
        ("0;4;a\r\n", r"row 1 is '0;4;a'"),
        ("0,99999999999999999999\r\n", r"row 1: end field"),
    ],
)
def test_bad_rows_are_refused_naming_the_row(tmp_path: Path, text: str, match: str) -> None:
    fixture_copy(tmp_path)
    write_csv(tmp_path / CSV, text)
    with pytest.raises(FormatError, match=match):
        describe(tmp_path, dtype="uint16")


def test_wrong_dtype_names_the_width_that_would_fit(tmp_path: Path) -> None:
    with pytest.raises(FormatError, match=r"ends at token 16 \(64 bytes of uint32\).*uint16"):
        describe(DATA, dtype="uint32")


def test_missing_or_broken_companion(tmp_path: Path) -> None:
    shutil.copy(DATA / NPY, tmp_path / NPY)
    with pytest.raises(FormatError, match=r"part-0-00000\.npy: its document metadata .* missing"):
        describe(tmp_path, format="dolma", dtype="uint16")
    # format = "auto" without the CSV: a headerless .npy, read as raw
    assert describe(tmp_path, dtype="uint16").shards[0].format == "raw"
    (tmp_path / CSV).write_bytes((DATA / CSV).read_bytes()[:40])
    with pytest.raises(FormatError, match=r"csv\.gz: not a readable gzip file"):
        describe(tmp_path, dtype="uint16")


def test_real_npy_is_not_dolma(tmp_path: Path) -> None:
    np.save(tmp_path / NPY, np.array([1, 2, 3], dtype=np.uint16))
    shutil.copy(DATA / CSV, tmp_path / CSV)
    assert describe(tmp_path).shards[0].format == "numpy"
    with pytest.raises(FormatError, match=r"real NPY .* format = 'numpy'"):
        describe(tmp_path, format="dolma", dtype="uint16")


@settings(max_examples=40, deadline=None)
@given(cut=st.integers(1, 31))
def test_truncated_tokens_are_refused(tmp_path_factory: pytest.TempPathFactory, cut: int) -> None:
    folder = fixture_copy(tmp_path_factory.mktemp("cut"))
    (folder / NPY).write_bytes((DATA / NPY).read_bytes()[:cut])
    with pytest.raises(FormatError, match=r"csv\.gz: the last row ends at token 16"):
        describe(folder, dtype="uint16")


@settings(max_examples=50, deadline=None)
@given(data=st.data())
def test_mangled_csv_never_misreads(tmp_path_factory: pytest.TempPathFactory, data) -> None:
    """Random byte edits of the CSV: a FormatError naming it, or rows that still tile."""
    text = bytearray(gzip.decompress((DATA / CSV).read_bytes()))
    for _ in range(data.draw(st.integers(1, 3))):
        pos = data.draw(st.integers(0, len(text) - 1))
        text[pos] = data.draw(st.sampled_from(b'0123456789,\r\n"x'))
    folder = fixture_copy(tmp_path_factory.mktemp("mangle"))
    (folder / CSV).write_bytes(gzip.compress(bytes(text)))
    try:
        (info,) = describe(folder, dtype="uint16").shards
    except FormatError as exc:
        assert CSV in str(exc)
        return
    bounds = open_shard(info).document_bounds()
    assert bounds[0] == 0 and bounds[-1] == 16 and np.all(np.diff(bounds) >= 0)


@settings(max_examples=50, deadline=None)
@given(pos=st.integers(0, 86), bit=st.integers(0, 7))
def test_flipped_gzip_bits_never_misread(
    tmp_path_factory: pytest.TempPathFactory, pos: int, bit: int
) -> None:
    """A flipped bit in the .csv.gz: refused naming it, or (header mtime/flags) still exact."""
    folder = fixture_copy(tmp_path_factory.mktemp("flip"))
    packed = bytearray((DATA / CSV).read_bytes())
    packed[pos] ^= 1 << bit
    (folder / CSV).write_bytes(bytes(packed))
    try:
        (info,) = describe(folder, dtype="uint16").shards
    except FormatError as exc:
        assert CSV in str(exc)
        return
    assert documents(open_shard(info)) == DOCS


def test_size_change_after_start_up_is_refused(tmp_path: Path) -> None:
    fixture_copy(tmp_path)
    (info,) = describe(tmp_path, dtype="uint16").shards
    with open(tmp_path / CSV, "ab") as fh:
        fh.write(b"\0")
    shard = open_shard(info)  # tokens need no CSV: it is read when documents are first needed
    assert shard.tokens(0, 2).size == 2
    with pytest.raises(FormatError, match=r"csv\.gz: file is 88 bytes but was 87"):
        shard.document_bounds()


@pytest.mark.filterwarnings("ignore:each pass")
@pytest.mark.parametrize("fmt", ["auto", "dolma"])
def test_loader_masks_come_from_the_csv(tmp_path: Path, fmt: str) -> None:
    """Documents without EOS: only the CSV can place the boundaries the masks show."""
    rng = np.random.default_rng(3)
    docs = [rng.integers(1, 500, size=int(n)) for n in rng.integers(0, 30, size=40)]
    with DolmaWriter(tmp_path / NPY, "uint16", max_size=300, mtime=0) as writer:
        for doc in docs:
            writer.add_document(doc)
    assert len(writer.paths) > 1  # files start documents: max_size never splits one
    cfg = {
        "seq_len": 8,
        "seed": 1,
        "vocab_size": 512,
        "sources": [{"name": "d", "path": str(tmp_path), "format": fmt}],
        "packing": {"masks": True},
    }
    assert_masks_follow_documents(cfg, docs)


def without_mtime(gz: bytes) -> bytes:
    return gz[:4] + b"\0\0\0\0" + gz[8:]


@settings(max_examples=15, deadline=None)
@given(
    docs=st.lists(st.lists(st.integers(0, 65535), min_size=1, max_size=20), min_size=1, max_size=6),
    ids=st.lists(st.text(max_size=6), min_size=6, max_size=6),
)
def test_live_dolma_writes_the_same_bytes(
    tmp_path_factory: pytest.TempPathFactory, docs: list, ids: list
) -> None:
    """Optional: dolma's own ``MemmapWriter`` (skipped when dolma is absent)."""
    memmap_writer = pytest.importorskip("dolma.tokenizer.memmap_writer")
    data_types = pytest.importorskip("dolma.tokenizer.data_types")
    ours, theirs = tmp_path_factory.mktemp("ours"), tmp_path_factory.mktemp("theirs")
    rows = [(doc, ids[k], f"s{k},x", k + 1) for k, doc in enumerate(docs)]
    max_tokens = sum(map(len, docs)) + 1
    with memmap_writer.MemmapWriter(str(theirs / "part-0-00000"), np.uint16, max_tokens) as real:
        for doc, doc_id, src, loc in rows:
            real.write(data_types.TokenizerOutput.from_tokens(doc_id, src, loc, doc))
    with DolmaWriter(ours / NPY, "uint16", max_size=max_tokens, mtime=0) as writer:
        for doc, doc_id, src, loc in rows:
            writer.add_document(doc, doc_id=doc_id, src=src, loc=loc)
    assert (ours / NPY).read_bytes() == (theirs / NPY).read_bytes()
    # dolma stamps the current time in the gzip header; everything else must agree
    assert without_mtime((ours / CSV).read_bytes()) == without_mtime((theirs / CSV).read_bytes())


def gzip_of(first: bytes, repeated: bytes, total: int) -> bytes:
    """A gzip of ``first`` then ``repeated`` up to ``total`` bytes, compressed piece by piece
    (the inflated text is never held whole)."""
    packer = zlib.compressobj(9, zlib.DEFLATED, 31)
    packed = [packer.compress(first)]
    packed += [packer.compress(repeated) for _ in range(total // len(repeated))]
    return b"".join([*packed, packer.flush()])


@pytest.mark.parametrize(
    ("repeated", "match"),
    [
        (b"10,10,b,s,2\r\n" * 4096, r"holds more than 4106 rows but its token file holds 10"),
        (b"10,10," + b"i" * 60_000 + b",s,2\r\n", r"inflates to more than 4204544 bytes"),
    ],
)
def test_gzip_bomb_is_refused_before_it_inflates(
    tmp_path: Path, repeated: bytes, match: str
) -> None:
    """A .csv.gz inflating to 50 MB beside a 10-token .npy (rows of empty documents, each
    valid on its own): refused after a bounded prefix, never decompressed whole."""
    np.arange(1, 11, dtype="<u2").tofile(tmp_path / NPY)
    (tmp_path / CSV).write_bytes(gzip_of(b"0,10,a,s,1\r\n", repeated, 50_000_000))
    assert (tmp_path / CSV).stat().st_size < 1_000_000
    tracemalloc.start()
    try:
        with pytest.raises(FormatError, match=rf"csv\.gz: {match}"):
            describe(tmp_path, dtype="uint16")
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 20_000_000  # a bounded prefix, not the 50 MB of rows


def test_row_longer_than_any_real_row_is_refused(tmp_path: Path) -> None:
    np.arange(1, 1_000_001, dtype="<u4").tofile(tmp_path / NPY)  # room for many rows
    (tmp_path / CSV).write_bytes(gzip_of(b"0,1000000,", b"x" * 65536, 3_000_000))
    with pytest.raises(FormatError, match=r"csv\.gz: row 1 is longer than 65536 bytes"):
        describe(tmp_path, dtype="uint32")


@pytest.mark.parametrize("chunk", [1, 7, 64])
def test_rows_parse_the_same_in_any_chunking(tmp_path: Path, chunk: int) -> None:
    """Streaming the CSV in pieces (quoted ids holding newlines and commas included) gives
    the rows of a whole-buffer parse."""
    docs = [[1, 2], [], [3], [4, 5, 6], [7]]
    ids = ["a\r\nb", 'c,"d"', "", "e\n", "f"]
    with DolmaWriter(tmp_path / NPY, "uint16", mtime=0) as writer:
        for doc, doc_id in zip(docs, ids, strict=True):
            writer.add_document(np.array(doc, dtype=np.int64), doc_id=doc_id, src="s,\n")
    packed = (tmp_path / CSV).read_bytes()
    limits = _dolma_csv.RowLimits.for_tokens(7)
    whole = _dolma_csv.read_rows(io.BytesIO(packed), str(tmp_path / CSV), limits)
    pieces = _dolma_csv.read_rows(
        io.BytesIO(packed), str(tmp_path / CSV), limits, chunk_bytes=chunk
    )
    assert pieces.starts.tolist() == whole.starts.tolist() == [0, 2, 2, 3, 6]
    assert pieces.ends.tolist() == whole.ends.tolist() == [2, 2, 3, 6, 7]
    shard = open_shard(describe(tmp_path, dtype="uint16").shards[0])
    assert [shard.document_metadata(i)["id"] for i in range(5)] == ids


@pytest.mark.parametrize("loc", ["²", "١٢", "１"])
def test_non_ascii_digit_loc_stays_text(tmp_path: Path, loc: str) -> None:
    """``loc`` is an int only when it is ASCII digits (``int("²")`` raises, ``int("١٢")`` is 12)."""
    fixture_copy(tmp_path)
    write_csv(tmp_path / CSV, f"0,4,a,s,{loc}\r\n4,16,b,s,2\r\n")
    shard = open_shard(describe(tmp_path, dtype="uint16").shards[0])
    assert shard.document_metadata(0) == {"id": "a", "src": "s", "loc": loc}
    assert shard.document_metadata(1)["loc"] == 2


@pytest.mark.parametrize("start", ["٠", "０", "+0", " 0", "0_0"])
def test_row_offsets_are_ascii_digits(tmp_path: Path, start: str) -> None:
    fixture_copy(tmp_path)
    write_csv(tmp_path / CSV, f"{start},4,a,s,1\r\n4,16,b,s,2\r\n")
    with pytest.raises(FormatError, match=r"csv\.gz: row 1: start field is .*ASCII digits"):
        describe(tmp_path, dtype="uint16")
