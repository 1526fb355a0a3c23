"""Modalities raw JSONL index (``modalities data create_raw_index``, FORMATS §3.1).

The index of ``X.jsonl`` is ``X.idx``: ``pickle.dumps([(byte_offset, byte_length), …])``, one
pair per line of the **binary** file. The length excludes the ``\\n`` but keeps a ``\\r``; a
last line without a trailing newline counts; a line that is not valid JSON (blank lines
included) is an error unless ``drop_faulty_entries``. :func:`create_raw_index` writes the
same bytes as the tool (pickle protocol 4); :func:`read_raw_index` reads it without
:mod:`pickle`; :class:`JsonlDocuments` reads document i by its byte range.

Example (``docs.jsonl``, lines of 20, 19, 45 and 15 bytes): the index is
``[(0, 20), (21, 19), (41, 45), (87, 15)]``.
"""

from __future__ import annotations

import json
import os
import warnings
from array import array
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from streamload.errors import FormatError
from streamload.formats._pickle_subset import decode_pairs, encode_pairs
from streamload.util.files import atomic_output

__all__ = ["JsonlDocuments", "create_raw_index", "default_index_path", "read_raw_index"]


def default_index_path(jsonl_path: str | os.PathLike[str]) -> Path:
    """Where the tool puts the index of ``jsonl_path``: ``{parent}/{stem}.idx``."""
    src = Path(jsonl_path)
    return src.parent / f"{src.stem}.idx"


def _lines(path: Path) -> Iterator[tuple[int, bytes]]:
    """(byte offset, line without its ``\\n``) of each line; an empty file is one empty line."""
    offset = 0
    with open(path, "rb") as fh:
        for line in fh:
            yield offset, line[:-1] if line.endswith(b"\n") else line
            offset += len(line)
    if offset == 0:
        yield 0, b""


def _json_error(line: bytes) -> str | None:
    try:
        json.loads(line)  # bytes, as the tool does: UTF-8 (a BOM allowed), UTF-16 or UTF-32
    except ValueError as exc:  # UnicodeDecodeError and JSONDecodeError included
        return str(exc)
    return None


def create_raw_index(
    jsonl_path: str | os.PathLike[str],
    index_path: str | os.PathLike[str] | None = None,
    *,
    drop_faulty_entries: bool = False,
) -> Path:
    """Index a JSONL file as ``modalities data create_raw_index`` does, byte for byte.

    Args:
        jsonl_path: The JSONL file.
        index_path: Output path; default ``{parent}/{stem}.idx``.
        drop_faulty_entries: Leave lines that are not valid JSON out of the index (with one
            warning) instead of failing.

    Returns:
        The index path (written atomically).

    Raises:
        FormatError: a line is not valid JSON (naming the file, line and byte range).
    """
    src = Path(jsonl_path)
    dst = Path(index_path) if index_path is not None else default_index_path(src)
    pairs = array("q")
    dropped: list[int] = []
    for number, (offset, line) in enumerate(_lines(src), start=1):
        error = _json_error(line)
        if error is None:
            pairs.extend((offset, len(line)))
        elif drop_faulty_entries:
            dropped.append(number)
        else:
            raise FormatError(
                f"{src}: line {number} (bytes {offset}..{offset + len(line)}) is not valid JSON "
                f"({error}); fix it or pass drop_faulty_entries=True to leave it out"
            )
    if dropped:
        warnings.warn(
            f"{src}: left {len(dropped)} line(s) that are not valid JSON out of the index "
            f"(first: line {dropped[0]})",
            stacklevel=2,
        )
    encoded = encode_pairs(np.frombuffer(pairs, dtype=np.int64).reshape(-1, 2))
    with atomic_output(dst) as tmp, open(tmp, "wb") as fh:
        fh.write(encoded)
    return dst


