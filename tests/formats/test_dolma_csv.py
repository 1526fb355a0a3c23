"""Dolma ``.csv.gz`` parsing: the vectorized reader against a careful row-by-row reference.

The reference reads the decompressed text one byte at a time: a record ends at a newline
after an even number of ``"`` (``csv`` doubles a quote inside a quoted field), its first two
comma-separated fields are ``start`` and ``end``, each 1 to 18 ASCII digits. Files are
written the way dolma writes them (``csv.writer``: CRLF, fields quoted only when needed) or
as legacy ``start,end`` lines, with ids and sources holding commas, quotes, CR and LF, and
at most one defect; the reader must give the reference's rows, or its very error.
"""

from __future__ import annotations

import csv
import gzip
import io
import itertools
import zlib

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from streamload.errors import FormatError
from streamload.formats.dolma._csv import RowLimits, parse_rows, read_rows
from streamload.formats.dolma._digits import PAD_BYTES, byte_words, parse_plain
from streamload.formats.dolma._inflate import inflate_pieces

PATH = "part-0-00000.csv.gz"
LIMITS = RowLimits.for_tokens(10**9)
TAIL = " (rows are start,end,id,src,loc)"


def reference_rows(text: bytes) -> tuple[list[int], list[int], list[int], list[int]]:
    """``(starts, ends, row_begin, row_end)`` of ``text``, one byte at a time.

    Raises:
        FormatError: the first defective row (the files here hold at most one).
    """
    if text and not text.endswith(b"\n"):
        text += b"\n"
    columns: tuple[list[int], list[int], list[int], list[int]] = ([], [], [], [])
    begin, quotes = 0, 0
    for at, byte in enumerate(text):
        quotes += byte == ord('"')
        if byte != ord("\n") or quotes % 2:
            continue
        stop = at - 1 if at > begin and text[at - 1] == ord("\r") else at
        row = len(columns[0]) + 1
        line = text[begin:stop]
        if b"," not in line:
            shown = line[:80].decode("utf-8", "replace")
            raise FormatError(f"{PATH}: row {row} is {shown!r}; expected at least start,end{TAIL}")
        fields = line.split(b",", 2)
        for what, field in zip(("start", "end"), fields[:2], strict=True):
            if not (1 <= len(field) <= 18 and all(48 <= b <= 57 for b in field)):
                shown = field.decode("utf-8", "replace")
                raise FormatError(
                    f"{PATH}: row {row}: {what} field is {shown!r}; expected a non-negative "
                    f"integer in ASCII digits{TAIL}"
                )
        values = (int(fields[0]), int(fields[1]), begin, stop)
        for column, value in zip(columns, values, strict=True):
            column.append(value)
        begin = at + 1
    return columns


FIELD_TEXT = st.text(alphabet=st.sampled_from(list('ab,"\r\n é0')), max_size=8)
OFFSET = st.one_of(st.integers(0, 10**6), st.integers(0, 10**18 - 1))
JUNK = st.sampled_from(["", "x", "+1", " 1", "1_0", "٠", "０", "1e3", "-1", "9" * 19, "12x"])


@st.composite
def metadata_files(draw: st.DrawFn) -> bytes:
    """The decompressed text of a metadata file, with at most one defect."""
    legacy = draw(st.booleans())
    rows = []  # (start, end, what follows end: "" or ",id,src,loc", line ending)
    for _ in range(draw(st.integers(0, 30))):
        start, end = str(draw(OFFSET)), str(draw(OFFSET))
        if legacy:
            rows.append([start, end, "", "\n"])
            continue
        out = io.StringIO()
        csv.writer(out).writerow([draw(FIELD_TEXT), draw(FIELD_TEXT), draw(st.integers(0, 99))])
        rows.append([start, end, "," + out.getvalue()[:-2], "\r\n"])
    lines = [f"{start},{end}{rest}{ending}" for start, end, rest, ending in rows]
    if rows and draw(st.booleans()):
        at = draw(st.integers(0, len(rows) - 1))
        junk, kind = draw(JUNK), draw(st.sampled_from(["start", "end", "blank", "no comma"]))
        start, end, rest, ending = rows[at]
        lines[at] = {
            "start": f"{junk},{end}{rest}{ending}",
            "end": f"{start},{junk}{rest}{ending}",
            "blank": ending,
            "no comma": f"{start};{end}{ending}",
        }[kind]
    text = "".join(lines).encode()
    return text.removesuffix(b"\r\n") if draw(st.booleans()) else text


def gzip_members(text: bytes, cuts: list[int], padding: int) -> bytes:
    """``text`` as gzip members split at ``cuts``, then ``padding`` zero bytes."""
    bounds = [0, *sorted(c for c in cuts if 0 < c < len(text)), len(text)]
    members = [gzip.compress(text[a:b], mtime=0) for a, b in itertools.pairwise(bounds)]
    return b"".join(members) + b"\0" * padding


