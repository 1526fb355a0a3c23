"""Megatron .bin/.idx: fixtures from megatron-core, byte-identical writer, variants, corruption."""

from __future__ import annotations

import shutil
import struct
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from streamload import SampleStream, build_loader, load_config
from streamload.catalog.sources import SourceCatalog, describe_source
from streamload.config import SourceConfig
from streamload.errors import ConfigError, FormatError
from streamload.formats import open_shard
from streamload.formats.megatron._index import map_index, validate_index, write_index
from streamload.formats.megatron.megatron import MegatronWriter, merge_megatron
from tests.helpers.catalog import rewrote_in_place
from tests.helpers.paths import TESTS
from tests.helpers.shards import is_mapped

DATA = TESTS / "data" / "megatron"
TINY = [[10, 11, 12, 0], [20, 21, 0], [30, 31, 32, 33, 34, 0]]
FIXTURES: dict[str, tuple[str, list[list[int]], list[list[int]]]] = {
    # name: (dtype, sequences, documents)
    "tiny_text_document": ("<u2", TINY, TINY),
    "tiny_int32": ("<i4", [[1, 2], [3, 4, 5], [7, 8]], [[1, 2, 3, 4, 5], [7, 8]]),
    "merged": ("<u2", TINY * 2, TINY * 2),
    "emptydoc": ("<u2", [[5, 6, 0], [7, 0]], [[5, 6, 0], [], [7, 0]]),
    "mm": ("<i4", [[1, 2, 3], [9, 9]], [[1, 2, 3, 9, 9]]),
}
pytestmark = pytest.mark.filterwarnings("ignore:each pass of")
INT_DTYPES = ["uint8", "int8", "int16", "uint16", "int32", "int64"]


def describe(path: Path | str, **kwargs: Any) -> SourceCatalog:
    return describe_source(SourceConfig(name="web", path=str(path), **kwargs))


def split(tokens: np.ndarray, bounds: np.ndarray) -> list[list[int]]:
    return [tokens[bounds[i] : bounds[i + 1]].tolist() for i in range(len(bounds) - 1)]


def read(prefix: Path | str, **kwargs: Any) -> tuple[list[list[int]], list[list[int]], Any]:
    """(documents, sequences, shard) of a one-shard Megatron source."""
    (info,) = describe(prefix, **kwargs).shards
    shard = open_shard(info)
    tokens = shard.tokens(0, info.num_tokens)
    return split(tokens, shard.document_bounds()), split(tokens, shard.sequence_bounds()), shard


def copy_fixture(tmp_path: Path, name: str, as_name: str | None = None) -> Path:
    for suffix in (".bin", ".idx"):
        shutil.copy(DATA / f"{name}{suffix}", tmp_path / f"{as_name or name}{suffix}")
    return tmp_path / (as_name or name)


def raw_idx(
    dtype_code: int, lengths: list[int], docs: list[int] | None, itemsize: int = 2
) -> bytes:
    """An index written by hand (``docs=None``: fairseq's layout, no document section)."""
    ptrs = np.concatenate([[0], np.cumsum(lengths)[:-1]]).astype("<i8") * itemsize
    head = b"MMIDIDX\x00\x00" + struct.pack("<QBQ", 1, dtype_code, len(lengths))
    body = np.asarray(lengths, "<i4").tobytes() + ptrs.tobytes()
    if docs is None:
        return head + body
    return head + struct.pack("<Q", len(docs)) + body + np.asarray(docs, "<i8").tobytes()


# -- fixtures written by megatron-core ------------------------------------------------------
@pytest.mark.parametrize("name", FIXTURES)
def test_fixture_reads_back(name: str) -> None:
    dtype, sequences, documents = FIXTURES[name]
    docs, seqs, shard = read(DATA / name)
    assert (docs, seqs) == (documents, sequences)
    info = shard.info
    assert (info.format, info.dtype, info.offset) == ("megatron", dtype, 0)
    assert info.num_tokens == sum(map(len, sequences))
    assert info.index_path == str(DATA / f"{name}.idx")
    assert (info.meta["sequences"], info.meta["documents"]) == (len(sequences), len(documents))
    assert info.meta["multimodal"] == (name == "mm")
    assert shard.document_bounds().dtype == shard.sequence_bounds().dtype == np.int64


