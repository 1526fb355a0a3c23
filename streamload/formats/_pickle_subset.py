"""The one pickle shape Modalities writes: a list of ``(int, int)`` tuples (FORMATS §3.2).

Modalities stores its indexes (the JSONL ``.idx`` and the tail of a ``.pbin``) as
``pickle.dumps(list_of_tuples)``. Unpickling a user file with :mod:`pickle` can run arbitrary
code, so this module implements only the opcodes such a pickle uses and rejects every other
one with a :class:`FormatError` naming the opcode and its byte offset.

Decoding has two paths with the same result: a vectorized one for the shape
``pickle.dumps`` gives (``PROTO``, back-to-back ``FRAME``s holding ``] MEMOIZE ( item… e (
item… e .``, an item being ``int int TUPLE2 MEMOIZE``), and a sequential interpreter for any
other shape (protocol 2/3 ``BINPUT``, ``APPEND``, ``TUPLE``) and for exact error offsets
(:mod:`._pickle_interpreter`).
The fast path takes every ``86 94`` byte pair as a candidate item end, decodes the item after
each candidate at once (which links candidates), and keeps the chain reached from the first
item; payload bytes that happen to read ``86 94`` fall off the chain. No Python object is
made per item.

Encoding (:func:`encode_pairs`) reproduces ``pickle.dumps(list_of_tuples, protocol=4)`` byte
for byte, vectorized: ints as ``BININT1``/``BININT2``/``BININT``/``LONG1``, ``APPENDS``
batches of 1000 (a single item uses ``APPEND``), and the C pickler's framing: a frame is
closed at the first ``save()`` of an object once it holds at least 64 KiB, and a final frame
under 4 bytes gets no ``FRAME`` header.

Example:
    ``[(0, 8), (8, 6)]`` encodes as ``80 04 | 95 11 00 00 00 00 00 00 00 | 5d 94 28 | 4b 00 4b
    08 86 94 | 4b 08 4b 06 86 94 | 65 2e``.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence

import numpy as np
from numpy.lib.stride_tricks import as_strided

from streamload.formats._pickle_interpreter import (
    APPEND,
    APPENDS,
    BININT,
    BININT1,
    BININT2,
    EMPTY_LIST,
    FRAME,
    LONG1,
    MARK,
    MEMOIZE,
    PROTO,
    STOP,
    TUPLE2,
    PickleInterpreter,
)

__all__ = ["decode_pairs", "encode_pairs"]

_FRAME_TARGET = 64 * 1024
_FRAME_MIN = 4
_BATCH = 1000
_PAD = 600  # > two LONG1 ints of 255 bytes: lets the fast path gather past the end safely
_WIDTH = np.full(256, -1, dtype=np.int64)
_WIDTH[[BININT1, BININT2, BININT, LONG1]] = [1, 2, 4, 0]
_SIGNED_LIMITS = np.array([1 << (8 * k - 1) for k in range(1, 8)], dtype=np.int64)
_OPCODE_OF_WIDTH = np.array([0, BININT1, BININT2, 0, BININT] + [LONG1] * 4, dtype=np.uint8)
_LOW_BYTES = np.array([(1 << (8 * w)) - 1 for w in range(9)], dtype=np.uint64)


# ----------------------------------------------------------------------------------- encode


def _as_pairs(pairs: np.ndarray | Sequence[tuple[int, int]]) -> np.ndarray:
    if not isinstance(pairs, np.ndarray):
        rows = [tuple(pair) for pair in pairs]
        values = [v for row in rows for v in row]
        if any(len(row) != 2 for row in rows) or not all(
            isinstance(v, (int, np.integer)) and not isinstance(v, bool) for v in values
        ):
            raise ValueError("expected integer pairs (a list of (int, int) or an [n, 2] array)")
        if any(not -(2**63) <= int(v) < 2**63 for v in values):
            raise ValueError("index value outside the 64-bit signed range")
        return np.array(values, dtype=np.int64).reshape(-1, 2)
    if pairs.ndim != 2 or pairs.shape[1] != 2 or pairs.dtype.kind not in "iu":
        raise ValueError(f"expected integer pairs of shape [n, 2], got {pairs.dtype} {pairs.shape}")
    if pairs.dtype.kind == "u" and pairs.size and pairs.max() > np.iinfo(np.int64).max:
        raise ValueError("index value above 2**63 - 1; only 64-bit signed values are encoded")
    return pairs.astype(np.int64)


def _int_rows(v: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Each int as ``pickle`` writes it: rows ``[k, 10]`` (opcode, payload) and their lengths.

    ``BININT1`` for 0..255, ``BININT2`` for 256..65535, ``BININT`` for the rest of int32,
    else ``LONG1`` with the minimal two's complement width (what ``pickle.encode_long`` gives).
    """
    magnitude = v ^ (v >> 63)  # ~v for negatives: the signed width is set by its bit length
    signed_width = np.searchsorted(_SIGNED_LIMITS, magnitude, side="right") + 1
    small = (v >= 0) & (v <= 0xFFFF)
    width = np.where(small, 1 + (v > 0xFF), np.maximum(signed_width, 4))
    op = _OPCODE_OF_WIDTH[width]
    long1 = op == LONG1
    rows = np.zeros((v.shape[0], 10), dtype=np.uint8)
    rows[:, 0] = op
    rows[:, 1:9] = v.astype("<i8").view(np.uint8).reshape(-1, 8)
    big = np.flatnonzero(long1)
    rows[big, 2:10] = rows[big, 1:9]
    rows[big, 1] = width[big]
    return rows, 1 + long1 + width


