"""Streaming, vectorized reading of Dolma ``.csv.gz`` document metadata (FORMATS §4.3).

Rows are ``start,end,id,src,loc`` written by Python's ``csv`` module (CRLF, no header, fields
quoted only when needed); legacy OLMo files hold only ``start,end`` with ``\\n``. Only the first
two fields are parsed, with numpy over each decompressed piece, so a million rows take
milliseconds instead of a Python loop. A record ends at a newline outside quotes: ``csv``
escapes a quote by doubling it, so the count of ``"`` before a newline is even exactly when the
newline ends a record (an id holding a newline stays one row); a piece without any ``"`` (the
usual case: dolma's ids and paths need no quoting) skips that count. One pass over the bytes
finds the newlines and commas together (:func:`_marks`). A field of at most 16 digits is read
as two unaligned little-endian words ending at its last byte, checked and converted eight
digits per word by SWAR arithmetic (:func:`_parse_plain`); anything else (a longer field, a
non-digit) goes to the column-by-column parser (:func:`_parse_ints`), which names the row.

The file is inflated in pieces of ``chunk_bytes`` (:func:`read_rows`), never whole, and what
it may inflate to is bounded by its token file (:class:`RowLimits`): documents tile the token
file, so there is at most one row per token plus a few empty documents, each row at most
``MAX_ROW_BYTES`` and ``ROW_BYTES`` on average. A file beyond a bound (a gzip bomb, or a
CSV of another file) is refused as soon as the bound is passed, with bounded memory.

Example: ``b"0,4,d2,a.gz,2\\r\\n4,11,d4,a.gz,4\\r\\n"`` gives rows ``[0, 15)`` and ``[15, 31)``,
starts ``[0, 4]`` and ends ``[4, 11]``.
"""

from __future__ import annotations

import csv
from collections.abc import Iterator
from dataclasses import dataclass
from typing import BinaryIO

import numpy as np

from streamload.errors import FormatError
from streamload.formats.dolma._digits import PAD_BYTES, byte_words, parse_plain
from streamload.formats.dolma._inflate import inflate_pieces

__all__ = [
    "CHUNK_BYTES",
    "EMPTY_ROWS",
    "MAX_ROW_BYTES",
    "ROW_BYTES",
    "DolmaRows",
    "RowLimits",
    "parse_rows",
    "read_rows",
    "row_fields",
]

_NL, _CR, _COMMA, _QUOTE = 10, 13, 44, 34
_MAX_DIGITS = 18
"""Longest start/end field accepted (fits int64 without overflow)."""
CHUNK_BYTES = 1 << 20
"""Decompressed bytes parsed per step."""
MAX_ROW_BYTES = 1 << 16
"""Longest row accepted (real rows are ~100-300 bytes: two offsets, an id, a source path)."""
ROW_BYTES = 1 << 10
"""Average bytes per row accepted over a whole file."""
EMPTY_ROWS = 4096
"""Rows accepted beyond one per token (empty documents: dolma writes none, a conversion of a
corpus with empty documents a few)."""
_PAD = b"0" * PAD_BYTES
"""Put before each piece: a field's word reads (:mod:`._digits`) never start before it."""


@dataclass(frozen=True)
class RowLimits:
    """What a metadata file may hold beside a token file (module docstring).

    Attributes:
        num_tokens: Tokens of the token file.
        max_rows: ``num_tokens + EMPTY_ROWS``.
        max_bytes: ``ROW_BYTES * max_rows``: the most it may inflate to.
    """

    num_tokens: int
    max_rows: int
    max_bytes: int

    @classmethod
    def for_tokens(cls, num_tokens: int) -> RowLimits:
        """The limits for a token file of ``num_tokens`` tokens."""
        rows = num_tokens + EMPTY_ROWS
        return cls(num_tokens, rows, ROW_BYTES * rows)


@dataclass(frozen=True)
class DolmaRows:
    """The rows of one metadata file.

    Attributes:
        starts: First token of each document (int64).
        ends: One past the last token of each document (int64).
        row_begin: Byte offset of each row in the decompressed text.
        row_end: Byte offset where each row's text ends (before its line ending).
        text: The decompressed text, when it was asked for (``read_rows(keep_text=True)``).
    """

    starts: np.ndarray
    ends: np.ndarray
    row_begin: np.ndarray
    row_end: np.ndarray
    text: bytes | None = None


@dataclass(frozen=True)
class _Marks:
    """Where the records of a buffer end (newlines outside quotes) and where its commas are."""

    ends: np.ndarray
    commas: np.ndarray


class _Scratch:
    """Boolean work arrays reused from piece to piece: a fresh 1 MiB array per piece costs
    about as much in page faults as the comparisons that fill it."""

    def __init__(self) -> None:
        self.hit = self.other = np.zeros(0, dtype=bool)

    def masks(self, size: int) -> tuple[np.ndarray, np.ndarray]:
        """Two boolean arrays of ``size`` elements (contents undefined)."""
        if self.hit.size < size:
            self.hit, self.other = np.empty(size, dtype=bool), np.empty(size, dtype=bool)
        return self.hit[:size], self.other[:size]


