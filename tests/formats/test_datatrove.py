"""datatrove ``.ds`` + ``.ds.index`` + ``.ds.metadata``: fixture, writer, corruption, loader."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from streamload.catalog.sources import SourceCatalog, describe_source
from streamload.config import SourceConfig
from streamload.errors import FormatError
from streamload.formats import open_shard
from streamload.formats.datatrove.datatrove import DatatroveShard, DatatroveWriter, humanize_metric
from streamload.formats.loss_mask import mask_shard
from tests.helpers.catalog import rewrote_in_place
from tests.helpers.masks import assert_masks_follow_documents
from tests.helpers.paths import TESTS
from tests.helpers.shards import documents, is_mapped

DATA = TESTS / "data" / "datatrove"
DS = "tiny_00000_unshuffled.ds"
DOCS = [[7, 8, 9, 0], [12, 13, 0], [22, 23, 24, 25, 26, 0], [32, 0]]


def describe(path: Path | str, **kw: str) -> SourceCatalog:
    return describe_source(SourceConfig(name="d", path=str(path), **kw))


def fixture_copy(folder: Path, *suffixes: str) -> Path:
    for suffix in suffixes or ("", ".index", ".metadata"):
        shutil.copy(DATA / (DS + suffix), folder / (DS + suffix))
    return folder


def write(folder: Path, docs: list, token_size: int = 2, **kw: bool) -> Path:
    with DatatroveWriter(folder / DS, "tok300.json", token_size, **kw) as writer:
        for doc in docs:
            writer.add_document(np.asarray(doc, dtype=np.int64))
    return folder


@pytest.mark.parametrize("kw", [{}, {"dtype": "uint16"}, {"format": "datatrove"}])
def test_fixture_reads_back_its_documents(kw: dict[str, str]) -> None:
    (info,) = describe(DATA, **kw).shards
    assert (info.format, info.dtype, info.num_tokens, info.offset) == ("datatrove", "<u2", 15, 0)
    assert info.meta["tokenizer"] == "tok300.json"
    assert info.meta["num_documents"] == 4
    shard = open_shard(info)
    assert isinstance(shard, DatatroveShard)
    assert shard.document_bounds().tolist() == [0, 4, 7, 13, 15]
    assert shard.document_bounds().dtype == np.int64
    assert documents(shard) == DOCS
    assert is_mapped(shard.tokens(3, 11))
    assert info.loss_mask is None


def test_writer_is_byte_identical_to_datatrove(tmp_path: Path) -> None:
    write(tmp_path, DOCS)
    for suffix in ("", ".index", ".metadata"):
        assert (tmp_path / (DS + suffix)).read_bytes() == (DATA / (DS + suffix)).read_bytes()
    assert sorted(os.listdir(tmp_path)) == [DS, DS + ".index", DS + ".metadata"]


@pytest.mark.parametrize(
    ("count", "text"),
    [
        (0, "0.00 T"),
        (15, "15.0 T"),
        (999, "999 T"),
        (1234, "1.23 kT"),
        (123_000, "123 kT"),
        (999_999, "1.00 MT"),
        (2_000_000_000, "2.00 GT"),
        (45_678_901_234, "45.7 GT"),
    ],
)
def test_humanized_count(count: int, text: str) -> None:
    assert humanize_metric(count, "T") == text


@settings(max_examples=50, deadline=None)
@given(st.integers(0, 10**24))
def test_humanized_count_matches_humanize(count: int) -> None:
    humanize = pytest.importorskip("humanize")
    assert humanize_metric(count, "T") == humanize.metric(count, "T")


def test_metadata_of_other_sizes(tmp_path: Path) -> None:
    with DatatroveWriter(tmp_path / DS, None, 4) as writer:
        writer.add_document([70000, 0])
    assert (tmp_path / (DS + ".metadata")).read_bytes() == b"Unknown Tokenizer|4|4\n2\n2.00 T"
    (info,) = describe(tmp_path).shards
    assert (info.dtype, info.meta["tokenizer"]) == ("<u4", "Unknown Tokenizer|4")
    assert documents(open_shard(info)) == [[70000, 0]]


docs_strategy = st.lists(
    st.lists(st.integers(0, 2**32 - 1), max_size=30)
    | st.just([2**32 - 1])
    | st.integers(100, 2000).map(lambda n: list(range(n))),
    min_size=1,
    max_size=10,
).filter(lambda docs: sum(map(len, docs)) > 0)


@settings(max_examples=30, deadline=None)
@given(docs=docs_strategy, loss=st.booleans())
def test_round_trip(tmp_path_factory: pytest.TempPathFactory, docs: list, loss: bool) -> None:
    folder = tmp_path_factory.mktemp("rt")
    with DatatroveWriter(folder / DS, "t", 4, save_loss_metadata=loss) as writer:
        for k, doc in enumerate(docs):
            mask = np.arange(len(doc)) % (k + 2) != 0
            writer.add_document(doc, loss_mask=mask if loss else None)
    info = describe(folder).shards[0]
    shard = open_shard(info)
    assert documents(shard) == docs  # empty documents repeat their end in the index
    assert (info.loss_mask is not None) == loss  # the catalog finds X.ds.loss
    if loss:
        masks = [np.arange(len(d)) % (k + 2) != 0 for k, d in enumerate(docs)]
        read = open_shard(mask_shard(info)).tokens(0, info.num_tokens)
        assert read.tolist() == np.concatenate(masks).astype(int).tolist()


def test_writer_refuses_ids_outside_the_width(tmp_path: Path) -> None:
    with DatatroveWriter(tmp_path / DS, "t", 2) as writer:
        writer.add_document([65535])
        with pytest.raises(ValueError, match=r"document 1: token id 65536 does not fit uint16"):
            writer.add_document([65536])
    assert documents(open_shard(describe(tmp_path).shards[0])) == [[65535]]
    with pytest.raises(ValueError, match="token_size = 3"):
        DatatroveWriter(tmp_path / "x.ds", "t", 3)


def test_interrupted_write_leaves_no_shard(tmp_path: Path) -> None:
    with pytest.raises(RuntimeError, match="boom"), DatatroveWriter(tmp_path / DS, "t", 2) as w:
        w.add_document([1, 2, 0])
        raise RuntimeError("boom")
    assert os.listdir(tmp_path) == []


def test_width_without_metadata_is_inferred_from_the_index(tmp_path: Path) -> None:
    fixture_copy(tmp_path, "", ".index")
    (info,) = describe(tmp_path).shards  # 15 ends * 2 bytes == 30 bytes: only uint16 fits
    assert info.dtype == "<u2"
    assert documents(open_shard(info)) == DOCS
    assert describe(tmp_path, dtype="uint16").shards[0].num_tokens == 15
    with pytest.raises(FormatError, match=r"ends at token 15 \(60 bytes of uint32\)"):
        describe(tmp_path, dtype="uint32")


def test_old_metadata_without_width(tmp_path: Path) -> None:
    fixture_copy(tmp_path, "", ".index")
    (tmp_path / (DS + ".metadata")).write_text("gpt2\n15\n15.0 T")
    assert describe(tmp_path).shards[0].dtype == "<u2"


@pytest.mark.parametrize(
    ("name", "content", "match"),
    [
        (".metadata", b"tok300.json|2\n14\n14.0 T", r"\.metadata says 14 tokens but the index"),
        (".metadata", b"tok300.json|3\n15\n15.0 T", r"\.metadata: token width 3 is not 2 or 4"),
        (".metadata", b"garbage", r"\.metadata: expected 'tokenizer\|width'"),
        (".index", b"\x04" + b"\0" * 8, r"\.index: 9 bytes is not a multiple of 8"),
        (".index", b"", r"\.index: holds no documents"),
        (".index", np.array([4, 7, 3, 15], "<u8").tobytes(), r"document 2 ends at token 3 before"),
        (".index", np.array([4, 7, 13, 16], "<u8").tobytes(), r"\.metadata says 15 tokens"),
        (".loss", b"\x01" * 14, r"\.loss: 14 bytes, but it is the loss mask of .*holds 15 tokens"),
    ],
)
def test_corrupt_companions(tmp_path: Path, name: str, content: bytes, match: str) -> None:
    fixture_copy(tmp_path)
    (tmp_path / (DS + name)).write_bytes(content)
    with pytest.raises(FormatError, match=match):
        describe(tmp_path)


def test_config_dtype_conflicting_with_metadata() -> None:
    with pytest.raises(FormatError, match=r"\.metadata says 2-byte tokens .* dtype = 'uint32'"):
        describe(DATA, dtype="uint32")


def test_missing_index(tmp_path: Path) -> None:
    fixture_copy(tmp_path, "", ".metadata")
    with pytest.raises(FormatError, match=r"\.ds: its document index .*\.ds\.index is missing"):
        describe(tmp_path, format="datatrove")


@settings(max_examples=40, deadline=None)
@given(cut=st.integers(1, 29))
def test_truncated_tokens_are_refused(tmp_path_factory: pytest.TempPathFactory, cut: int) -> None:
    folder = fixture_copy(tmp_path_factory.mktemp("cut"))
    (folder / DS).write_bytes((DATA / DS).read_bytes()[:cut])
    with pytest.raises(FormatError, match=r"\.ds: the index ends at token 15 \(30 bytes"):
        describe(folder)


@settings(max_examples=40, deadline=None)
@given(ends=st.lists(st.integers(0, 40), min_size=1, max_size=6), meta=st.booleans())
def test_shuffled_index_never_misreads(
    tmp_path_factory: pytest.TempPathFactory, ends: list[int], meta: bool
) -> None:
    """Any index: refused with a FormatError naming the file, or bounds that tile the file."""
    folder = fixture_copy(tmp_path_factory.mktemp("idx"), "", *([".metadata"] if meta else []))
    (folder / (DS + ".index")).write_bytes(np.array(ends, "<u8").tobytes())
    try:
        (info,) = describe(folder).shards
    except FormatError as exc:
        assert DS in str(exc)
        return
    assert ends[-1] == 15 and ends == sorted(ends)
    assert open_shard(info).document_bounds().tolist() == [0, *ends]


def test_index_changed_after_start_up(tmp_path: Path) -> None:
    fixture_copy(tmp_path)
    (info,) = describe(tmp_path).shards
    (tmp_path / (DS + ".index")).write_bytes(np.array([4, 7, 13], "<u8").tobytes())
    with pytest.raises(FormatError, match=r"\.ds\.index: file is 24 bytes but was 32"):
        open_shard(info)


@pytest.mark.filterwarnings("ignore:each pass")
@pytest.mark.parametrize("fmt", ["auto", "datatrove"])
def test_loader_masks_come_from_the_index(tmp_path: Path, fmt: str) -> None:
    """Documents without EOS over two files: only the index can place the boundaries."""
    rng = np.random.default_rng(5)
    docs = [rng.integers(1, 500, size=int(n)) for n in rng.integers(0, 25, size=40)]
    for part, chunk in enumerate((docs[:20], docs[20:])):
        with DatatroveWriter(tmp_path / f"t_{part:05d}.ds", "t", 2) as writer:
            for doc in chunk:
                writer.add_document(doc)
    cfg = {
        "seq_len": 8,
        "seed": 2,
        "vocab_size": 512,
        "sources": [{"name": "d", "path": str(tmp_path), "format": fmt}],
        "packing": {"masks": True},
    }
    assert_masks_follow_documents(cfg, docs)


@settings(max_examples=20, deadline=None)
@given(
    docs=st.lists(st.lists(st.integers(0, 65535), max_size=20), min_size=1, max_size=6),
    token_size=st.sampled_from([2, 4]),
    name=st.sampled_from([None, "gpt2", "org/tok|v2"]),
    loss=st.booleans(),
)
def test_live_datatrove_writes_the_same_bytes(
    tmp_path_factory: pytest.TempPathFactory, docs: list, token_size: int, name, loss: bool
) -> None:
    """Optional: datatrove's own ``TokenizedFile`` (skipped when datatrove is absent)."""
    tokenizer = pytest.importorskip("datatrove.pipeline.tokens.tokenizer")
    ours, theirs = tmp_path_factory.mktemp("ours"), tmp_path_factory.mktemp("theirs")
    masks = [np.arange(len(d)) % 3 != 1 for d in docs]
    real = tokenizer.TokenizedFile(
        str(theirs), DS, save_loss_metadata=loss, tokenizer_name_or_path=name,
        save_final_metadata=True, token_size=token_size,
    )  # fmt: skip
    with DatatroveWriter(ours / DS, name, token_size, save_loss_metadata=loss) as writer:
        for doc, mask in zip(docs, masks, strict=True):
            real.write(doc, mask if loss else None)
            writer.add_document(doc, loss_mask=mask if loss else None)
    real.close()
    assert sorted(os.listdir(ours)) == sorted(os.listdir(theirs))
    for file in os.listdir(ours):
        assert (ours / file).read_bytes() == (theirs / file).read_bytes(), file