def test_multimodal_modes_and_zero_copy() -> None:
    shard = read(DATA / "mm")[2]
    assert shard.sequence_modes().tolist() == [0, 1]
    assert read(DATA / "tiny_int32")[2].sequence_modes() is None
    view = shard.tokens(1, 4)
    assert is_mapped(view) and view.tolist() == [2, 3, 9]


def test_folder_sniffs_every_dataset(tmp_path: Path) -> None:
    for name in FIXTURES:
        copy_fixture(tmp_path, name)
    with pytest.raises(FormatError, match="one source's files hold one token dtype"):
        describe(tmp_path)  # the fixtures hold several dtypes (issue 36 item 7)
    catalog = describe(tmp_path, dtype="int64")  # every one casts to it safely
    assert [s.relpath for s in catalog.shards] == sorted(f"{n}.bin" for n in FIXTURES)
    assert {s.format for s in catalog.shards} == {"megatron"}
    explicit = describe(tmp_path, format="megatron", dtype="int64")
    assert explicit.shards == catalog.shards


def test_configured_dtype_must_match_the_index() -> None:
    assert read(DATA / "tiny_text_document", dtype="uint16")[0] == TINY
    with pytest.raises(FormatError, match=r"tiny_text_document\.idx: .*uint16 \(code 8\).*uint8"):
        describe(DATA / "tiny_text_document", dtype="uint8")  # uint16 does not cast to it


# -- writer: byte-identical to IndexedDatasetBuilder --------------------------------------
def assert_same_files(prefix: Path, name: str) -> None:
    for suffix in (".bin", ".idx"):
        written = (prefix.parent / f"{prefix.name}{suffix}").read_bytes()
        assert written == (DATA / f"{name}{suffix}").read_bytes(), suffix


def test_writer_documents_tiny_text_document(tmp_path: Path) -> None:
    with MegatronWriter(tmp_path / "out", np.uint16) as writer:
        for doc in TINY:
            writer.add_document(np.array(doc))
    assert_same_files(tmp_path / "out", "tiny_text_document")


def test_writer_sequences_tiny_int32(tmp_path: Path) -> None:
    with MegatronWriter(tmp_path / "a") as writer:  # int32 is the builder's default
        writer.add_document([1, 2, 3, 4, 5], [2, 3])
        writer.add_document(np.array([7, 8], dtype=np.int64), [2])
    assert_same_files(tmp_path / "a", "tiny_int32")
    writer = MegatronWriter(tmp_path / "b", np.int32)
    for item in ([1, 2], [3, 4, 5]):
        writer.add_item(np.array(item))
    writer.end_document()
    writer.add_item([7, 8])
    writer.end_document()
    writer.finalize()
    assert_same_files(tmp_path / "b", "tiny_int32")


def test_writer_add_index_and_merge(tmp_path: Path) -> None:
    tiny = str(DATA / "tiny_text_document")
    with MegatronWriter(tmp_path / "out", np.uint16) as writer:
        writer.add_index(tiny)
        writer.add_index(tiny)
    assert_same_files(tmp_path / "out", "merged")
    merge_megatron([tiny, tiny + ".bin"], tmp_path / "m")
    assert_same_files(tmp_path / "m", "merged")
    copy_fixture(tmp_path, "tiny_text_document", "self")  # the output may replace an input
    merge_megatron([tmp_path / "self", tmp_path / "self"], tmp_path / "self")
    assert_same_files(tmp_path / "self", "merged")


