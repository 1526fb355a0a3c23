"""Vectorized reading of Dolma ``.csv.gz`` document metadata (FORMATS §4.3).

Rows are ``start,end,id,src,loc`` written by Python's ``csv`` module (CRLF, no header, fields
quoted only when needed); legacy OLMo files hold only ``start,end`` with ``\\n``. Only the first
two fields are parsed, with numpy over the whole decompressed buffer, so a million rows take
milliseconds instead of a Python loop. A record ends at a newline outside quotes: ``csv``
escapes a quote by doubling it, so the count of ``"`` before a newline is even exactly when the
newline ends a record (an id holding a newline stays one row).

Example: ``b"0,4,d2,a.gz,2\\r\\n4,11,d4,a.gz,4\\r\\n"`` gives rows ``[0, 15)`` and ``[15, 31)``,
starts ``[0, 4]`` and ends ``[4, 11]``.
"""

from __future__ import annotations

import csv
import gzip
import zlib
from dataclasses import dataclass

import numpy as np

from streamload.errors import FormatError

__all__ = ["DolmaRows", "gunzip", "parse_rows", "row_fields"]

_NL, _CR, _COMMA, _QUOTE = 10, 13, 44, 34
_MAX_DIGITS = 18
"""Longest start/end field accepted (fits int64 without overflow)."""


@dataclass(frozen=True)
class DolmaRows:
    """The rows of one metadata file.

    Attributes:
        starts: First token of each document (int64).
        ends: One past the last token of each document (int64).
        row_begin: Byte offset of each row in the decompressed text.
        row_end: Byte offset where each row's text ends (before its line ending).
    """

    starts: np.ndarray
    ends: np.ndarray
    row_begin: np.ndarray
    row_end: np.ndarray


def gunzip(data: bytes, path: str) -> bytes:
    """The decompressed content of a gzip file, or a ``FormatError`` naming it."""
    try:
        return gzip.decompress(data)
    except (OSError, EOFError, zlib.error) as exc:
        raise FormatError(f"{path}: not a readable gzip file ({exc}); it is truncated") from exc


def _record_ends(buf: np.ndarray) -> np.ndarray:
    newlines = np.flatnonzero(buf == _NL)
    quotes = np.flatnonzero(buf == _QUOTE)
    if quotes.size:
        before = np.searchsorted(quotes, newlines)
        newlines = newlines[before % 2 == 0]
    return newlines


def _parse_ints(
    buf: np.ndarray, begin: np.ndarray, stop: np.ndarray, what: str, path: str
) -> np.ndarray:
    """Non-negative decimal integers in ``buf[begin[i]:stop[i]]``, by Horner over columns."""
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
        raise FormatError(
            f"{path}: row {i + 1}: {what} field is {text!r}; expected a non-negative integer "
            "(rows are start,end,id,src,loc)"
        )
    return values


def parse_rows(text: bytes, path: str) -> DolmaRows:
    """Parse the ``start`` and ``end`` columns of a decompressed metadata file.

    Raises:
        FormatError: a blank row, a row with fewer than two fields, or a non-integer field,
            naming the row (1-based).
    """
    if text and not text.endswith(b"\n"):
        text += b"\n"
    buf = np.frombuffer(text, dtype=np.uint8)
    ends = _record_ends(buf)
    begins = np.concatenate([[0], ends[:-1] + 1]).astype(np.int64)[: ends.size]
    stops = ends - ((ends > begins) & (buf[np.maximum(ends - 1, 0)] == _CR))
    commas = np.flatnonzero(buf == _COMMA)
    k = np.searchsorted(commas, begins)
    first = commas[np.minimum(k, commas.size - 1)] if commas.size else stops
    missing = np.flatnonzero((k >= commas.size) | (first >= stops))
    if missing.size:
        i = int(missing[0])
        row = bytes(buf[begins[i] : stops[i]]).decode("utf-8", "replace")
        raise FormatError(
            f"{path}: row {i + 1} is {row!r}; expected at least start,end (rows are "
            "start,end,id,src,loc)"
        )
    nxt = commas[np.minimum(k + 1, commas.size - 1)]
    second = np.where((k + 1 < commas.size) & (nxt < stops), nxt, stops)
    starts = _parse_ints(buf, begins, first, "start", path)
    doc_ends = _parse_ints(buf, first + 1, second, "end", path)
    return DolmaRows(starts, doc_ends, begins, stops)


def row_fields(text: bytes, begin: int, end: int) -> dict[str, object]:
    """``id``, ``src`` and ``loc`` of one row (``None`` where a legacy row lacks them)."""
    (fields,) = csv.reader([text[begin:end].decode("utf-8", errors="replace")])
    doc_id, src, loc = [*fields[2:5], None, None, None][:3]
    return {"id": doc_id, "src": src, "loc": int(loc) if loc and loc.isdigit() else loc}