@pytest.mark.parametrize(
    ("content", "field"),
    [
        ("tok300.json|2\n١٥\n15.0 T", "token count"),  # Arabic-Indic 15: int() accepts it
        ("tok300.json|2\n１５\n15.0 T", "token count"),  # fullwidth 15
        ("tok300.json|2\n15²\n15.0 T", "token count"),  # isdigit() but int() raises
        ("tok300.json|٢\n15\n15.0 T", "width"),
        ("tok300.json|²\n15\n15.0 T", "width"),
        ("tok300.json|2\n+15\n15.0 T", "token count"),
        ("tok300.json|2\n 15\n15.0 T", "token count"),
        ("tok300.json|2\n1_5\n15.0 T", "token count"),
        ("tok300.json|2\n" + "9" * 40 + "\n15.0 T", "token count"),
        ("tok300.json|2\n15", None),  # two lines are enough (the humanized count is cosmetic)
    ],
)
def test_metadata_numbers_are_ascii_digits(tmp_path: Path, content: str, field: str | None) -> None:
    """Counts are parsed strictly: ASCII digits only, as datatrove writes them."""
    fixture_copy(tmp_path)
    (tmp_path / (DS + ".metadata")).write_text(content, encoding="utf-8")
    if field is None:
        assert describe(tmp_path).shards[0].num_tokens == 15
        return
    with pytest.raises(FormatError, match=rf"\.ds\.metadata: line \d \({field}\) is .*; expected"):
        describe(tmp_path)