def test_writer_empty_document_and_multimodal(tmp_path: Path) -> None:
    with MegatronWriter(tmp_path / "e", np.uint16) as writer:
        for doc in ([5, 6, 0], [], [7, 0]):
            writer.add_document(doc)
    assert_same_files(tmp_path / "e", "emptydoc")
    with MegatronWriter(tmp_path / "mm", np.int32, multimodal=True) as writer:
        writer.add_item([1, 2, 3], mode=0)
        writer.add_item([9, 9], mode=1)
        writer.end_document()
    assert_same_files(tmp_path / "mm", "mm")
    with MegatronWriter(tmp_path / "mm2", np.int32, multimodal=True) as writer:
        writer.add_document([1, 2, 3, 9, 9], [3, 2], modes=[0, 1])
    assert_same_files(tmp_path / "mm2", "mm")
    merge_megatron([DATA / "mm"], tmp_path / "mm3")
    assert_same_files(tmp_path / "mm3", "mm")


@pytest.mark.parametrize(
    ("call", "match"),
    [
        (lambda w: w.add_document([70000]), r"token 70000 does not fit uint16"),
        (lambda w: w.add_document([-1]), r"token -1 does not fit uint16"),
        (lambda w: w.add_document([1.5]), r"dtype float64, expected integers"),
        (lambda w: w.add_document([1, 2, 3], [2]), r"lengths \[2\] must .* add up to .* 3"),
        (lambda w: w.add_document([1, 2], [3, -1]), r"lengths \[3, -1\] must be int32 >= 0"),
        (lambda w: w.add_document([1], modes=[0]), r"modes given but .* not multimodal"),
    ],
)
def test_writer_refuses_bad_input(tmp_path: Path, call: Any, match: str) -> None:
    with MegatronWriter(tmp_path / "x", np.uint16) as writer:
        with pytest.raises(ConfigError, match=match):
            call(writer)
        writer.add_document([1, 2])  # a refused call leaves the writer consistent
    assert read(tmp_path / "x")[0] == [[1, 2]]


def test_writer_refuses_unsupported_dtypes_and_merges(tmp_path: Path) -> None:
    for dtype in (np.uint32, np.float32):
        with pytest.raises(ConfigError, match="no megatron-core code"):
            MegatronWriter(tmp_path / "x", dtype)
    with MegatronWriter(tmp_path / "y", np.int32) as writer:
        with pytest.raises(FormatError, match=r"tiny_text_document\.idx: dtype uint16 differs"):
            writer.add_index(DATA / "tiny_text_document")
        with pytest.raises(FormatError, match=r"mm\.idx: multimodal = True"):
            writer.add_index(DATA / "mm")
        with pytest.raises(FormatError, match=r"nothing\.bin: missing"):
            writer.add_index(tmp_path / "nothing")
    with pytest.raises(ConfigError, match="at least one"):
        merge_megatron([], tmp_path / "z")


def test_writer_is_atomic(tmp_path: Path) -> None:
    writer = MegatronWriter(tmp_path / "x", np.uint16)
    writer.add_document([1, 2, 3])
    writer.add_item([4])
    assert not list(tmp_path.glob("*.bin")) and not list(tmp_path.glob("*.idx"))
    with pytest.raises(ConfigError, match=r"1 sequences were added after the last end_document"):
        writer.close()
    writer.end_document()
    writer.close()
    assert read(tmp_path / "x")[0] == [[1, 2, 3], [4]]
    with pytest.raises(ValueError, match="writer is closed"):
        writer.add_document([5])
    with pytest.raises(RuntimeError), MegatronWriter(tmp_path / "y", np.uint16) as failing:
        failing.add_document([1])
        raise RuntimeError("interrupted")
    with pytest.raises(ConfigError, match="end_document"), MegatronWriter(tmp_path / "z") as w:
        w.add_item([1])
    assert sorted(p.name for p in tmp_path.iterdir()) == ["x.bin", "x.idx"]


documents_strategy = st.sampled_from(INT_DTYPES).flatmap(
    lambda name: st.tuples(
        st.just(name),
        st.lists(
            st.lists(
                st.integers(int(np.iinfo(name).min), int(np.iinfo(name).max))
                | st.just(int(np.iinfo(name).max)),
                max_size=40,
            ),
            max_size=12,
        ),
        st.booleans(),
        st.randoms(use_true_random=False),
    )
)


