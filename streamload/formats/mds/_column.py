"""Which MDS column holds the tokens, and how it is encoded.

Read (one sample = one document, its values flattened in C order):

* ``ndarray:<dtype>`` — a per-sample shape header, then the values (newer LLM Foundry);
* ``ndarray:<dtype>:<shape>`` — a fixed shape, no header;
* ``ndarray`` — a per-sample dtype byte, then the shape header and the values (every sample
  must hold the same dtype);
* ``bytes`` — the raw bytes of the tokens (older LLM Foundry wrote ``np.int64`` tokens this
  way); the width is not stored, so the source's ``dtype`` must say it.

The dtype must be an integer (``uint8`` … ``int64``). Refused: ``pkl`` (unpickling runs
code), ``json``, ``str``, scalar encodings (``int``, ``uint16``… hold one number per sample)
and images.

Default column: the only column encoded ``ndarray…`` or ``bytes``; with several, the source's
``column`` must name one.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from streamload.errors import FormatError
from streamload.formats._mds_index import MdsShardEntry
from streamload.formats.base import check_configured_dtype

__all__ = ["NDARRAY_DTYPE_CODES", "TokenColumn", "token_column"]

NDARRAY_DTYPE_CODES = {8: "u1", 9: "i1", 16: "<u2", 17: "<i2", 32: "<u4", 33: "<i4",
                       64: "<u8", 65: "<i8"}  # fmt: skip
"""Streaming's ``NDArray`` value-dtype bytes of the integer dtypes (18, 34 and 66 are floats)."""
_INTEGER_NAMES = {np.dtype(v).name: np.dtype(v) for v in NDARRAY_DTYPE_CODES.values()}


@dataclass(frozen=True)
class TokenColumn:
    """The token column of a shard.

    Attributes:
        name: Column name.
        position: Its index among the shard's columns.
        encoding: As written in the index.
        dtype: Token dtype (little-endian); for ``ndarray`` without a dtype, the config's, or
            ``None`` until the samples' dtype byte says it.
        shape: The fixed shape of ``ndarray:<dtype>:<shape>``, else ``None``.
        kind: ``"ndarray"`` (shape header), ``"fixed"``, ``"any"`` (dtype byte + shape
            header) or ``"bytes"``.
    """

    name: str
    position: int
    encoding: str
    dtype: np.dtype | None
    shape: tuple[int, ...] | None
    kind: str


def _is_token_encoding(encoding: str) -> bool:
    return encoding == "bytes" or encoding == "ndarray" or encoding.startswith("ndarray:")


def _pick(entry: MdsShardEntry, column: str | None, where: str) -> int:
    listed = ", ".join(f"{n} ({e})" for n, e in zip(entry.names, entry.encodings, strict=True))
    if column is not None:
        if column not in entry.names:
            raise FormatError(
                f"{where}: column = {column!r} is not a column of this shard; its columns are "
                f"{listed}"
            )
        return entry.names.index(column)
    found = [i for i, e in enumerate(entry.encodings) if _is_token_encoding(e)]
    if len(found) != 1:
        what = "no column" if not found else f"{len(found)} columns"
        pickled = [n for n, e in zip(entry.names, entry.encodings, strict=True) if e == "pkl"]
        note = (
            f" ({', '.join(pickled)}: pkl is never read, unpickling runs code)" if pickled else ""
        )
        raise FormatError(
            f"{where}: {what} could hold tokens (encoded ndarray or bytes) among {listed}"
            f'{note}; set column = "NAME" in the source to name the token column'
        )
    return found[0]


def _integer(name: str, encoding: str, where: str) -> np.dtype:
    dtype = _INTEGER_NAMES.get(name)
    if dtype is None:
        raise FormatError(
            f"{where}: encoding {encoding!r} holds {name} values; token ids need an integer "
            f"dtype ({', '.join(_INTEGER_NAMES)})"
        )
    return dtype


def _shape(text: str, encoding: str, where: str) -> tuple[int, ...]:
    parts = text.split(",")
    if not all(p.isdigit() and int(p) > 0 for p in parts):
        raise FormatError(f"{where}: encoding {encoding!r} has shape {text!r}; expected N or N,M")
    return tuple(int(p) for p in parts)


def _configured(dtype: str) -> np.dtype | None:
    return None if dtype == "auto" else np.dtype(dtype).newbyteorder("<")


def token_column(entry: MdsShardEntry, column: str | None, dtype: str, where: str) -> TokenColumn:
    """The token column of ``entry``: ``column`` or the default (module docstring).

    Args:
        entry: The shard's index entry.
        column: The source's ``column`` (``None``: the default).
        dtype: The source's ``dtype`` (``"auto"`` or a numpy name).
        where: The shard path, for messages.

    Raises:
        FormatError: no such column, no or several candidates, an unread encoding, a
            non-integer dtype, ``bytes`` without a configured dtype, or a configured dtype
            that disagrees with the encoding.
    """
    position = _pick(entry, column, where)
    name, encoding = entry.names[position], entry.encodings[position]
    path, where = where, f"{where}: column {name!r}"
    configured = _configured(dtype)
    if encoding == "bytes":
        if configured is None:
            raise FormatError(
                f"{where} is encoded 'bytes', which does not record the token width; set "
                'dtype in the source (older LLM Foundry wrote dtype = "int64")'
            )
        return TokenColumn(name, position, encoding, configured, None, "bytes")
    if encoding == "ndarray":
        return TokenColumn(name, position, encoding, configured, None, "any")
    head, _, rest = encoding.partition(":")
    if head != "ndarray" or not rest:
        raise FormatError(
            f"{where} is encoded {encoding!r}; token columns are read when encoded "
            "ndarray:<dtype>, ndarray:<dtype>:<shape>, ndarray or bytes"
            + (" (pkl is never read: unpickling runs code)" if encoding == "pkl" else "")
        )
    name_dtype, _, shape_text = rest.partition(":")
    np_dtype = _integer(name_dtype, encoding, where)
    what = f"column {name!r} is encoded {encoding!r} ({np_dtype.name} tokens)"
    check_configured_dtype(dtype, np_dtype, path, what)
    if not shape_text:
        return TokenColumn(name, position, encoding, np_dtype, None, "ndarray")
    shape = _shape(shape_text, encoding, where)
    return TokenColumn(name, position, encoding, np_dtype, shape, "fixed")
