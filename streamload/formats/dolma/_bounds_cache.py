"""Document bounds of dolma shards on local disk: each ``.csv.gz`` is parsed once, at describe.

Describing a dolma shard parses its whole ``.csv.gz`` (to count and check the rows), and
inflating it is most of the cost of a cold plan build (about 0.3 s per 10^6 rows). The bounds
found there are written to ``<cache>/dolma/<k[:2]>/<k>.bounds`` (int64 little-endian,
``[documents + 1]``), where ``k`` is the sha256 of :data:`SCHEMA` and those bytes; the
shard's description records ``k`` (``meta["bounds_sha256"]``). When documents are needed
(packed, padded and vsl plans, masks), the file is mapped instead of parsing the CSV again,
after checking its size and its digest (about 40 ms per 10^7 documents): a hit holds exactly
the bounds describe checked. The key names the content, so two jobs, or the shards of two
sources, write equal bytes under one name.

A missing, resized or altered entry is not used: the CSV is parsed again, as without the
cache. A folder that cannot be written costs one warning per folder and process, then
nothing is kept. Entries are never evicted (8 bytes per document); delete ``<cache>/dolma``
to reclaim them.
"""

from __future__ import annotations

import hashlib
import logging
import mmap
import os

import numpy as np

from streamload.util.files import write_atomic

__all__ = ["SCHEMA", "bounds_key", "load_bounds", "save_bounds"]

SCHEMA = "streamload-dolma-bounds-1"
"""Version of the key and of the file layout."""

_LOG = logging.getLogger("streamload.formats")
_WARNED: set[str] = set()
_DTYPE = np.dtype("<i8")


def bounds_key(bounds: np.ndarray) -> str:
    """The key of a shard's bounds (int64 ``[d + 1]``): sha256 of the schema and the bytes."""
    digest = hashlib.sha256(f"{SCHEMA}\0".encode())
    digest.update(np.ascontiguousarray(bounds, dtype=_DTYPE).data)
    return digest.hexdigest()


def _path(root: str, key: str) -> str:
    return os.path.join(root, "dolma", key[:2], f"{key}.bounds")


def save_bounds(root: str, key: str, bounds: np.ndarray) -> bool:
    """Write ``bounds`` (whose :func:`bounds_key` is ``key``; an entry already there is
    replaced by equal bytes, or repaired); ``False`` (with one warning per folder and
    process) when it cannot be written."""
    path = _path(root, key)
    try:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        write_atomic(path, np.ascontiguousarray(bounds, dtype=_DTYPE).data)
    except OSError as exc:
        folder = os.path.join(root, "dolma")
        if folder not in _WARNED:
            _WARNED.add(folder)
            _LOG.warning("cannot keep dolma document bounds in %s (%s); plans and masks "
                         "parse each .csv.gz again", folder, exc)  # fmt: skip
        return False
    return True


def load_bounds(root: str, key: str, documents: int) -> np.ndarray | None:
    """The entry's bounds (int64 ``[documents + 1]``, mapped read-only), or ``None`` when it
    is missing, has another size, or does not hash to ``key``."""
    size = (documents + 1) * _DTYPE.itemsize
    try:
        with open(_path(root, key), "rb") as fh:
            if os.fstat(fh.fileno()).st_size != size:
                return None
            mapped = mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ)
    except OSError:  # missing or unreadable: parse the CSV instead
        return None
    bounds = np.frombuffer(mapped, dtype=_DTYPE, count=documents + 1)
    return bounds if bounds_key(bounds) == key else None