@settings(max_examples=40, deadline=None)
@given(case=documents_strategy)
def test_round_trip(tmp_path_factory: pytest.TempPathFactory, case: Any) -> None:
    dtype, documents, multimodal, rnd = case
    folder = tmp_path_factory.mktemp("rt")
    sequences, modes = [], []
    with MegatronWriter(folder / "p", dtype, multimodal=multimodal) as writer:
        for doc in documents:
            cuts = sorted(rnd.randint(0, len(doc)) for _ in range(rnd.randint(0, 3)))
            lengths = np.diff([0, *cuts, len(doc)]).tolist() if doc else []
            doc_modes = [rnd.randint(-128, 127) for _ in lengths] if multimodal else None
            writer.add_document(np.array(doc, dtype=np.int64), lengths, doc_modes)
            bounds = np.cumsum([0, *lengths])
            sequences += split(np.array(doc), bounds)
            modes += doc_modes or []
    if not sum(map(len, documents)):
        with pytest.raises(FormatError, match="empty"):
            describe(folder / "p")
        return
    docs, seqs, shard = read(folder / "p")
    assert (docs, seqs) == (documents, sequences)
    assert shard.info.dtype == np.dtype(dtype).newbyteorder("<").str
    assert (shard.sequence_modes() is not None) == multimodal
    if multimodal:
        assert shard.sequence_modes().tolist() == modes


def test_long_and_one_token_documents(tmp_path: Path) -> None:
    long = np.random.default_rng(1).integers(0, 65536, 300_000).astype(np.uint16)
    with MegatronWriter(tmp_path / "long", np.uint16) as writer:
        writer.add_document(long)
        writer.add_document([65535])
        writer.add_document(long[:1000], [1, 998, 1])
    (info,) = describe(tmp_path / "long").shards
    shard = open_shard(info)
    assert shard.document_bounds().tolist() == [0, 300_000, 300_001, 301_001]
    assert shard.sequence_bounds().tolist() == [0, 300_000, 300_001, 300_002, 301_000, 301_001]
    assert np.array_equal(shard.tokens(0, 300_000), long)
    assert shard.tokens(300_000, 300_002).tolist() == [65535, int(long[0])]


# -- variants -------------------------------------------------------------------------------
def test_fairseq_layout_reads_one_document_per_sequence(tmp_path: Path) -> None:
    copy_fixture(tmp_path, "tiny_text_document", "fs")
    (tmp_path / "fs.idx").write_bytes(raw_idx(8, [4, 3, 6], None))
    docs, seqs, shard = read(tmp_path / "fs")
    assert docs == seqs == TINY
    assert (shard.info.meta["layout"], shard.info.meta["documents"]) == ("fairseq", 3)
    np.array([1, 70000, 4_000_000_000], "<u4").tofile(tmp_path / "u32.bin")
    (tmp_path / "u32.idx").write_bytes(raw_idx(9, [1, 2], None, itemsize=4))
    assert read(tmp_path / "u32")[0] == [[1], [70000, 4_000_000_000]]
    (tmp_path / "u32.idx").write_bytes(raw_idx(7, [1, 2], None, itemsize=4))
    rewrote_in_place(tmp_path / "u32.idx")
    with pytest.raises(FormatError, match=r"u32\.idx: dtype code 7 .*ambiguous"):
        describe(tmp_path / "u32")


def test_tntidx_is_refused_by_name(tmp_path: Path) -> None:
    copy_fixture(tmp_path, "tiny_text_document", "lazy")
    (tmp_path / "lazy.idx").write_bytes(b"TNTIDX\x00\x00" + struct.pack("<QQQQQ", 1, 8, 2, 3, 3))
    with pytest.raises(FormatError, match=r"lazy\.idx: .*TNTIDX .*lazy/cached.*convert"):
        describe(tmp_path)