def _marks(buf: np.ndarray, text: bytes, scratch: _Scratch) -> _Marks:
    """One pass over the bytes for newlines and commas (and quotes, only when ``text``, the
    bytes of ``buf``, holds one: ``in`` is a memchr)."""
    quoted = b'"' in text
    hit, other = scratch.masks(buf.size)
    np.equal(buf, _NL, out=hit)
    hit |= np.equal(buf, _COMMA, out=other)
    if quoted:
        hit |= np.equal(buf, _QUOTE, out=other)
    at = np.flatnonzero(hit)
    kind = buf[at]
    newlines, commas = at[kind == _NL], at[kind == _COMMA]
    if quoted:
        before = np.searchsorted(at[kind == _QUOTE], newlines)
        newlines = newlines[before % 2 == 0]
    return _Marks(newlines, commas)


def _parse_ints(
    buf: np.ndarray, begin: np.ndarray, stop: np.ndarray, what: str, where: tuple[str, int]
) -> np.ndarray:
    """Non-negative decimal integers in ``buf[begin[i]:stop[i]]``, by Horner over columns (the
    careful parser: any length, and the first bad field named)."""
    lengths = stop - begin
    bad = np.flatnonzero((lengths < 1) | (lengths > _MAX_DIGITS))
    values = np.zeros(begin.shape[0], dtype=np.int64)
    last = buf.shape[0] - 1
    for k in range(int(lengths.max(initial=0)) if bad.size == 0 else 0):
        active = k < lengths
        digit = buf[np.minimum(begin + k, last)].astype(np.int64) - 48
        wrong = active & ((digit < 0) | (digit > 9))
        if wrong.any():
            bad = np.flatnonzero(wrong)
            break
        values = np.where(active, values * 10 + digit, values)
    if bad.size:
        i = int(bad[0])
        text = bytes(buf[begin[i] : max(begin[i], stop[i])]).decode("utf-8", "replace")
        path, first_row = where
        raise FormatError(
            f"{path}: row {first_row + i}: {what} field is {text!r}; expected a non-negative "
            "integer in ASCII digits "
            "(rows are start,end,id,src,loc)"
        )
    return values


def _offsets(
    buf: np.ndarray, begins: np.ndarray, first: np.ndarray, second: np.ndarray,
    where: tuple[str, int],
) -> tuple[np.ndarray, np.ndarray]:  # fmt: skip
    """The start and end fields: by words when all are plain, else by the careful parser."""
    n = begins.size
    stops = np.concatenate([first, second])
    values = parse_plain(byte_words(buf), stops, stops - np.concatenate([begins, first + 1]))
    if values is not None:
        return values[:n], values[n:]
    return (_parse_ints(buf, begins, first, "start", where),
            _parse_ints(buf, first + 1, second, "end", where))  # fmt: skip


def _parse_marked(
    buf: np.ndarray, marks: _Marks, path: str, first_row: int
) -> tuple[DolmaRows, int]:
    """The rows of the whole records of ``buf`` (which starts with ``PAD_BYTES`` of
    padding; row offsets count from its end), and the offset past the last record."""
    ends = marks.ends
    if ends.size == 0:
        empty = np.zeros(0, dtype=np.int64)
        return DolmaRows(empty, empty, empty, empty), PAD_BYTES
    begins = np.empty_like(ends)
    begins[0], begins[1:] = PAD_BYTES, ends[:-1] + 1
    stops = ends - ((ends > begins) & (buf[ends - 1] == _CR))
    commas = marks.commas
    k = np.searchsorted(commas, begins)
    first = commas[np.minimum(k, commas.size - 1)] if commas.size else stops
    missing = np.flatnonzero((k >= commas.size) | (first >= stops))
    if missing.size:
        i = int(missing[0])
        row = bytes(buf[begins[i] : stops[i]][:80]).decode("utf-8", "replace")
        raise FormatError(
            f"{path}: row {first_row + i} is {row!r}; expected at least start,end (rows are "
            "start,end,id,src,loc)"
        )
    nxt = commas[np.minimum(k + 1, commas.size - 1)]
    second = np.where((k + 1 < commas.size) & (nxt < stops), nxt, stops)
    starts, doc_ends = _offsets(buf, begins, first, second, (path, first_row))
    rows = DolmaRows(starts, doc_ends, begins - PAD_BYTES, stops - PAD_BYTES)
    return rows, int(ends[-1]) + 1


def parse_rows(text: bytes, path: str, first_row: int = 1) -> DolmaRows:
    """Parse the ``start`` and ``end`` columns of decompressed metadata rows.

    Args:
        text: Whole rows (a final row may lack its newline).
        path: For messages.
        first_row: Number of the first row in the file (messages count rows from 1).

    Raises:
        FormatError: a blank row, a row with fewer than two fields, or a non-integer field,
            naming the row.
    """
    if text and not text.endswith(b"\n"):
        text += b"\n"
    padded = _PAD + text
    buf = np.frombuffer(padded, dtype=np.uint8)
    return _parse_marked(buf, _marks(buf, padded, _Scratch()), path, first_row)[0]


