"""Modalities raw JSONL index: byte-identical creation, safe reading, random access."""

from __future__ import annotations

import json
import os
import pickle
import shutil
import warnings
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from streamload.errors import FormatError
from streamload.formats.jsonl.index import (
    JsonlDocuments,
    create_raw_index,
    default_index_path,
    read_raw_index,
)
from tests.helpers.paths import TESTS

DATA = TESTS / "data" / "modalities"
TEXTS = ["w5 w6 w7", "w10 w11", "w20 w21 w22 w23 w24 <|endoftext|>", "w30"]


def tool_index(path: Path) -> list[tuple[int, int]]:
    """The tool's own line walk (``IndexGenerator._reader_thread``, binary ``readline``)."""
    total, out = path.stat().st_size, []
    with open(path, "rb") as fin:
        while True:
            cursor, line = fin.tell(), fin.readline()
            if fin.tell() == total:
                out.append((cursor, len(line[:-1] if line.endswith(b"\n") else line)))
                return out
            out.append((cursor, len(line) - 1))


def test_fixture_index_is_byte_identical(tmp_path: Path) -> None:
    shutil.copy(DATA / "docs.jsonl", tmp_path / "docs.jsonl")
    written = create_raw_index(tmp_path / "docs.jsonl")
    assert written == tmp_path / "docs.idx" == default_index_path(tmp_path / "docs.jsonl")
    assert written.read_bytes() == (DATA / "docs.idx").read_bytes()
    assert sorted(os.listdir(tmp_path)) == ["docs.idx", "docs.jsonl"]
    other = create_raw_index(DATA / "docs.jsonl", tmp_path / "sub" / "x.idx")
    assert other.read_bytes() == written.read_bytes()


def test_fixture_index_reads_and_gives_random_access() -> None:
    assert read_raw_index(DATA / "docs.idx").tolist() == [[0, 20], [21, 19], [41, 45], [87, 15]]
    docs = JsonlDocuments(DATA / "docs.jsonl")
    assert len(docs) == 4
    assert [docs.text(i) for i in (3, 0, 2, 1)] == [TEXTS[3], TEXTS[0], TEXTS[2], TEXTS[1]]
    assert list(docs.texts(1)) == TEXTS[1:]
    assert docs[1] == {"text": "w10 w11"}
    assert docs.raw(-1) == b'{"text": "w30"}'
    clone = pickle.loads(pickle.dumps(docs))  # our own object, e.g. into a loader worker
    assert clone.text(2) == TEXTS[2]
    with pytest.raises(IndexError, match="document 4 out of range"):
        docs.raw(4)


def test_line_endings_and_last_line(tmp_path: Path) -> None:
    """Lengths exclude ``\\n`` and keep ``\\r``; a last line without newline counts."""
    src = tmp_path / "d.jsonl"
    src.write_bytes(b'{"text": "a"}\r\n{"text": "\xc3\xa9t\xc3\xa9"}\n{"text": "z"}')
    index = create_raw_index(src)
    assert read_raw_index(index).tolist() == [[0, 14], [15, 17], [33, 13]]
    docs = JsonlDocuments(src)
    assert [docs.text(i) for i in range(3)] == ["a", "été", "z"]
    assert docs.raw(0).endswith(b"\r")


@pytest.mark.parametrize(
    ("content", "line"),
    [
        (b'{"text": "a"}\n\n{"text": "b"}\n', 2),
        (b'{"text": "a"}\n{"text": \n', 2),
        (b'{"text": "\xff"}\n', 1),
        (b"", 1),
        (b'{"text": "a"}\n\n', 2),
    ],
)
def test_faulty_lines_name_file_and_line(tmp_path: Path, content: bytes, line: int) -> None:
    src = tmp_path / "bad.jsonl"
    src.write_bytes(content)
    with pytest.raises(FormatError, match=rf"bad\.jsonl: line {line} \(bytes \d+\.\.\d+\) is not"):
        create_raw_index(src)
    assert os.listdir(tmp_path) == ["bad.jsonl"]
    with pytest.warns(UserWarning, match=rf"bad\.jsonl: left 1 line\(s\) .*first: line {line}"):
        index = create_raw_index(src, drop_faulty_entries=True)
    kept = [pair for i, pair in enumerate(tool_index(src)) if i != line - 1]
    assert read_raw_index(index).tolist() == [list(p) for p in kept]
    assert index.read_bytes() == pickle.dumps(kept, protocol=4)


JSON_TEXT = st.text(st.characters(codec="utf-8"), max_size=30)