@pytest.mark.parametrize("docs", [[0], [0, 1], [0, 2, 2]])
def test_legacy_merge_without_document_index(tmp_path: Path, docs: list[int]) -> None:
    copy_fixture(tmp_path, "tiny_text_document", "legacy")
    (tmp_path / "legacy.idx").write_bytes(raw_idx(8, [4, 3, 6], docs))
    with pytest.warns(UserWarning, match=r"legacy\.idx: .*legacy merge.*one document per seq"):
        catalog = describe(tmp_path / "legacy")
    assert catalog.shards[0].meta["documents_from"] == "sequences"
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # opening (e.g. in a worker) does not warn again
        shard = open_shard(catalog.shards[0])
        assert split(shard.tokens(0, 13), shard.document_bounds()) == TINY


def test_one_document_of_many_sequences_is_not_legacy(tmp_path: Path) -> None:
    copy_fixture(tmp_path, "tiny_text_document", "one")
    (tmp_path / "one.idx").write_bytes(raw_idx(8, [4, 3, 6], [0, 3]))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        docs, seqs, _ = read(tmp_path / "one")
    assert (docs, seqs) == ([[t for seq in TINY for t in seq]], TINY)


# -- corruption -----------------------------------------------------------------------------
def test_every_truncation_is_refused(tmp_path: Path) -> None:
    prefix = copy_fixture(tmp_path, "tiny_text_document", "t")
    idx, data = (DATA / "tiny_text_document.idx").read_bytes(), (DATA / "tiny_text_document.bin")
    for cut in range(len(idx)):
        (tmp_path / "t.idx").write_bytes(idx[:cut])
        with pytest.raises(FormatError, match=r"t\.idx: "):
            describe(prefix, format="megatron")
    (tmp_path / "t.idx").write_bytes(idx + b"\x00")
    with pytest.raises(FormatError, match=r"t\.idx: index is 103 bytes .* 102 bytes"):
        describe(prefix)
    (tmp_path / "t.idx").write_bytes(idx)
    for cut in range(1, 26):
        (tmp_path / "t.bin").write_bytes(data.read_bytes()[:cut])
        with pytest.raises(FormatError, match=rf"t\.bin: file is {cut} bytes .* end at byte 26"):
            describe(prefix)


def patched(offset: int, value: bytes) -> bytes:
    idx = bytearray((DATA / "tiny_text_document.idx").read_bytes())
    idx[offset : offset + len(value)] = value
    return bytes(idx)


@pytest.mark.parametrize(
    ("idx", "match"),
    [
        (patched(0, b"X"), r"starts with b'XMIDIDX.*expected the Megatron index magic"),
        (patched(0, b"\x80\x04"), r"a pickle: a Modalities JSONL index"),
        (patched(9, b"\x02"), r"index version is 2, expected 1"),
        (patched(17, b"\x07"), r"dtype code 7 is float32 in megatron-core but float64"),
        (patched(17, b"\x06"), r"dtype code 6 is float64"),
        (patched(17, b"\x09"), r"dtype code 9 \(u4\) exists only in fairseq"),
        (patched(17, b"\x0b"), r"dtype code 11 is not a Megatron token dtype"),
        (patched(17, b"\x04"), r"sequence_pointers\[1\] = 8 but .* byte 16"),
        (patched(18, b"\x04"), r"header says 4 sequences and 4 document_indices.* 114 bytes"),
        (patched(26, b"\x05"), r"header says 3 sequences and 5 document_indices"),
        (patched(34, struct.pack("<i", -4)), r"sequence_lengths\[0\] = -4, expected >= 0"),
        (patched(54, struct.pack("<q", 14)), r"sequence_pointers\[1\] = 14 but .* byte 8"),
        (patched(70, struct.pack("<q", 1)), r"document_indices\[0\] = 1, expected 0"),
        (patched(78, struct.pack("<q", 3)), r"document_indices\[2\] = 2 < .*\[1\] = 3"),
        (patched(94, struct.pack("<q", 4)), r"ends at 4 but there are only 3 sequences"),
    ],
)
def test_corrupt_header_and_arrays(tmp_path: Path, idx: bytes, match: str) -> None:
    copy_fixture(tmp_path, "tiny_text_document", "c")
    (tmp_path / "c.idx").write_bytes(idx)
    with pytest.raises(FormatError, match=r"c\.idx: .*" + match):
        describe(tmp_path)


