"""The ``index.json`` beside Mosaic MDS shards and LitData chunks: found, read, parsed once.

Both formats describe a folder of shards in one ``index.json``; every shard of the folder is
described against it. Reading and parsing it again for each shard would cost O(shards²) on
a large corpus (an MDS index holds ~600 bytes per shard), so the parsed result is kept per
process under the file's path, size and version (a local file's modification time, a remote
object's ETag or generation): a rewritten index is parsed again, an unchanged one never.
"""

from __future__ import annotations

import os
import posixpath
import threading
from collections import OrderedDict
from collections.abc import Callable
from typing import Any, TypeVar, cast

from streamload.errors import FormatError
from streamload.formats._fields import json_object
from streamload.formats.base import local_path, open_head

__all__ = ["INDEX_NAME", "MAX_INDEX_BYTES", "index_path", "load_index"]

INDEX_NAME = "index.json"
MAX_INDEX_BYTES = 256 << 20
"""Largest ``index.json`` read (an MDS index holds ~600 bytes per shard: 400,000 shards)."""
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
