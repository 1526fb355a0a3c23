"""The restricted pickle codec of Modalities indexes: byte-identical to pickle, never unpickles."""

from __future__ import annotations

import collections
import pickle
import pickletools

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from streamload.errors import FormatError
from streamload.formats._pickle_interpreter import PickleInterpreter
from streamload.formats._pickle_subset import _decode_fast, decode_pairs, encode_pairs
from tests.helpers.paths import TESTS

DATA = TESTS / "data" / "modalities"
INT64 = st.one_of(
    st.integers(0, 255),
    st.integers(256, 65535),
    st.integers(-(2**31), 2**31 - 1),
    st.integers(2**31, 2**63 - 1),
    st.integers(-(2**63), -(2**31) - 1),
)


def both_paths(blob: bytes) -> np.ndarray:
    """Decode with the public entry point, and check the interpreter agrees."""
    pairs = decode_pairs(blob, "t")
    assert np.array_equal(PickleInterpreter(blob, "t", 0).run(), pairs)
    return pairs


def random_pairs(seed: int, n: int, high: int) -> list[tuple[int, int]]:
    rng = np.random.default_rng(seed)
    offsets = rng.integers(0, high, size=n, dtype=np.int64)
    lengths = rng.integers(0, 70_000, size=n, dtype=np.int64)
    return [(int(a), int(b)) for a, b in zip(offsets, lengths, strict=True)]


@settings(max_examples=50, deadline=None)
@given(pairs=st.lists(st.tuples(INT64, INT64), max_size=40), protocol=st.sampled_from([4, 5]))
def test_encoder_matches_pickle_dumps(pairs: list[tuple[int, int]], protocol: int) -> None:
    expected = pickle.dumps(pairs, protocol=protocol)
    assert encode_pairs(pairs, protocol) == expected
    assert encode_pairs(np.array(pairs, dtype=np.int64).reshape(-1, 2), protocol) == expected
    assert both_paths(expected).tolist() == [list(p) for p in pairs]


@settings(max_examples=25, deadline=None)
@given(
    n=st.one_of(st.integers(998, 1002), st.integers(1999, 2001), st.integers(2, 12_000)),
    high=st.sampled_from([256, 65_536, 2**31, 2**40, 2**62]),
    seed=st.integers(0, 2**32 - 1),
)
def test_encoder_matches_pickle_on_batches_and_frames(n: int, high: int, seed: int) -> None:
    """APPENDS batches of 1000 and several 64 KiB frames, cut exactly where pickle cuts."""
    pairs = random_pairs(seed, n, high)
    expected = pickle.dumps(pairs, protocol=4)
    assert encode_pairs(pairs) == expected
    decoded = both_paths(expected)
    assert decoded.tolist() == [list(p) for p in pairs]
    assert _decode_fast(np.frombuffer(expected, dtype=np.uint8)) is not None


def test_large_index_spans_several_frames() -> None:
    pairs = random_pairs(1, 12_000, 2**45)
    blob = encode_pairs(pairs)
    assert len(blob) > 2 * 64 * 1024
    assert sum(op.name == "FRAME" for op, _, _ in pickletools.genops(blob)) >= 2
    assert blob == pickle.dumps(pairs, protocol=4)
    assert decode_pairs(blob).tolist() == [list(p) for p in pairs]


@pytest.mark.parametrize("protocol", [2, 3, 4, 5])
@pytest.mark.parametrize("n", [0, 1, 2, 1000, 1500])
def test_decoder_reads_every_protocol_pickle_writes(protocol: int, n: int) -> None:
    pairs = random_pairs(n, n, 2**34)
    assert both_paths(pickle.dumps(pairs, protocol=protocol)).tolist() == [list(p) for p in pairs]


def test_fixture_index_decodes() -> None:
    blob = (DATA / "docs.idx").read_bytes()
    assert decode_pairs(blob).tolist() == [[0, 20], [21, 19], [41, 45], [87, 15]]
    assert encode_pairs([(0, 20), (21, 19), (41, 45), (87, 15)]) == blob


def test_payload_bytes_that_look_like_item_ends() -> None:
    """Values whose bytes read ``86 94`` (TUPLE2 MEMOIZE) do not confuse the fast path."""
    pairs = [(0x9486, 0x94860000 - 2**32), (0x869486, 7), *random_pairs(3, 3000, 2**20)]
    pairs += [(0x8694, 0x9486), (2**40 + 0x948600, 0x86)]
    blob = pickle.dumps(pairs, protocol=4)
    assert blob.count(b"\x86\x94") > len(pairs)
    assert _decode_fast(np.frombuffer(blob, dtype=np.uint8)).tolist() == [list(p) for p in pairs]


ALLOWED = {"PROTO", "FRAME", "EMPTY_LIST", "MEMOIZE", "MARK", "APPENDS", "APPEND", "BININT1"}
ALLOWED |= {"BININT2", "BININT", "LONG1", "TUPLE2", "TUPLE", "BINPUT", "LONG_BINPUT", "STOP"}


