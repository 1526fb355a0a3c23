"""Decoded MDS token columns on local disk, one contiguous array per shard.

An MDS shard stores each sample's tokens between that sample's header and its other columns,
so its tokens are not one array in the file. Each shard's token column is decoded once (and a
compressed shard decompressed once) into ``<cache>/mds/<k[:2]>/<k>.tokens`` (the tokens, raw
little-endian) and ``<k>.bounds`` (int64 document bounds), then memory-mapped: every worker
and process of the machine shares the pages, and windows are sliced zero-copy exactly as from
a NumPy shard (the loader's fast gather path).

The key ``k`` is a sha256 over the shard file's own sha256, the token column (name,
encoding, position) and the dtype: a rewritten shard, or another column, is another entry;
a hit is exactly what decoding again would give. Files are written to temporary names and
renamed (bounds first, tokens last), so a reader sees whole files or none, and two writers
write equal bytes. Entries are never evicted (they cost the corpus's token bytes once):
delete ``<cache>/mds`` to reclaim them. A cache that cannot be written costs one warning,
and then nothing is kept: every open of a shard reads the shard file again and decodes it
again (the arrays live in the process's memory while that shard stays open).
"""

from __future__ import annotations

import hashlib
import logging
import mmap
import os

import numpy as np

from streamload.formats.mds._decode import DecodedShard
from streamload.util.files import atomic_output, write_atomic

__all__ = ["SCHEMA", "decoded_key", "load_decoded", "save_decoded"]

SCHEMA = "streamload-mds-decoded-1"
"""Version of the key and the file layout (change it when decoding changes)."""

_LOG = logging.getLogger("streamload.formats")
_WARNED: set[str] = set()


def decoded_key(content: str, column: str, encoding: str, position: int, dtype: str) -> str:
    """The key of a shard's decoded tokens (module docstring)."""
    text = f"{SCHEMA}\0{content}\0{column}\0{encoding}\0{position}\0{dtype}"
    return hashlib.sha256(text.encode()).hexdigest()


def _paths(root: str, key: str) -> tuple[str, str]:
    base = os.path.join(root, "mds", key[:2], key)
    return base + ".tokens", base + ".bounds"


def _map(path: str, dtype: np.dtype, count: int) -> np.ndarray | None:
    """``count`` values of ``path`` mapped read-only, or ``None`` when missing or resized."""
    try:
        with open(path, "rb") as fh:
            if os.fstat(fh.fileno()).st_size != count * dtype.itemsize:
                return None
            if count == 0:
                return np.empty(0, dtype=dtype)
            mapped = mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ)
    except FileNotFoundError:
        return None
    return np.frombuffer(mapped, dtype=dtype, count=count)


def load_decoded(
    root: str, key: str, dtype: np.dtype, num_tokens: int, num_documents: int
) -> DecodedShard | None:
    """The cached decoded shard, or ``None`` when it is not (wholly) there."""
    tokens_path, bounds_path = _paths(root, key)
    bounds = _map(bounds_path, np.dtype("<i8"), num_documents + 1)
    if bounds is None or int(bounds[-1]) != num_tokens:
        return None
    tokens = _map(tokens_path, dtype, num_tokens)
    return None if tokens is None else DecodedShard(tokens, bounds)


def save_decoded(root: str, key: str, decoded: DecodedShard) -> bool:
    """Write a decoded shard into the cache; ``False`` (with one warning per folder and
    process) when the cache cannot be written."""
    tokens_path, bounds_path = _paths(root, key)
    try:
        os.makedirs(os.path.dirname(tokens_path), exist_ok=True)
        write_atomic(bounds_path, decoded.bounds.astype("<i8", copy=False).tobytes())
        with atomic_output(tokens_path) as tmp:  # no in-memory copy of the tokens
            np.ascontiguousarray(decoded.tokens).tofile(tmp)
    except OSError as exc:
        folder = os.path.join(root, "mds")
        if folder not in _WARNED:
            _WARNED.add(folder)
            _LOG.warning("cannot write decoded MDS shards into %s (%s); each open of a shard "
                         "reads and decodes it again",
                         folder, exc)  # fmt: skip
        return False
    return True