class _RowReader:
    """Accumulates parsed rows piece by piece, enforcing :class:`RowLimits`."""

    def __init__(self, path: str, limits: RowLimits, keep_text: bool) -> None:
        self.path, self.limits, self.keep_text = path, limits, keep_text
        self.parts: list[DolmaRows] = []
        self.texts: list[bytes] = []
        self.rows = 0
        self.offset = 0  # decompressed bytes parsed so far

    def check(self, more: int) -> None:
        """Refuse ``more`` rows beyond the limit (before they are parsed)."""
        if self.rows + more > self.limits.max_rows:
            raise FormatError(
                f"{self.path}: holds more than {self.limits.max_rows} rows but its token file "
                f"holds {self.limits.num_tokens} tokens (one row per document, at most "
                f"{EMPTY_ROWS} of them empty); it belongs to another file or is corrupt"
            )

    def add(self, rows: DolmaRows, length: int, text: bytes | None) -> None:
        """Keep the rows parsed from ``length`` bytes of whole rows (``text``: those bytes,
        kept with ``keep_text``) and check the limits."""
        self.check(rows.starts.size)
        self.rows += rows.starts.size
        shift = self.offset
        self.parts.append(DolmaRows(rows.starts, rows.ends, rows.row_begin + shift,
                                    rows.row_end + shift))  # fmt: skip
        self.offset += length
        if text is not None:
            self.texts.append(text)

    def result(self) -> DolmaRows:
        """All rows, concatenated."""
        if not self.parts:
            empty = np.zeros(0, dtype=np.int64)
            return DolmaRows(empty, empty, empty, empty, b"" if self.keep_text else None)
        starts, ends, begins, stops = (
            np.concatenate([getattr(p, f) for p in self.parts])
            for f in ("starts", "ends", "row_begin", "row_end")
        )
        text = b"".join(self.texts) if self.keep_text else None
        return DolmaRows(starts, ends, begins, stops, text)


def _inflate(fh: BinaryIO, path: str, limits: RowLimits, chunk_bytes: int) -> Iterator[bytes]:
    """The decompressed content in pieces of at most ``chunk_bytes``, refused once past
    ``limits.max_bytes``."""
    total = 0
    for piece in inflate_pieces(fh, path, chunk_bytes):
        total += len(piece)
        if total > limits.max_bytes:
            raise FormatError(
                f"{path}: inflates to more than {limits.max_bytes} bytes, more than the "
                f"rows of a token file of {limits.num_tokens} tokens take ({ROW_BYTES} "
                "bytes per row); it is corrupt or a gzip bomb"
            )
        yield piece


def read_rows(
    fh: BinaryIO,
    path: str,
    limits: RowLimits,
    *,
    keep_text: bool = False,
    chunk_bytes: int = CHUNK_BYTES,
) -> DolmaRows:
    """Stream-parse the rows of a ``.csv.gz`` opened as ``fh`` (memory: one piece, one row
    and the parsed columns; the text too with ``keep_text``).

    Raises:
        FormatError: not gzip, truncated, a malformed row (naming it), or beyond ``limits``.
    """
    reader = _RowReader(path, limits, keep_text)
    pending = b""  # the bytes after the last whole row: a row begins there
    scratch = _Scratch()
    for piece in _inflate(fh, path, limits, chunk_bytes):
        text = b"".join((_PAD, pending, piece))  # one copy; the padding serves parse_plain
        buf = np.frombuffer(text, dtype=np.uint8)
        marks = _marks(buf, text, scratch)
        reader.check(marks.ends.size)  # a file of tiny rows is refused before they are parsed
        rows, cut = _parse_marked(buf, marks, path, reader.rows + 1)
        if cut > PAD_BYTES:
            reader.add(rows, cut - PAD_BYTES, text[PAD_BYTES:cut] if keep_text else None)
        pending = text[cut:]
        if len(pending) > MAX_ROW_BYTES:
            raise FormatError(
                f"{path}: row {reader.rows + 1} is longer than {MAX_ROW_BYTES} bytes (real rows "
                "hold two offsets, an id and a source path); the file is corrupt"
            )
    if pending:
        reader.add(parse_rows(pending, path, reader.rows + 1), len(pending), pending)
    return reader.result()


def row_fields(text: bytes, begin: int, end: int, path: str = "") -> dict[str, object]:
    """``id``, ``src`` and ``loc`` of one row (``None`` where a legacy row lacks them); ``loc``
    is an int when it is ASCII digits.

    Raises:
        FormatError: the row is not CSV the ``csv`` module reads.
    """
    try:
        (fields,) = csv.reader([text[begin:end].decode("utf-8", errors="replace")])
    except (csv.Error, ValueError) as exc:
        raise FormatError(f"{path}: row at byte {begin} is not valid CSV ({exc})") from None
    doc_id, src, loc = [*fields[2:5], None, None, None][:3]
    if loc is not None and loc.isascii() and loc.isdigit() and len(loc) <= _MAX_DIGITS:
        return {"id": doc_id, "src": src, "loc": int(loc)}
    return {"id": doc_id, "src": src, "loc": loc}
