"""A LitData ``index.json`` written by ``litdata.optimize(..., item_loader=TokensLoader())``
(FORMATS §7), checked field by field.

``config.data_format`` is one ``"no_header_tensor:K"`` (torch tensors) or
``"no_header_numpy:K"`` (numpy arrays): items are raw token arrays without a header, of the
dtype litdata's table ``K`` names (its torch table: 16 is ``torch.int``; its numpy table: 5 is
``uint16``). Each ``chunks`` entry names a file and gives its byte size (``chunk_bytes``),
its item count (``chunk_size``) and its token count (``dim``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, cast

import numpy as np

from streamload.errors import FormatError
from streamload.formats._fields import json_int, json_str

__all__ = ["NUMPY_CODES", "LitdataChunk", "LitdataIndex", "parse_litdata_index"]

_TORCH_CODES = {11: "u1", 12: "i1", 13: "<i2", 14: "<i2", 15: "<i4", 16: "<i4", 17: "<i8",
                18: "<i8", 20: "<u2"}  # fmt: skip
"""litdata's ``_TORCH_DTYPES_MAPPING`` codes of integer dtypes (0-10 are floats and complex,
19 bool)."""
NUMPY_CODES = {0: "i1", 1: "<i2", 2: "<i4", 3: "<i8", 4: "u1", 5: "<u2", 6: "<u4", 7: "<u8"}
"""litdata's ``_NUMPY_DTYPES_MAPPING`` codes of integer dtypes (8 on are floats, bool,
objects)."""
_SERIALIZERS = {"no_header_tensor": _TORCH_CODES, "no_header_numpy": NUMPY_CODES}


@dataclass(frozen=True)
class LitdataChunk:
    """One chunk as the index lists it: file name, bytes, items and tokens."""

    filename: str
    nbytes: int
    items: int
    tokens: int


@dataclass(frozen=True)
class LitdataIndex:
    """A parsed TokensLoader index: the token dtype and the chunks by file name."""

    dtype: np.dtype
    data_format: str
    chunks: dict[str, LitdataChunk]


def _config(record: dict[str, Any], where: str) -> dict[str, Any]:
    config = record.get("config")
    if not isinstance(config, dict):
        raise FormatError(
            f"{where}: field 'config' is {config!r}; expected the object litdata.optimize "
            "writes (is this a LitData index?)"
        )
    loader = config.get("item_loader")
    if loader != "TokensLoader":
        raise FormatError(
            f"{where}: config.item_loader is {loader!r}; streamload reads LitData datasets "
            "written with item_loader=TokensLoader() (token arrays), not arbitrary items"
        )
    for key in ("compression", "encryption"):
        if config.get(key) is not None:
            raise FormatError(
                f"{where}: config.{key} is {config[key]!r}; streamload reads uncompressed, "
                f"unencrypted chunks (optimize without {key}=)"
            )
    return config


def _dtype(config: dict[str, Any], where: str) -> tuple[np.dtype, str]:
    formats = config.get("data_format")
    if not isinstance(formats, list) or len(formats) != 1 or not isinstance(formats[0], str):
        raise FormatError(
            f"{where}: config.data_format is {formats!r}; expected one entry such as "
            "'no_header_tensor:16' (a TokensLoader item is one token array)"
        )
    name, _, code = formats[0].partition(":")
    table = _SERIALIZERS.get(name)
    dtype = table.get(int(code)) if table is not None and code.isdigit() else None
    if dtype is None:
        raise FormatError(
            f"{where}: config.data_format is {formats[0]!r}; expected 'no_header_tensor:K' or "
            "'no_header_numpy:K' with K an integer dtype of litdata's tables"
        )
    return np.dtype(dtype), formats[0]


def _chunk(entry: Any, i: int, where: str) -> LitdataChunk:
    at = f"{where}: chunks[{i}]"
    if not isinstance(entry, dict):
        raise FormatError(f"{at} is {entry!r}; expected an object")
    name = json_str(entry, "filename", at)
    if "/" in name or name in (".", ".."):
        raise FormatError(f"{at}: filename {name!r} is not a file name in the index's folder")
    nbytes, items, tokens = (
        cast(int, json_int(entry, key, at)) for key in ("chunk_bytes", "chunk_size", "dim")
    )  # not optional: never None
    return LitdataChunk(name, nbytes, items, tokens)


def parse_litdata_index(record: dict[str, Any], where: str) -> LitdataIndex:
    """The checked index (``where``: the index path, for messages).

    Raises:
        FormatError: not a TokensLoader index, compressed or encrypted chunks, a dtype that
            is not an integer, or a malformed chunk entry.
    """
    dtype, data_format = _dtype(_config(record, where), where)
    entries = record.get("chunks")
    if not isinstance(entries, list):
        raise FormatError(f"{where}: field 'chunks' is {entries!r}; expected a list of chunks")
    chunks: dict[str, LitdataChunk] = {}
    for i, entry in enumerate(entries):
        chunk = _chunk(entry, i, where)
        if chunk.filename in chunks:
            raise FormatError(f"{where}: chunks[{i}] lists {chunk.filename!r} a second time")
        chunks[chunk.filename] = chunk
    return LitdataIndex(dtype, data_format, chunks)
