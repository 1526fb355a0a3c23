"""The ``index.json`` beside Mosaic MDS shards and LitData chunks: found, read, parsed once.

Both formats describe a folder of shards in one ``index.json``; every shard of the folder is
described against it. Reading and parsing it again for each shard would cost O(shards²) on
a large corpus (an MDS index holds ~600 bytes per shard), so the parsed result is kept per
process under the file's path, size and version (a local file's modification time, a remote
object's ETag or generation): a rewritten index is parsed again, an unchanged one never.

The index also fixes the order of the shards: LitData reads its chunks in the order of
``chunks`` and Streaming its shards in the order of ``shards``, while file names sort
otherwise (``chunk-0-10.bin`` before ``chunk-0-2.bin``). The catalog
(:mod:`streamload.catalog.listing`) lists an indexed folder's files by
:func:`order_by_index`, as it lists a ``save_to_disk`` folder by its ``state.json``: the files
must be exactly those the index lists, and MDS shards of 0 samples (``MDSWriter`` writes an
empty ``shard.00000.mds`` when the first sample passes its size limit) are left out.

A compressed MDS shard and its decompressed copy are one shard: Streaming's
``StreamingDataset`` leaves ``shard.00000.mds`` beside ``shard.00000.mds.zstd`` once it has
read a folder (the index names both, ``raw_data`` and ``zip_data``). Such a folder is listed
with the compressed files, as it was before Streaming read it (same files, same data
fingerprint); a copy alone, where Streaming removed the compressed file, is read itself.

Example: ``chunks = [chunk-0-0.bin, chunk-0-1.bin, ..., chunk-0-11.bin]`` lists the folder as
``chunk-0-0.bin, chunk-0-1.bin, chunk-0-2.bin, ..., chunk-0-10.bin, chunk-0-11.bin``; a folder
without ``chunk-0-7.bin`` is refused, naming it.
"""

from __future__ import annotations

import functools
import os
import posixpath
import threading
from collections import OrderedDict
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar, cast

from streamload.errors import FormatError
from streamload.formats._fields import json_object
from streamload.formats._litdata_index import parse_litdata_index
from streamload.formats._mds_index import parse_mds_index
from streamload.formats.base import local_path, open_head

__all__ = [
    "INDEX_NAME",
    "INDEXED_SUFFIXES",
    "MAX_INDEX_BYTES",
    "IndexedShards",
    "index_path",
    "load_folder_index",
    "load_index",
    "one_shard_twice",
    "order_by_index",
    "parse_indexed_shards",
]

INDEX_NAME = "index.json"
MAX_INDEX_BYTES = 256 << 20
"""Largest ``index.json`` read (an MDS index holds ~600 bytes per shard: 400,000 shards)."""
INDEXED_SUFFIXES = (".bin", ".mds", ".mds.zstd", ".mds.gz")
"""Suffixes of the files an ``index.json`` may order (LitData chunks, MDS shards)."""
_NAMED = 5
"""File names a message lists before it counts the others."""
_KEEP = 8
"""Parsed indexes kept per process (one per folder being described)."""

T = TypeVar("T")
_LOCK = threading.Lock()
_PARSED: OrderedDict[tuple[str, int, str, str], Any] = OrderedDict()


def index_path(shard_path: str) -> str:
    """The ``index.json`` in the folder of ``shard_path`` (a local path or a URL)."""
    return posixpath.join(posixpath.dirname(shard_path), INDEX_NAME)


def _stat(fs: Any, path: str, shard: str, kind: str) -> tuple[int, str]:
    """Size and version of the index, or a ``FormatError`` naming the shard when missing."""
    try:
        local = local_path(path)
        if local is not None:
            st = os.stat(local)
            return st.st_size, str(st.st_mtime_ns)
        from streamload.remote.versions import object_version

        info = fs.info(path)
        return int(info["size"]), object_version(info)
    except FileNotFoundError:
        raise FormatError(
            f"{shard}: its {kind} index {path} is missing; {kind} shards are read with the "
            f"{INDEX_NAME} their writer put beside them"
        ) from None


def load_index(fs: Any, shard_path: str, kind: str, parse: Callable[[dict[str, Any], str], T]) -> T:
    """``parse(record, where)`` of the ``index.json`` beside ``shard_path``, from this
    process's cache when the file is unchanged.

    Args:
        fs: fsspec file system of the shard.
        shard_path: The shard being described (named in errors).
        kind: ``"MDS"`` or ``"LitData"`` (for messages).
        parse: Validates the JSON object; raises ``FormatError`` naming ``where``.

    Raises:
        FormatError: missing, larger than ``MAX_INDEX_BYTES``, not JSON, or refused by
            ``parse``.
    """
    path = index_path(shard_path)
    size, version = _stat(fs, path, shard_path, kind)
    key = (path, size, version, getattr(parse, "__qualname__", repr(parse)))
    with _LOCK:
        if key in _PARSED:
            _PARSED.move_to_end(key)
            return cast(T, _PARSED[key])
    if size > MAX_INDEX_BYTES:
        raise FormatError(
            f"{path}: {size} bytes; an {kind} {INDEX_NAME} is at most {MAX_INDEX_BYTES} bytes "
            "here (is it another file?)"
        )
    with open_head(fs, path) as fh:
        data = fh.read(size + 1)
    if len(data) != size:
        raise FormatError(f"{path}: {len(data)} bytes read but listed as {size}; it changed")
    parsed = parse(json_object(data, path), path)
    with _LOCK:
        _PARSED[key] = parsed
        while len(_PARSED) > _KEEP:
            _PARSED.popitem(last=False)
    return parsed