@settings(max_examples=50, deadline=None)
@given(offset=st.integers(0, 101), xor=st.integers(1, 255))
def test_random_byte_damage(
    tmp_path_factory: pytest.TempPathFactory, offset: int, xor: int
) -> None:
    """Damage is refused, or (document section, undetectable) leaves tokens and sequences."""
    folder = tmp_path_factory.mktemp("flip")
    copy_fixture(folder, "tiny_text_document", "d")
    idx = bytearray((DATA / "tiny_text_document.idx").read_bytes())
    idx[offset] ^= xor
    (folder / "d.idx").write_bytes(bytes(idx))
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            _docs, seqs, _ = read(folder / "d")
    except FormatError as exc:
        assert "d.idx" in str(exc) or "d.bin" in str(exc)
    else:
        assert offset >= 70 or offset == 17, offset  # doc section, or code 8 -> int16 (3)
        assert seqs == TINY


def test_mismatched_or_missing_companion(tmp_path: Path) -> None:
    copy_fixture(tmp_path, "tiny_text_document", "x")
    shutil.copy(DATA / "merged.idx", tmp_path / "x.idx")
    with pytest.raises(FormatError, match=r"x\.bin: file is 26 bytes but .*x\.idx says .* 52"):
        describe(tmp_path)
    (tmp_path / "x.idx").unlink()
    with pytest.raises(FormatError, match=r"x\.idx: the Megatron index is missing"):
        describe(tmp_path / "x.bin", format="megatron")
    with pytest.raises(FormatError, match=r"x\.bin: a headerless token file"):
        describe(tmp_path / "x.bin")  # without its .idx, auto sees a raw file
    with pytest.raises(FormatError, match=r"tiny_int32\.idx: format = 'megatron' reads the \.bin"):
        describe(DATA / "tiny_int32.idx", format="megatron")


def test_open_checks_both_files_are_unchanged(tmp_path: Path) -> None:
    """The .bin at open; the .idx when first needed (reading tokens never needs it)."""
    prefix = copy_fixture(tmp_path, "tiny_int32", "u")
    (info,) = describe(prefix).shards
    with open(tmp_path / "u.idx", "ab") as fh:
        fh.write(b"\x00")
    shard = open_shard(info)
    assert shard.tokens(0, 3).size == 3
    with pytest.raises(FormatError, match=r"u\.idx: file is 95 bytes but was 94 bytes"):
        shard.document_bounds()
    shutil.copy(DATA / "tiny_int32.idx", tmp_path / "u.idx")
    (tmp_path / "u.bin").write_bytes(b"")
    with pytest.raises(FormatError, match=r"u\.bin: file is 0 bytes but was 28 bytes"):
        open_shard(info)


def test_validation_in_blocks_reports_the_global_position(tmp_path: Path) -> None:
    lengths = np.arange(1, 12, dtype=np.int32)
    size, path = int(lengths.sum()) * 2, str(tmp_path / "b.idx")

    def index(docs: list[int], pointer7: int | None = None) -> Any:
        write_index(path, np.dtype("<u2"), lengths, np.array(docs), None)
        buf = bytearray(Path(path).read_bytes())
        if pointer7 is not None:
            buf[34 + 44 + 56 : 34 + 44 + 64] = struct.pack("<q", pointer7)
        return map_index(bytes(buf), path)

    assert validate_index(index([0, 2, 4, 7, 9, 11]), size, path, "b.bin", block=2)
    with pytest.raises(FormatError, match=r"document_indices\[4\] = 7 < .*\[3\] = 9"):
        validate_index(index([0, 2, 4, 9, 7, 11]), size, path, "b.bin", block=2)
    with pytest.raises(FormatError, match=r"sequence_pointers\[7\] = 1 but .* byte 56"):
        validate_index(index([0, 11], pointer7=1), size, path, "b.bin", block=3)