@pytest.mark.parametrize(
    "obj", [collections.OrderedDict(), {1: 2}, [(1, 2, 3)], [(1, "a")], [(1.5, 2)], [(1, None)]]
)
def test_other_opcodes_are_refused_by_name_and_offset(obj: object) -> None:
    blob = pickle.dumps(obj, protocol=4)
    op, at = next(
        (op.name, pos) for op, _, pos in pickletools.genops(blob) if op.name not in ALLOWED
    )
    with pytest.raises(
        FormatError, match=rf"^idx: pickle opcode {op} \(0x..\) is not allowed at byte {at + 7}$"
    ):
        decode_pairs(blob, "idx", base=7)


def test_code_execution_payload_is_refused_without_running() -> None:
    blob = b"cbuiltins\nexec\n(Vraise SystemExit(3)\ntR."
    with pytest.raises(FormatError, match=r"x\.idx: pickle opcode GLOBAL \(0x63\).* at byte 0"):
        decode_pairs(blob, "x.idx")


@pytest.mark.parametrize(
    ("blob", "message"),
    [
        (pickle.dumps((1, 2), protocol=4), "does not hold exactly one list"),
        (pickle.dumps([1, 2], protocol=4), r"list item 0 is int 1; expected a pair"),
        (pickle.dumps([(1, 2)], protocol=4) + b"\x00", "unexpected bytes after the pickle STOP"),
        (pickle.dumps([(2**64, 1)], protocol=4), "LONG1 of 9 bytes does not fit 64 bits"),
        (b"\x80\x04]\x94(K\x01\x86\x94e.", "TUPLE2 .* finds too few items"),
        (b"\x80\x04]\x94K\x01K\x02\x86\x94", "truncated: no STOP"),
        (b"\x80\x04\x95\xff\x00\x00\x00\x00\x00\x00\x00]\x94.", "FRAME runs past the end"),
        (b"\x80\x02]q\x05.", r"BINPUT \(0x71\) stores memo 5 of 1 stack items; expected memo 0"),
        (b"\x80\x09]\x94.", "PROTO 9 is not a leading protocol 2 to 5"),
        (b"\x80\x04]\x94K\x01e.", r"APPENDS \(0x65\) has no MARK at byte 6"),
        (b"\x80\x04\x94.", r"MEMOIZE \(0x94\) stores memo 0 of 0 stack items"),
        (b"\x80\x04K\x01K\x02a.", "APPEND/APPENDS without a list"),
    ],
)
def test_malformed_pickles_are_refused(blob: bytes, message: str) -> None:
    with pytest.raises(FormatError, match=message):
        decode_pairs(blob, "idx")


def test_opcode_split_across_frames_is_refused() -> None:
    """FRAME cuts must fall between opcodes, as pickle requires."""
    body = b"]\x94(M\x01\x02K\x03\x86\x94e."
    framed = b"\x80\x04" + b"".join(
        b"\x95" + len(part).to_bytes(8, "little") + part for part in (body[:4], body[4:])
    )
    with pytest.raises(FormatError, match="runs past the end of its FRAME"):
        decode_pairs(framed, "idx")
    good = b"\x80\x04" + b"".join(
        b"\x95" + len(part).to_bytes(8, "little") + part for part in (body[:6], body[6:])
    )
    assert decode_pairs(good).tolist() == [[0x201, 3]]


def test_every_truncation_is_refused() -> None:
    blob = encode_pairs(random_pairs(5, 1200, 2**33))
    for cut in [*range(0, 40), *range(len(blob) - 40, len(blob)), *range(40, len(blob), 997)]:
        with pytest.raises(FormatError, match="idx"):
            decode_pairs(blob[:cut], "idx")


@settings(max_examples=50, deadline=None)
@given(
    n=st.sampled_from([1, 3, 1001, 4000]),
    protocol=st.sampled_from([2, 4]),
    edits=st.lists(st.tuples(st.floats(0, 1, exclude_max=True), st.integers(0, 255)), max_size=3),
)
def test_corruption_is_refused_or_read_consistently(n: int, protocol: int, edits: list) -> None:
    """Flipped bytes: a FormatError, or the list pickle itself reads (never a crash)."""
    blob = bytearray(pickle.dumps(random_pairs(n, n, 2**36), protocol=protocol))
    for where, value in edits:
        blob[int(where * len(blob))] = value
    try:
        pairs = decode_pairs(bytes(blob), "t")
    except FormatError as exc:
        assert str(exc).startswith("t: ")
        return
    assert np.array_equal(PickleInterpreter(bytes(blob), "t", 0).run(), pairs)
    assert pairs.tolist() == [list(p) for p in pickle.loads(bytes(blob))]


def test_encoder_refuses_what_it_cannot_write() -> None:
    with pytest.raises(ValueError, match="64-bit signed"):
        encode_pairs([(2**63, 0)])
    with pytest.raises(ValueError, match="integer pairs"):
        encode_pairs(np.zeros((3, 3), dtype=np.int64))
    with pytest.raises(ValueError, match="integer pairs"):
        encode_pairs([(1.5, 2.0)])
    with pytest.raises(ValueError, match="protocol 3"):
        encode_pairs([(1, 2)], protocol=3)
    with pytest.raises(ValueError, match="above 2"):
        encode_pairs(np.array([[2**63, 1]], dtype=np.uint64))