@dataclass(frozen=True)
class IndexedShards:
    """The shard files an MDS or LitData ``index.json`` lists, in its order.

    Attributes:
        kind: ``"MDS"`` or ``"LitData"`` (for messages).
        entries: Each shard's file names in the index's order (an MDS shard: its raw file, and
            its compressed one when it has one).
        empty: The names of the shards without samples (MDS), never listed as shards.
    """

    kind: str
    entries: tuple[tuple[str, ...], ...]
    empty: frozenset[str]

    @functools.cached_property
    def rank(self) -> dict[str, int]:
        """Each file name's shard: its position in ``entries``."""
        return {name: at for at, files in enumerate(self.entries) for name in files}

    def decompressed_copies(self, names: set[str]) -> set[str]:
        """The MDS shard files of ``names`` whose compressed file is in ``names`` too: the
        copies Streaming decompressed beside them (module docstring)."""
        return {files[0] for files in self.entries if len(files) > 1 and names.issuperset(files)}


def parse_indexed_shards(record: dict[str, Any], where: str) -> IndexedShards | None:
    """The shard order of an MDS (``version`` 2 and ``shards``) or LitData (``config`` with an
    ``item_loader`` and ``chunks``) index; ``None`` for another tool's ``index.json``.

    Raises:
        FormatError: an index of either shape that its format's parser refuses.
    """
    if record.get("version") == 2 and isinstance(record.get("shards"), list):
        mds = parse_mds_index(record, where)
        shards = sorted({e.number: e for e in mds.shards.values()}.items())
        entries = tuple((e.raw_name,) + ((e.zip_name,) if e.zip_name else ()) for _, e in shards)
        empty = {n for (_, e), names in zip(shards, entries, strict=True) if e.samples == 0
                 for n in names}  # fmt: skip
        return IndexedShards("MDS", entries, frozenset(empty))
    config = record.get("config")
    if isinstance(config, dict) and "item_loader" in config and "chunks" in record:
        litdata = parse_litdata_index(record, where)
        return IndexedShards("LitData", tuple((n,) for n in litdata.chunks), frozenset())
    return None


def load_folder_index(fs: Any, folder: str) -> IndexedShards | None:
    """:func:`parse_indexed_shards` of the ``index.json`` (which must exist) in ``folder`` (a
    local path or a URL), parsed once per process while unchanged (:func:`load_index`).

    Raises:
        FormatError: larger than ``MAX_INDEX_BYTES``, not JSON, or a malformed MDS or LitData
            index.
    """
    return load_index(fs, posixpath.join(folder, INDEX_NAME), "MDS or LitData",
                      parse_indexed_shards)  # fmt: skip


def _some(names: list[str]) -> str:
    more = f" and {len(names) - _NAMED} more" if len(names) > _NAMED else ""
    return ", ".join(names[:_NAMED]) + more


def order_by_index(
    names: list[str], index: IndexedShards, where: str, *, complete: bool
) -> list[str]:
    """``names`` (files of one folder) in the index's order, without its empty shards.

    Args:
        names: Listed file names (a folder's shard files, or a glob's matches in it).
        index: The folder's index.
        where: The folder (for messages).
        complete: ``names`` are the whole folder (every shard of the index must be there); a
            glob may pick some.

    Raises:
        FormatError: naming the listed files the index does not list and, with ``complete``,
            the shards it lists that are missing.
    """
    rank = index.rank
    present = set(names)
    extra = sorted(present - set(rank))
    missing = [files[-1] for files in index.entries if complete and present.isdisjoint(files)]
    wrong = {"missing": missing, "not listed there": extra}
    found = "; ".join(f"{what}: {_some(files)}" for what, files in wrong.items() if files)
    if found:
        raise FormatError(
            f"{where}: its {index.kind} {INDEX_NAME} lists {len(index.entries)} shards but the "
            f"folder holds {len(names)} shard files ({found}); the copy is incomplete or mixes "
            "two datasets"
        )
    skip = index.empty | index.decompressed_copies(present)
    return sorted((n for n in names if n not in skip), key=lambda n: (rank[n], n))


def one_shard_twice(
    paths: Iterable[str], indexes: Mapping[str, IndexedShards | None]
) -> tuple[str, str] | None:
    """Two of ``paths`` that are files of one indexed shard (an MDS shard's compressed file
    and its decompressed copy, named by two path entries), or ``None``.

    Args:
        paths: Listed file paths (each folder's listing already holds one file per shard:
            :func:`order_by_index`).
        indexes: The index of each folder listed, by folder path (``None``: not indexed).
    """
    owners: dict[tuple[str, int], str] = {}
    for path in paths:
        folder, name = posixpath.split(path)
        index = indexes.get(folder)
        at = None if index is None else index.rank.get(name)
        if at is None:
            continue
        first = owners.setdefault((folder, at), path)
        if first != path:
            return first, path
    return None