def _body(pairs: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The unframed pickle after ``PROTO`` and the offsets where the pickler may cut frames.

    Each item is a row ``[MARK?][int a][int b][TUPLE2 MEMOIZE][APPENDS or APPEND?]`` of fixed
    lanes with a mask of the lanes in use; the masked rows, in order, are the byte stream.
    """
    n = pairs.shape[0]
    rows, size = _int_rows(pairs.reshape(-1))
    size = size.reshape(n, 2)
    index = np.arange(n)
    pre = (index % _BATCH == 0) & (n > 1)
    post = ((index % _BATCH == _BATCH - 1) | (index == n - 1)) if n > 1 else index == 0
    grid = np.empty((n, 24), dtype=np.uint8)
    grid[:, 0] = MARK
    grid[:, 1:21] = rows.reshape(n, 20)
    grid[:, 21:24] = [TUPLE2, MEMOIZE, APPENDS if n > 1 else APPEND]
    lanes = np.arange(10)
    used = np.empty((n, 24), dtype=bool)
    used[:, 0], used[:, 21:23], used[:, 23] = pre, True, post
    used[:, 1:11] = lanes < size[:, :1]
    used[:, 11:21] = lanes < size[:, 1:]
    body = np.concatenate([[EMPTY_LIST, MEMOIZE], grid[used], [STOP]]).astype(np.uint8)
    block = pre + size.sum(axis=1) + 2 + post
    start = 2 + np.cumsum(block) - block + pre
    cuts = np.stack([start, start + size[:, 0]], axis=1).reshape(-1)
    return body, np.concatenate([[0], cuts])  # save() of the list, then of each int


def encode_pairs(pairs: np.ndarray | Sequence[tuple[int, int]], protocol: int = 4) -> bytes:
    """``pickle.dumps([(a, b), …], protocol)`` byte for byte, for 64-bit signed values.

    Args:
        pairs: ``[n, 2]`` integers (a list of tuples or an array).
        protocol: 4 (what Modalities writes on Python 3.8–3.13) or 5 (Python 3.14+).

    Raises:
        ValueError: not integer pairs, a value outside the int64 range, or another protocol.
    """
    if protocol not in (4, 5):
        raise ValueError(f"protocol {protocol} is not supported; expected 4 or 5")
    body, cuts = _body(_as_pairs(pairs))
    out = [bytes([PROTO, protocol])]
    begin = 0
    while True:
        i = int(np.searchsorted(cuts, begin + _FRAME_TARGET))
        if i == cuts.shape[0]:
            break
        cut = int(cuts[i])
        out += [struct.pack("<BQ", FRAME, cut - begin), body[begin:cut].tobytes()]
        begin = cut
    rest = body[begin:].tobytes()
    if len(rest) >= _FRAME_MIN:
        out.append(struct.pack("<BQ", FRAME, len(rest)))
    out.append(rest)
    return b"".join(out)


# ----------------------------------------------------------------------------------- decode


def decode_pairs(data: bytes | memoryview, what: str = "pickle", base: int = 0) -> np.ndarray:
    """Decode a pickled list of ``(int, int)`` tuples without :mod:`pickle`.

    Args:
        data: The pickle bytes.
        what: What they are, for messages (e.g. ``"x.pbin: index segment"``).
        base: Offset of ``data`` in its file, so messages give file byte offsets.

    Returns:
        int64 ``[n, 2]``.

    Raises:
        FormatError: an opcode outside the subset (named, with its byte offset), truncation,
            trailing bytes, a value outside int64, or anything but a list of integer pairs.
    """
    raw = np.frombuffer(data, dtype=np.uint8)
    pairs = _decode_fast(raw)
    return pairs if pairs is not None else PickleInterpreter(bytes(data), what, base).run()


def _unframe(raw: np.ndarray) -> tuple[np.ndarray, np.ndarray] | None:
    """Frame contents joined (zero-padded) and the frame cuts in body offsets, or ``None``."""
    if raw.shape[0] < 3 or raw[0] != PROTO or raw[1] not in (4, 5):
        return None
    pieces, cuts, pos, length = [], [], 2, 0
    while pos < raw.shape[0] and raw[pos] == FRAME:
        if pos + 9 > raw.shape[0]:
            return None
        size = int(raw[pos + 1 : pos + 9].view("<u8")[0])
        if pos + 9 + size > raw.shape[0]:
            return None
        pieces.append(raw[pos + 9 : pos + 9 + size])
        pos, length = pos + 9 + size, length + size
        cuts.append(length)
    pieces += [raw[pos:], np.zeros(_PAD, dtype=np.uint8)]
    # Every frame end counts, the last one too: a corrupted frame length can end the last
    # frame inside an int, which only the cut check notices.
    return np.concatenate(pieces), np.array(cuts, dtype=np.int64)


def _int_end(b: np.ndarray, s: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """For ints assumed to start at ``s``: (valid opcode, payload start, payload width)."""
    op = b[s]
    width = _WIDTH[op]
    long1 = op == LONG1
    width[long1] = b[s[long1] + 1]
    return width >= 0, s + 1 + long1, width


def _item_ends(b: np.ndarray, s: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """For items assumed to start at ``s``: (valid, end of the first int, item end)."""
    n = b.shape[0] - _PAD
    ok1, p1, w1 = _int_end(b, s)
    q = np.minimum(p1 + np.maximum(w1, 0), n)
    ok2, p2, w2 = _int_end(b, q)
    return ok1 & ok2, q, np.minimum(p2 + np.maximum(w2, 0), n)


def _follow(link: np.ndarray, final: np.ndarray) -> np.ndarray | None:
    """Candidates on the chain from ``link[0]``; ``link[j + 1]`` follows candidate ``j``.

    ``m`` (the candidate count) marks the end of the list, ``m + 1`` a broken link. Usually
    every candidate is on the chain (checked in one pass); otherwise the chain is enumerated
    by pointer doubling: after round r, ``seq`` holds steps ``0 .. 2**r - 1``.
    """
    m = final.shape[0]
    jump = np.append(np.where(final, m, link[1:]), [m, m + 1])
    if link[0] == 0 and final[-1] and np.array_equal(jump[: m - 1], np.arange(1, m)):
        return np.arange(m)
    seq = link[:1]
    while seq[-1] < m:
        seq = np.concatenate([seq, jump[seq]])
        jump = jump[jump]
    count = int(np.argmax(seq >= m))
    return seq[:count] if seq[count] == m else None


def _chain(b: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
    """(start, end of first int, ``TUPLE2`` offset) of each item, chained from offset 3."""
    n = b.shape[0] - _PAD
    ends = np.flatnonzero((b[: n - 1] == TUPLE2) & (b[1:n] == MEMOIZE))
    m = ends.shape[0]
    if m == 0:
        return None
    after = ends + 2
    sep = (b[after] == APPENDS) & (b[after + 1] == MARK)
    final = ~sep & (b[after] == APPENDS) & (b[after + 1] == STOP) & (after + 2 == n)
    starts = np.concatenate([[3], after + 2 * sep])
    ok, mid, item_end = _item_ends(b, np.minimum(starts, n - 1))
    k = np.minimum(np.arange(m + 1), m - 1)  # usually the next candidate ends the next item
    miss = ends[k] != item_end
    k[miss] = np.minimum(np.searchsorted(ends, item_end[miss]), m - 1)
    link = np.where(ok & (ends[k] == item_end) & (starts < n), k, m + 1)
    items = _follow(link, final)
    if items is None:
        return None
    first = np.concatenate([[0], items[:-1] + 1])
    return starts[first], mid[first], ends[items]


def _decode_fast(raw: np.ndarray) -> np.ndarray | None:
    """The pairs when ``raw`` has the shape ``pickle.dumps`` gives a long list, else None."""
    unframed = _unframe(raw)
    if unframed is None:
        return None
    b, cuts = unframed
    if b.shape[0] - _PAD < 6 or bytes(b[:3]) != b"]\x94(":
        return None
    chain = _chain(b)
    if chain is None:
        return None
    starts, mid, ends = chain
    i = np.searchsorted(starts, cuts, side="right") - 1
    i0 = np.maximum(i, 0)
    inside = (i >= 0) & (
        ((starts[i0] < cuts) & (cuts < mid[i0])) | ((mid[i0] < cuts) & (cuts < ends[i0]))
    )
    if inside.any():  # an opcode split across frames: let the interpreter report it
        return None
    return _int_values(b, np.stack([starts, mid], axis=1).reshape(-1))


def _int_values(b: np.ndarray, at: np.ndarray) -> np.ndarray | None:
    """Values of the ints at ``at`` (``[k/2, 2]`` int64), ``None`` if one exceeds 64 bits."""
    ok, payload, width = _int_end(b, at)
    if not ok.all() or (width > 8).any():
        return None
    rows = as_strided(b, shape=(b.shape[0] - 7, 8), strides=(b.strides[0], b.strides[0]))
    values = rows[payload].view("<u8").reshape(-1) & _LOW_BYTES[width]
    op = b[at]
    signed = (op == BININT) | (op == LONG1)
    neg = signed & (values > (_LOW_BYTES[width] >> np.uint64(1)))
    values[neg] -= _LOW_BYTES[width[neg]]
    values[neg] -= np.uint64(1)  # v - 2**(8w), computed modulo 2**64
    return values.view(np.int64).reshape(-1, 2)