@settings(max_examples=40, deadline=None)
@given(
    texts=st.lists(JSON_TEXT, min_size=1, max_size=12),
    crlf=st.lists(st.booleans(), min_size=12, max_size=12),
    trailing_newline=st.booleans(),
    ascii_only=st.booleans(),
)
def test_index_matches_the_tools_line_walk(
    tmp_path_factory: pytest.TempPathFactory,
    texts: list[str],
    crlf: list[bool],
    trailing_newline: bool,
    ascii_only: bool,
) -> None:
    folder = tmp_path_factory.mktemp("jsonl")
    lines = [
        json.dumps({"text": t, "id": i}, ensure_ascii=ascii_only).encode() + b"\r" * crlf[i]
        for i, t in enumerate(texts)
    ]
    src = folder / "x.jsonl"
    src.write_bytes(b"\n".join(lines) + b"\n" * trailing_newline)
    index = create_raw_index(src)
    assert index.read_bytes() == pickle.dumps(tool_index(src), protocol=4)
    docs = JsonlDocuments(src, index)
    assert [docs.text(i) for i in range(len(docs))] == texts
    assert [docs[i]["id"] for i in range(len(docs))] == list(range(len(texts)))


def test_nested_text_key_and_missing_fields(tmp_path: Path) -> None:
    src = tmp_path / "n.jsonl"
    src.write_text('{"doc": {"body": "x y"}}\n{"doc": {"body": 3}}\n{"other": 1}\n[1, 2]\n')
    create_raw_index(src)
    docs = JsonlDocuments(src, text_key=("doc", "body"))
    assert docs.text(0) == "x y"
    with pytest.raises(FormatError, match=r"n\.jsonl: document 1 field 'doc\.body' is int"):
        docs.text(1)
    with pytest.raises(FormatError, match=r"n\.jsonl: document 2 has no field 'doc\.body'"):
        docs.text(2)
    with pytest.raises(FormatError, match=r"n\.jsonl: document 3 has no field 'text'"):
        JsonlDocuments(src).text(3)


def test_index_of_another_file_is_refused(tmp_path: Path) -> None:
    src = tmp_path / "short.jsonl"
    src.write_bytes(b'{"text": "a"}\n')
    with pytest.raises(
        FormatError, match=r"docs\.idx: entry 0 covers bytes 0\.\.20 but .*short\.jsonl is 14 bytes"
    ):
        JsonlDocuments(src, DATA / "docs.idx")
    src.write_bytes(b"x" * 200)
    docs = JsonlDocuments(src, DATA / "docs.idx")
    with pytest.raises(FormatError, match=r"short\.jsonl: document 0 \(bytes 0\.\.20\) is not"):
        docs[0]


@pytest.mark.parametrize(
    ("blob", "message"),
    [
        (pickle.dumps({"a": 1}, protocol=4), r"x\.idx: raw JSONL index: pickle opcode EMPTY_DICT"),
        (pickle.dumps([(0, -1)], protocol=4), r"x\.idx: raw JSONL index entry 0 is \(0, -1\)"),
        (b"MMIDIDX\x00\x00", r"x\.idx: raw JSONL index: pickle opcode"),
        (b"", r"x\.idx: raw JSONL index: pickle is truncated"),
    ],
)
def test_bad_index_files_are_refused(tmp_path: Path, blob: bytes, message: str) -> None:
    (tmp_path / "x.idx").write_bytes(blob)
    with pytest.raises(FormatError, match=message):
        read_raw_index(tmp_path / "x.idx")


def test_missing_index_is_named(tmp_path: Path) -> None:
    with pytest.raises(FormatError, match=r"nope\.idx: cannot read the raw JSONL index"):
        read_raw_index(tmp_path / "nope.idx")


def test_large_file_streams_and_round_trips(tmp_path: Path) -> None:
    src = tmp_path / "big.jsonl"
    rng = np.random.default_rng(0)
    texts = ["w" * int(n) for n in rng.integers(0, 50, size=3000)]
    src.write_text("".join(json.dumps({"text": t}) + "\n" for t in texts))
    index = create_raw_index(src)
    assert index.read_bytes() == pickle.dumps(tool_index(src), protocol=4)
    docs = JsonlDocuments(src)
    assert [docs.text(i) for i in (0, 1234, 2999)] == [texts[0], texts[1234], texts[2999]]


def test_live_modalities_index_generator(tmp_path: Path) -> None:
    """Optional: the tool's own ``IndexGenerator`` (skipped when modalities is absent)."""
    create_index = pytest.importorskip("modalities.dataloader.create_index")
    odd = tmp_path / "odd.jsonl"
    odd.write_bytes(b'\xef\xbb\xbf{"text": "bom"}\r\n\n{oops\n{"text": "\xc3\xa9"}\r')
    for src, drop in ((DATA / "docs.jsonl", False), (odd, True)):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            generator = create_index.IndexGenerator(src, drop_faulty_entries=drop)
            generator.create_index(tmp_path / "theirs.idx")
            ours = create_raw_index(src, tmp_path / "ours.idx", drop_faulty_entries=drop)
        assert ours.read_bytes() == (tmp_path / "theirs.idx").read_bytes()