# -- as a loader source ---------------------------------------------------------------------
def test_loader_source_with_document_masks(tmp_path: Path) -> None:
    rng = np.random.default_rng(3)
    shard_docs = []
    for name in ("a", "b"):
        docs = [rng.integers(1, 500, rng.integers(0, 30)) for _ in range(25)]
        with MegatronWriter(tmp_path / f"{name}_text_document", np.uint16) as writer:
            for doc in docs:
                writer.add_document(doc)
        shard_docs.append(docs)
    stream = np.concatenate([np.concatenate(d) for d in shard_docs])
    lengths = [len(d) for docs in shard_docs for d in docs]
    doc_starts = np.unique(np.cumsum([0, *lengths])[:-1])  # shard starts are doc starts too
    for fmt in ("auto", "megatron"):
        cfg = {
            "seq_len": 8, "seed": 5, "vocab_size": 500, "global_batch_size": 4,
            "sources": [{"name": "m", "path": str(tmp_path), "format": fmt}],
            "packing": {"masks": True},
        }  # fmt: skip
        loader = build_loader(cfg, batch_size=4, rank=0, world_size=1)
        starts = SampleStream.from_config(load_config(cfg))
        batches = list(loader)
        assert len(batches) == len(loader) > 0
        for batch in batches:
            _, offsets = starts.read(0, batch["sample_index"].numpy())
            for row, start in enumerate(offsets.tolist()):
                window = np.arange(start, start + 9)
                opened = np.isin(window, doc_starts) & (window > start)
                labels = stream[start + 1 : start + 9].astype(np.int64)
                labels[opened[1:]] = -100
                assert batch["input_ids"][row].tolist() == stream[start : start + 8].tolist()
                assert batch["labels"][row].tolist() == labels.tolist()
                assert batch["doc_ids"][row].tolist() == np.cumsum(opened)[:8].tolist()


# -- live comparison with megatron-core (skipped when it is not installed) -------------------
@settings(max_examples=15, deadline=None)
@given(case=documents_strategy)
def test_megatron_core_agrees(tmp_path_factory: pytest.TempPathFactory, case: Any) -> None:
    core = pytest.importorskip("megatron.core.datasets.indexed_dataset")
    torch = pytest.importorskip("torch")
    dtype, documents, multimodal, rnd = case
    folder = tmp_path_factory.mktemp("core")
    theirs = core.IndexedDatasetBuilder(str(folder / "c.bin"), np.dtype(dtype).type, multimodal)
    with MegatronWriter(folder / "s", dtype, multimodal=multimodal) as ours:
        for doc in documents:
            lengths = [len(doc)] if doc else []
            modes = [rnd.randint(0, 3) for _ in lengths] if multimodal else None
            theirs.add_document(torch.tensor(doc, dtype=torch.int64), lengths, modes)
            ours.add_document(doc, lengths, modes)
    theirs.finalize(str(folder / "c.idx"))
    for suffix in (".bin", ".idx"):
        assert (folder / f"s{suffix}").read_bytes() == (folder / f"c{suffix}").read_bytes()
    if not sum(map(len, documents)):
        return
    dataset = core.IndexedDataset(str(folder / "s"), multimodal=multimodal)
    docs, seqs, shard = read(folder / "s")
    items = [dataset[i][0] if multimodal else dataset[i] for i in range(len(dataset))]
    assert seqs == [item.tolist() for item in items]
    d = dataset.document_indices.tolist()
    assert docs == [[t for seq in seqs[d[k] : d[k + 1]] for t in seq] for k in range(len(d) - 1)]
    if multimodal:
        assert shard.sequence_modes().tolist() == dataset.index.sequence_modes.tolist()
