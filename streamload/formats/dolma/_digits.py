"""Short ASCII decimal fields read eight digits per machine word (SWAR), for the CSV parser.

A field of at most :data:`PLAIN_DIGITS` bytes ending before byte ``stop`` of a buffer is read
as two unaligned little-endian uint64 words, the bytes ``[stop - 16, stop - 8)`` and
``[stop - 8, stop)``: one gather per word for every field at once (:func:`byte_words` views
the buffer as a word at every byte offset, no copy). The bytes before the field are masked
off, ``"0"`` is XOR-ed away, and each word folds its eight digits pairwise
(``x = 10 x + (x >> 8)``, then by 100, then by 10,000). A field is plain when its length is
1 to 16 and every byte is a digit; :func:`parse_plain` reports the fields that are not, so the
caller can give them to a careful parser that names the row.

Example: the field ``b"4711"`` ending at ``stop`` gives the low word ``"????4711"`` (bytes
before it masked to 0) -> digits ``0 0 0 0 4 7 1 1`` -> ``4711``; the high word is all masked.
"""

from __future__ import annotations

import numpy as np

__all__ = ["PAD_BYTES", "PLAIN_DIGITS", "byte_words", "parse_plain"]

PLAIN_DIGITS = 16
"""Longest field read by words (two words); 10^16 tokens is beyond any shard."""
PAD_BYTES = 16
"""Bytes a buffer must hold before its first field, so its first word read starts at >= 0."""

_U = np.uint64
_ZEROS = _U(0x3030_3030_3030_3030)  # "00000000"
_OVER_9 = _U(0x7676_7676_7676_7676)  # + 0x76 sets a byte's top bit when the byte is > 9
_TOP = _U(0x8080_8080_8080_8080)
_PAIRS, _QUADS, _OCTETS = _U(0x00FF_00FF_00FF_00FF), _U(0x0000_FFFF_0000_FFFF), _U(0xFFFF_FFFF)


def _length_masks() -> tuple[np.ndarray, np.ndarray]:
    """``(high, low)[n]``: the word masks keeping the last ``n`` of 16 bytes (``n`` <= 16)."""
    keep = np.zeros((PLAIN_DIGITS + 1, 16), dtype=np.uint8)
    for n in range(PLAIN_DIGITS + 1):
        keep[n, 16 - n :] = 0xFF
    words = keep.view("<u8")
    return np.ascontiguousarray(words[:, 0]), np.ascontiguousarray(words[:, 1])


_HIGH_MASK, _LOW_MASK = _length_masks()


def byte_words(buf: np.ndarray) -> np.ndarray:
    """``buf`` (uint8) viewed as the little-endian uint64 starting at each byte offset (a
    strided view, no copy; element ``i`` is bytes ``[i, i + 8)``)."""
    count = max(buf.size - 7, 0)
    return np.ndarray((count,), dtype="<u8", buffer=buf, offset=0, strides=(1,))


def _fold(x: np.ndarray) -> np.ndarray:
    """Eight digit bytes per word (first digit in the lowest byte) -> their value."""
    x = (x * _U(10) + (x >> _U(8))) & _PAIRS
    x = (x * _U(100) + (x >> _U(16))) & _QUADS
    return (x * _U(10_000) + (x >> _U(32))) & _OCTETS


def parse_plain(words: np.ndarray, stop: np.ndarray, length: np.ndarray) -> np.ndarray | None:
    """The values (int64) of the fields of ``length`` bytes ending before ``stop``; ``None``
    when any field is not plain (length outside 1..16, or a byte that is not a digit).

    Args:
        words: :func:`byte_words` of the buffer (which holds :data:`PAD_BYTES` bytes before
            any field).
        stop: int64 offsets one past each field.
        length: int64 bytes of each field.
    """
    if stop.size == 0:
        return np.zeros(0, dtype=np.int64)
    if int(length.min()) < 1 or int(length.max()) > PLAIN_DIGITS:
        return None
    high = (words[stop - 16] ^ _ZEROS) & _HIGH_MASK[length]
    low = (words[stop - 8] ^ _ZEROS) & _LOW_MASK[length]
    if ((high | (high + _OVER_9) | low | (low + _OVER_9)) & _TOP).any():
        # A byte over 9 sets its top bit (or has it set); a carry out of a byte only reaches
        # a later byte of the same field, which is refused anyway.
        return None
    return (_fold(high) * _U(100_000_000) + _fold(low)).astype(np.int64)