def read_raw_index(path: str | os.PathLike[str]) -> np.ndarray:
    """A raw JSONL index as int64 ``[n, 2]`` (byte offset, byte length), without pickle.

    Raises:
        FormatError: missing, not the pickled list of pairs the tool writes, or negative values.
    """
    name = os.fspath(path)
    try:
        blob = Path(name).read_bytes()
    except OSError as exc:
        raise FormatError(f"{name}: cannot read the raw JSONL index: {exc}") from exc
    pairs = decode_pairs(blob, f"{name}: raw JSONL index")
    bad = np.flatnonzero((pairs < 0).any(axis=1))
    if bad.size:
        i = int(bad[0])
        raise FormatError(
            f"{name}: raw JSONL index entry {i} is {tuple(pairs[i].tolist())}; expected a "
            "non-negative (byte offset, byte length)"
        )
    return pairs


class JsonlDocuments:
    """Random access to the documents of a JSONL file through its raw index.

    Args:
        jsonl_path: The JSONL file.
        index_path: Its index; default ``{parent}/{stem}.idx``.
        text_key: Key of the text field; a sequence of keys reaches into nested objects.

    Raises:
        FormatError: the index is invalid or points past the end of the JSONL file.

    Example:
        >>> docs = JsonlDocuments("docs.jsonl")  # doctest: +SKIP
        >>> docs.text(3)  # doctest: +SKIP
        'w30'
    """

    def __init__(
        self,
        jsonl_path: str | os.PathLike[str],
        index_path: str | os.PathLike[str] | None = None,
        *,
        text_key: str | Sequence[str] = "text",
    ) -> None:
        self.path = os.fspath(jsonl_path)
        self.index_path = os.fspath(index_path or default_index_path(self.path))
        self.text_key = (text_key,) if isinstance(text_key, str) else tuple(text_key)
        self.index = read_raw_index(self.index_path)
        self.size = os.path.getsize(self.path)
        ends = self.index[:, 0] + self.index[:, 1]
        past = np.flatnonzero(ends > self.size)
        if past.size:
            i = int(past[0])
            raise FormatError(
                f"{self.index_path}: entry {i} covers bytes {int(self.index[i, 0])}.."
                f"{int(ends[i])} but {self.path} is {self.size} bytes; the index belongs to "
                "another file or the file was truncated"
            )
        self._data: np.ndarray | None = None

    def __len__(self) -> int:
        return int(self.index.shape[0])

    def raw(self, i: int) -> bytes:
        """The bytes of document ``i`` (its line without the newline)."""
        if not -len(self) <= i < len(self):
            raise IndexError(f"{self.path}: document {i} out of range ({len(self)} documents)")
        if self._data is None:
            if os.path.getsize(self.path) != self.size:
                raise FormatError(f"{self.path}: file size changed since it was indexed")
            self._data = np.memmap(self.path, dtype=np.uint8, mode="r") if self.size else None
        offset, length = (int(v) for v in self.index[i])
        return b"" if self._data is None else self._data[offset : offset + length].tobytes()

    def __getitem__(self, i: int) -> Any:
        """Document ``i`` parsed as JSON."""
        line = self.raw(i)
        try:
            return json.loads(line)
        except ValueError as exc:
            offset = int(self.index[i, 0])
            raise FormatError(
                f"{self.path}: document {i} (bytes {offset}..{offset + len(line)}) is not valid "
                f"JSON ({exc}); the index does not match the file"
            ) from exc

    def text(self, i: int) -> str:
        """The text field of document ``i``."""
        value = self[i]
        for key in self.text_key:
            if not isinstance(value, dict) or key not in value:
                raise FormatError(
                    f"{self.path}: document {i} has no field {'.'.join(self.text_key)!r}"
                )
            value = value[key]
        if not isinstance(value, str):
            raise FormatError(
                f"{self.path}: document {i} field {'.'.join(self.text_key)!r} is "
                f"{type(value).__name__}; expected a string"
            )
        return value

    def texts(self, start: int = 0) -> Iterator[str]:
        """The text fields of documents ``start, start + 1, …``."""
        for i in range(start, len(self)):
            yield self.text(i)

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "_data": None}  # workers map the file themselves
