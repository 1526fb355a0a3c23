"""Write LitData ``TokensLoader`` chunks byte for byte as ``litdata.optimize`` does.

What ``optimize(fn, inputs, output_dir, chunk_bytes=… | chunk_size=…, num_workers=1,
item_loader=TokensLoader())`` writes when ``fn`` returns one numpy token array per input
(litdata 0.2.76, ``streaming/writer.py``):

* an item is the array's raw bytes (``no_header_numpy:K``, K from litdata's numpy dtype
  table); a chunk is ``u32 N``, ``u32 offsets[N + 1]`` (absolute, the first
  ``4·(N + 2)``), then the items (:func:`encode_chunk`);
* items go into the chunk in order while their bytes stay at most ``chunk_bytes`` (or their
  tokens at most ``chunk_size``); the item that would pass the limit starts the next chunk,
  and an item larger than the limit alone is a chunk of its own;
* the files are ``chunk-0-0.bin``, ``chunk-0-1.bin``, … (worker rank 0);
* ``index.json`` is ``json.dump({"chunks": [...], "config": {...}, "updated_at":
  str(time.time())}, sort_keys=True)``; a chunk entry gives ``chunk_bytes`` (the file's
  size), ``chunk_size`` (items), ``dim`` (tokens) and ``filename``.

An empty item (0 tokens) is never written: litdata would count it as one token towards
``chunk_size`` and record its chunk's ``dim`` as ``null`` when it comes first; it holds no
token of the stream, and ``TokensLoader`` records no documents.

Example: items ``[7, 8, 9, 0] [12, 13, 0] [22, 23, 24, 25, 26, 0]`` (uint16) with
``chunk_size = 8``: chunk 0 holds the first two (7 tokens; 8 + 6 would pass 8), chunk 1 the
third; ``chunk-0-0.bin`` is ``02000000 10000000 18000000 1e000000`` then the 7 tokens.
"""

from __future__ import annotations

import json
import os
import time
from typing import Any

import numpy as np

from streamload.formats._litdata_index import NUMPY_CODES
from streamload.formats.index_json import INDEX_NAME

__all__ = [
    "DEFAULT_CHUNK_BYTES",
    "DATA_SPEC",
    "chunk_name",
    "encode_chunk",
    "index_config",
    "write_index",
]

DEFAULT_CHUNK_BYTES = 64_000_000
"""litdata's ``chunk_bytes="64MB"`` (its documentation's example; litdata counts a MB as
10**6 bytes): the tokens of a chunk, without its header."""
DATA_SPEC = '[1, {"type": null, "context": null, "children_spec": []}]'
"""litdata's ``treespec_dumps`` of an item that is one array (a pytree leaf)."""
_CODES = {np.dtype(v): k for k, v in NUMPY_CODES.items()}


def chunk_name(number: int) -> str:
    """``chunk-0-{number}.bin``: chunk ``number`` of worker rank 0."""
    return f"chunk-0-{number}.bin"


def encode_chunk(items: list[np.ndarray]) -> bytes:
    """A chunk of ``items`` (little-endian token arrays): count, offsets, then the tokens."""
    head = 4 * (len(items) + 2)
    sizes = np.array([item.nbytes for item in items], dtype=np.int64)
    offsets = np.concatenate([[0], np.cumsum(sizes)]) + head
    parts = [np.array([len(items)], "<u4").tobytes(), offsets.astype("<u4").tobytes()]
    return b"".join([*parts, *(item.tobytes() for item in items)])


def index_config(
    dtype: np.dtype, chunk_bytes: int | None, chunk_size: int | None
) -> dict[str, Any]:
    """The ``config`` optimize records for numpy token items of ``dtype``.

    Raises:
        ValueError: a dtype outside litdata's numpy table (integers of 1 to 8 bytes).
    """
    code = _CODES.get(np.dtype(dtype).newbyteorder("<"))
    if code is None:
        raise ValueError(f"dtype {np.dtype(dtype).name} is not an integer dtype litdata stores")
    return {
        "chunk_bytes": chunk_bytes,
        "chunk_size": chunk_size,
        "compression": None,
        "compression_batch_size": None,
        "compression_level": None,
        "data_format": [f"no_header_numpy:{code}"],
        "data_spec": DATA_SPEC,
        "encryption": None,
        "ipc_compression": None,
        "item_loader": "TokensLoader",
        "types": "json",
    }


def write_index(folder: str, chunks: list[dict[str, Any]], config: dict[str, Any]) -> str:
    """Write ``index.json`` of ``chunks`` into ``folder``; returns its path."""
    path = os.path.join(folder, INDEX_NAME)
    record = {"chunks": chunks, "config": config, "updated_at": str(time.time())}
    with open(path, "w", encoding="utf-8") as fh:
        json.dump(record, fh, sort_keys=True)
    return path