def test_metadata_that_is_not_utf8_is_refused(tmp_path: Path) -> None:
    fixture_copy(tmp_path)
    (tmp_path / (DS + ".metadata")).write_bytes(b"tok\xff|2\n15\n15.0 T")
    with pytest.raises(FormatError, match=r"\.ds\.metadata: not UTF-8 text"):
        describe(tmp_path)


def test_index_larger_than_the_tokens_can_need_is_refused_unread(tmp_path: Path) -> None:
    fixture_copy(tmp_path, "", ".metadata")
    ends = np.full(15 + 4096, 15, dtype="<u8")  # 30 bytes of .ds: at most 15 + 4096 documents
    (tmp_path / (DS + ".index")).write_bytes(ends.tobytes())
    assert describe(tmp_path).shards[0].meta["num_documents"] == 15 + 4096
    (tmp_path / (DS + ".index")).write_bytes(np.append(ends, 15).astype("<u8").tobytes())
    rewrote_in_place(tmp_path / (DS + ".index"))
    with pytest.raises(FormatError, match=r"\.ds\.index: .* holds at most 4111 documents"):
        describe(tmp_path)


def test_huge_metadata_is_refused_unread(tmp_path: Path) -> None:
    fixture_copy(tmp_path)
    (tmp_path / (DS + ".metadata")).write_bytes(b"tok300.json|2\n15\n" + b" " * (1 << 17))
    with pytest.raises(FormatError, match=r"\.ds\.metadata: larger than 65536 bytes"):
        describe(tmp_path)