@settings(max_examples=300, deadline=None)
@given(
    text=metadata_files(),
    chunk=st.sampled_from([1, 5, 64, 1000, 1 << 20]),
    cuts=st.lists(st.integers(0, 4000), max_size=2),
    padding=st.sampled_from([0, 3]),
)
def test_reader_matches_the_careful_reference(
    text: bytes, chunk: int, cuts: list[int], padding: int
) -> None:
    packed = gzip_members(text, cuts, padding)
    try:
        expected = reference_rows(text)
    except FormatError as exc:
        with pytest.raises(FormatError) as raised:
            read_rows(io.BytesIO(packed), PATH, LIMITS, chunk_bytes=chunk)
        assert str(raised.value) == str(exc)
        with pytest.raises(FormatError) as whole:
            parse_rows(text, PATH)
        assert str(whole.value) == str(exc)
        return
    rows = read_rows(io.BytesIO(packed), PATH, LIMITS, keep_text=True, chunk_bytes=chunk)
    got = (rows.starts, rows.ends, rows.row_begin, rows.row_end)
    assert [c.tolist() for c in got] == [list(c) for c in expected]
    assert all(c.dtype == np.int64 for c in got)
    assert rows.text == text
    whole = parse_rows(text, PATH)
    assert [whole.starts.tolist(), whole.ends.tolist()] == [expected[0], expected[1]]


@settings(max_examples=300, deadline=None)
@given(fields=st.lists(st.text(alphabet=st.sampled_from(list("0123456789x/:٠")), max_size=18),
                       min_size=1, max_size=40))  # fmt: skip
def test_word_parse_takes_plain_fields_only(fields: list[str]) -> None:
    """Fields of 1-16 ASCII digits are read exactly; anything else is not plain (``None``)."""
    text = b"0" * PAD_BYTES + b",".join(f.encode() for f in fields) + b"\n"
    stops, begins, at = [], [], PAD_BYTES
    for field in fields:
        begins.append(at)
        at += len(field.encode())
        stops.append(at)
        at += 1
    buf = np.frombuffer(text, dtype=np.uint8)
    stop = np.array(stops, dtype=np.int64)
    got = parse_plain(byte_words(buf), stop, stop - np.array(begins, dtype=np.int64))
    plain = all(1 <= len(f) <= 16 and f.isascii() and f.isdigit() for f in fields)
    if not plain:
        assert got is None
    else:
        assert got is not None and got.tolist() == [int(f) for f in fields]


@settings(max_examples=100, deadline=None)
@given(
    text=st.binary(max_size=5000),
    cuts=st.lists(st.integers(0, 5000), max_size=3),
    padding=st.sampled_from([0, 1, 700]),
    piece=st.sampled_from([1, 13, 4096]),
)
def test_inflate_reads_what_gzip_reads(
    text: bytes, cuts: list[int], padding: int, piece: int
) -> None:
    packed = gzip_members(text, cuts, padding)
    pieces = list(inflate_pieces(io.BytesIO(packed), PATH, piece))
    assert b"".join(pieces) == gzip.decompress(packed) == text
    assert all(0 < len(p) <= piece for p in pieces)


@pytest.mark.parametrize(
    ("mangle", "match"),
    [
        (lambda gz: gz[:-3], "ends inside a compressed member"),  # truncated trailer
        (lambda gz: gz[:20], "ends inside a compressed member"),
        (lambda gz: gz[:-8] + bytes([gz[-8] ^ 1]) + gz[-7:], "incorrect data check"),
        (lambda gz: gz + b"garbage", "incorrect header check"),
        (lambda gz: b"PK" + gz[2:], "incorrect header check"),
    ],
)
def test_inflate_refuses_corrupt_files(mangle, match: str) -> None:
    packed = mangle(gzip.compress(b"0,4,a,s,1\r\n" * 50, mtime=0))
    with pytest.raises(FormatError, match=rf"{PATH}: not a readable gzip file \(.*{match}"):
        list(inflate_pieces(io.BytesIO(packed), PATH, 64))


def test_empty_file_has_no_content() -> None:
    assert list(inflate_pieces(io.BytesIO(b""), PATH, 64)) == []
    assert read_rows(io.BytesIO(b""), PATH, LIMITS).starts.size == 0


def test_a_piece_of_too_many_rows_is_refused_before_it_is_parsed() -> None:
    """The row limit is checked on the newlines of a piece, before its fields are read."""
    packed = zlib.compress(b"0,0,a,s,1\r\n" * 100_000, wbits=31)
    with pytest.raises(FormatError, match=r"holds more than 4106 rows .* 10 tokens"):
        read_rows(io.BytesIO(packed), PATH, RowLimits.for_tokens(10))
