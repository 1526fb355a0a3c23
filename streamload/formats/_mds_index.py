"""A Mosaic Streaming MDS ``index.json`` (version 2, FORMATS §8), checked field by field.

``{"shards": [...], "version": 2}``; each shard entry gives its columns (``column_names``,
``column_encodings``, ``column_sizes``: a byte size for fixed-size encodings, ``null`` for
variable ones), its sample count, its file (``raw_data``: basename and bytes) and, when
compressed, the compressed file (``zip_data``) and the algorithm (``compression``, e.g.
``"zstd"`` or ``"zstd:7"``). A shard is found by the name of either file.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, cast

from streamload.errors import FormatError
from streamload.formats._fields import json_int, json_str

__all__ = ["COMPRESSIONS", "MdsIndex", "MdsShardEntry", "parse_mds_index"]

COMPRESSIONS = ("zstd", "gz")
"""Shard compressions read (Streaming's others, ``br``, ``bz2`` and ``snappy``, are refused)."""

_MAX_COLUMN_BYTES = (1 << 32) - 1


@dataclass(frozen=True)
class MdsShardEntry:
    """One shard as the index describes it.

    Attributes:
        number: Its position in the index's ``shards`` (for messages).
        raw_name: ``raw_data.basename`` (``shard.00000.mds``).
        raw_bytes: Size of the uncompressed shard.
        zip_name: ``zip_data.basename`` when compressed, else ``None``.
        zip_bytes: Size of the compressed file, else ``None``.
        compression: Algorithm without its level (``"zstd"``, ``"gz"``), else ``None``.
        samples: Sample count.
        names: Column names, in the shard's order (sorted by name, as MDSWriter writes).
        encodings: Each column's encoding.
        sizes: Each column's fixed byte size, or ``None`` (variable: a u32 per sample).
    """

    number: int
    raw_name: str
    raw_bytes: int
    zip_name: str | None
    zip_bytes: int | None
    compression: str | None
    samples: int
    names: tuple[str, ...]
    encodings: tuple[str, ...]
    sizes: tuple[int | None, ...]


@dataclass(frozen=True)
class MdsIndex:
    """The shards of an index by file name (raw and compressed names both)."""

    path: str
    shards: dict[str, MdsShardEntry]


def _file(entry: dict[str, Any], key: str, at: str) -> tuple[str, int]:
    data = entry.get(key)
    if not isinstance(data, dict):
        raise FormatError(f"{at}: field {key!r} is {data!r}; expected {{basename, bytes}}")
    name = json_str(data, "basename", f"{at}.{key}")
    if "/" in name or name in (".", ".."):
        raise FormatError(f"{at}.{key}: basename {name!r} is not a file name in the folder")
    return name, cast(int, json_int(data, "bytes", f"{at}.{key}"))


def _columns(
    entry: dict[str, Any], at: str
) -> tuple[tuple[str, ...], tuple[str, ...], tuple[int | None, ...]]:
    names, encodings, sizes = (
        entry.get(k) for k in ("column_names", "column_encodings", "column_sizes")
    )
    if not (
        isinstance(names, list)
        and isinstance(encodings, list)
        and isinstance(sizes, list)
        and len(names) == len(encodings) == len(sizes)
    ):
        raise FormatError(
            f"{at}: column_names {names!r}, column_encodings {encodings!r} and column_sizes "
            f"{sizes!r}; expected three lists of one entry per column"
        )
    if not all(isinstance(x, str) and x for x in [*names, *encodings]):
        raise FormatError(f"{at}: column names and encodings must be non-empty strings")
    for i, size in enumerate(sizes):
        # A sample's bytes are addressed by u32 offsets, so no fixed column is 2**32 bytes
        # or more; a larger value would overflow the int64 size table when decoded.
        if size is not None and (type(size) is not int or not 0 <= size <= _MAX_COLUMN_BYTES):
            raise FormatError(
                f"{at}: column_sizes[{i}] is {size!r}; expected a byte size from 0 to "
                f"{_MAX_COLUMN_BYTES} (an MDS sample is addressed by u32 offsets) or null"
            )
    if len(set(names)) != len(names):
        raise FormatError(f"{at}: column_names {names!r} repeat a name")
    return tuple(names), tuple(encodings), tuple(sizes)


def _compression(entry: dict[str, Any], at: str) -> str | None:
    value = entry.get("compression")
    if value is None:
        return None
    algorithm = value.split(":", 1)[0] if isinstance(value, str) else None
    if algorithm not in COMPRESSIONS:
        raise FormatError(
            f"{at}: compression {value!r} is not read; expected none, 'zstd' or 'gz' "
            "(rewrite the dataset with MDSWriter(compression='zstd'))"
        )
    return algorithm


def _shard(entry: Any, number: int, where: str) -> MdsShardEntry:
    at = f"{where}: shards[{number}]"
    if not isinstance(entry, dict):
        raise FormatError(f"{at} is {entry!r}; expected an object")
    if entry.get("format") != "mds":
        raise FormatError(
            f"{at}: format is {entry.get('format')!r}; streamload reads 'mds' shards only "
            "(Streaming's csv/tsv/jsonl shards hold text, not tokens)"
        )
    raw_name, raw_bytes = _file(entry, "raw_data", at)
    compression = _compression(entry, at)
    zip_name = zip_bytes = None
    if compression is not None:
        zip_name, zip_bytes = _file(entry, "zip_data", at)
    samples = cast(int, json_int(entry, "samples", at, maximum=(1 << 32) - 2))
    names, encodings, sizes = _columns(entry, at)
    return MdsShardEntry(
        number, raw_name, raw_bytes, zip_name, zip_bytes, compression, samples,
        names, encodings, sizes,
    )  # fmt: skip


def parse_mds_index(record: dict[str, Any], where: str) -> MdsIndex:
    """The checked index (``where``: its path, for messages).

    Raises:
        FormatError: another version, a shard that is not MDS, an unread compression, or a
            malformed field.
    """
    if record.get("version") != 2:
        raise FormatError(
            f"{where}: version is {record.get('version')!r}; expected 2 (a Mosaic Streaming "
            "MDS index; is this another tool's index.json?)"
        )
    entries = record.get("shards")
    if not isinstance(entries, list):
        raise FormatError(f"{where}: field 'shards' is {entries!r}; expected a list")
    shards: dict[str, MdsShardEntry] = {}
    for number, raw in enumerate(entries):
        entry = _shard(raw, number, where)
        for name in (entry.raw_name, entry.zip_name):
            if name is not None and name in shards:
                raise FormatError(f"{where}: shards[{number}] names {name!r} a second time")
            if name is not None:
                shards[name] = entry
    return MdsIndex(where, shards)
