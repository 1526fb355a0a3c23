"""The sequential decoder of the pickle subset Modalities writes (see :mod:`._pickle_subset`).

It runs any shape of that subset (protocols 2 to 5, ``BINPUT``/``LONG_BINPUT`` memos,
``APPEND``, ``TUPLE``), one opcode at a time, and gives the exact byte offset of the first
opcode outside it. :func:`~streamload.formats._pickle_subset.decode_pairs` falls back to it
whenever its vectorized path does not recognise the bytes.
"""

from __future__ import annotations

import numpy as np

from streamload.errors import FormatError

__all__ = [
    "APPEND",
    "APPENDS",
    "BININT",
    "BININT1",
    "BININT2",
    "EMPTY_LIST",
    "FRAME",
    "LONG1",
    "MARK",
    "MEMOIZE",
    "PROTO",
    "STOP",
    "TUPLE2",
    "PickleInterpreter",
]

# The opcodes of the subset (pickletools names), shared with the vectorized path.
PROTO, FRAME, STOP = 0x80, 0x95, 0x2E
EMPTY_LIST, MEMOIZE, BINPUT, LONG_BINPUT = 0x5D, 0x94, 0x71, 0x72
MARK, APPENDS, APPEND, TUPLE, TUPLE2 = 0x28, 0x65, 0x61, 0x74, 0x86
BININT1, BININT2, BININT, LONG1 = 0x4B, 0x4D, 0x4A, 0x8A
_ARGS = {PROTO: 1, FRAME: 8, BINPUT: 1, LONG_BINPUT: 4, BININT1: 1, BININT2: 2, BININT: 4}


class PickleInterpreter:
    """Sequential decoder of the subset: exact error offsets, protocols 2 to 5."""

    def __init__(self, data: bytes, what: str, base: int) -> None:
        self.data, self.what, self.base = data, what, base
        self.pos = 0
        self.frame_end: int | None = None
        self.memo = 0

    def fail(self, message: str, at: int) -> FormatError:
        return FormatError(f"{self.what}: {message} at byte {self.base + at}")

    def take(self, size: int, at: int) -> bytes:
        end = self.pos + size
        if end > len(self.data):
            raise self.fail("pickle is truncated: opcode arguments run past the end", at)
        chunk, self.pos = self.data[self.pos : end], end
        return chunk

    def run(self) -> np.ndarray:
        stack: list[object] = []
        marks: list[int] = []
        while True:
            at = self.pos
            if at >= len(self.data):
                raise self.fail("pickle is truncated: no STOP opcode", at)
            op = self.data[at]
            self.pos += 1
            if op == STOP:
                break
            self.step(op, at, stack, marks)
            if self.frame_end is not None and self.pos >= self.frame_end:
                if self.pos > self.frame_end:
                    raise self.fail("pickle opcode runs past the end of its FRAME", at)
                self.frame_end = None
        if self.pos != len(self.data):
            raise self.fail("unexpected bytes after the pickle STOP opcode", self.pos)
        if marks or len(stack) != 1 or not isinstance(stack[0], list):
            raise self.fail("pickle does not hold exactly one list", at)
        return _check_items(stack[0], self)

    def header(self, op: int, arg: bytes, at: int) -> None:
        """``PROTO`` (first opcode only) and ``FRAME`` (not inside another frame)."""
        if op == PROTO and (at != 0 or not 2 <= arg[0] <= 5):
            raise self.fail(f"PROTO {arg[0]} is not a leading protocol 2 to 5", at)
        if op == FRAME:
            if self.frame_end is not None:
                raise self.fail("FRAME starts inside another frame", at)
            self.frame_end = self.pos + int.from_bytes(arg, "little")
            if self.frame_end > len(self.data):
                raise self.fail("pickle is truncated: FRAME runs past the end", at)

    def step(self, op: int, at: int, stack: list[object], marks: list[int]) -> None:
        arg = self.take(_ARGS.get(op, 0), at)
        above = len(stack) - (marks[-1] if marks else 0)  # items above the last MARK
        if op in (PROTO, FRAME):
            self.header(op, arg, at)
        elif op in (BININT1, BININT2, BININT):
            stack.append(int.from_bytes(arg, "little", signed=op == BININT))
        elif op == LONG1:
            size = self.take(1, at)[0]
            if size > 8:
                raise self.fail(f"LONG1 of {size} bytes does not fit 64 bits", at)
            stack.append(int.from_bytes(self.take(size, at), "little", signed=True))
        elif op == EMPTY_LIST:
            stack.append([])
        elif op in (MEMOIZE, BINPUT, LONG_BINPUT):
            index = self.memo if op == MEMOIZE else int.from_bytes(arg, "little")
            if not stack or index != self.memo:
                raise self.fail(
                    f"{_name(op)} stores memo {index} of {len(stack)} stack items; expected "
                    f"memo {self.memo} of a non-empty stack",
                    at,
                )
            self.memo += 1
        elif op == MARK:
            marks.append(len(stack))
        elif op in (TUPLE2, APPEND) and above < (2 if op == TUPLE2 else 1):
            raise self.fail(f"pickle opcode {_name(op)} finds too few items", at)
        elif op == TUPLE2:
            stack[-2:] = [(stack[-2], stack[-1])]
        elif op == APPEND:
            item = stack.pop()
            _target(stack, self, at).append(item)
        elif op in (TUPLE, APPENDS) and marks:
            items = stack[marks[-1] :]
            del stack[marks.pop() :]
            if op == TUPLE:
                stack.append(tuple(items))
            else:
                _target(stack, self, at).extend(items)
        else:
            reason = "has no MARK" if op in (TUPLE, APPENDS) else "is not allowed"
            raise self.fail(f"pickle opcode {_name(op)} {reason}", at)


def _target(stack: list[object], interp: PickleInterpreter, at: int) -> list[object]:
    if not stack or not isinstance(stack[-1], list):
        raise interp.fail("APPEND/APPENDS without a list to append to", at)
    return stack[-1]


def _check_items(items: list[object], interp: PickleInterpreter) -> np.ndarray:
    for i, item in enumerate(items):
        if not (isinstance(item, tuple) and len(item) == 2 and all(type(v) is int for v in item)):
            raise FormatError(
                f"{interp.what}: list item {i} is {type(item).__name__} {item!r:.60}; "
                "expected a pair of integers"
            )
    return np.array(items, dtype=np.int64).reshape(-1, 2)


def _name(op: int) -> str:
    import pickletools

    names = {ord(info.code): info.name for info in pickletools.opcodes}
    return f"{names[op]} (0x{op:02x})" if op in names else f"0x{op:02x} (not a pickle opcode)"
