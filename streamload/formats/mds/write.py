"""Write Mosaic MDS shards byte for byte as mosaicml-streaming's ``MDSWriter`` does.

:class:`MdsShards` is the layout (FORMATS §8, ``streaming/base/format/mds/writer.py``):

* the config of every shard is ``json.dumps({"column_encodings", "column_names",
  "column_sizes", "compression", "format": "mds", "hashes": [], "size_limit", "version": 2},
  sort_keys=True)``, with the columns sorted by name;
* a sample is a ``u32`` size per variable-size column, then each column's bytes;
* a shard is ``u32 n``, ``u32 offsets[n + 1]`` (absolute), the config, the samples;
* a sample goes into a new shard when ``size_limit < 8 + len(config) + Σ (len(sample) + 4)``
  with it, so a shard is at most ``size_limit`` bytes unless one sample alone is larger
  (one difference: when the very first sample is larger than the limit, MDSWriter first
  writes an empty ``shard.00000.mds``, which streamload does not: it holds no samples, the
  listing skips it, and the samples are the same);
* with ``compression`` (``zstd`` or ``zstd:LEVEL``, level 3 by default, as Streaming's
  ``zstd.compress``) the file is ``shard.NNNNN.mds.zstd`` and the index lists both sizes;
* ``index.json`` is ``json.dump({"shards": [...], "version": 2}, sort_keys=True)``, each
  entry the shard's config with ``samples``, ``raw_data`` and ``zip_data`` (no hashes).

:func:`encode_ndarray` is Streaming's ``NDArray`` encoding of a 1-D array with a dynamic
shape (``ndarray:<dtype>``): byte ``ndim << 2 | w``, the length as the smallest unsigned
integer of ``2**w`` bytes that holds it, then the values. It refuses an empty array, as
``NDArray.encode`` does.

Example (one ``tokens: ndarray:uint16`` column, document ``[7, 8, 9, 0]``): the sample is
``0d000000`` (13 bytes follow), ``04`` (1-D, u8 length), ``04``, ``0700 0800 0900 0000``.
"""

from __future__ import annotations

import json
import os
from typing import Any

import numpy as np

from streamload.formats.index_json import INDEX_NAME

__all__ = [
    "MDS_SIZE_LIMIT",
    "MdsShards",
    "encode_ndarray",
    "ndarray_encoding",
    "zstd_level",
]

MDS_SIZE_LIMIT = 1 << 26
"""``MDSWriter``'s default ``size_limit``: shards of at most 64 MiB."""
MAX_SHARD_BYTES = (1 << 32) - 1
"""Sample offsets are ``u32``: no shard may be larger."""
_SHAPE_WIDTHS = ((1 << 8, "<u1"), (1 << 16, "<u2"), (1 << 32, "<u4"), (1 << 64, "<u8"))
"""``NDArray``'s shape dtypes by code (0..3): the first whose range holds the length."""
DEFAULT_ZSTD_LEVEL = 3
"""Streaming's ``Zstandard`` level when the compression names none."""


def ndarray_encoding(dtype: np.dtype) -> str:
    """``ndarray:<dtype>`` of an integer dtype (``ndarray:uint16``)."""
    return f"ndarray:{np.dtype(dtype).name}"


def encode_ndarray(values: np.ndarray) -> bytes:
    """``NDArray`` bytes of a non-empty 1-D array (module docstring), little-endian.

    Raises:
        ValueError: an empty array (Streaming cannot encode one either).
    """
    count = int(values.shape[0])
    if count == 0:
        raise ValueError("an MDS ndarray column cannot hold an empty array")
    code = next(i for i, (limit, _) in enumerate(_SHAPE_WIDTHS) if count < limit)
    head = bytes([1 << 2 | code]) + np.array([count], _SHAPE_WIDTHS[code][1]).tobytes()
    return head + values.astype(values.dtype.newbyteorder("<"), copy=False).tobytes()


def zstd_level(compression: str | None) -> int | None:
    """The zstd level of a ``compression`` (``None``: uncompressed).

    Raises:
        ValueError: anything but ``None``, ``"zstd"`` or ``"zstd:LEVEL"`` (1..22).
    """
    if compression is None:
        return None
    name, _, level = compression.partition(":")
    if name == "zstd" and not level:
        return DEFAULT_ZSTD_LEVEL
    if name == "zstd" and level.isdigit() and 1 <= int(level) <= 22 and level[0] != "0":
        return int(level)
    raise ValueError(
        f"compression {compression!r} is not written; expected none, 'zstd' or 'zstd:LEVEL' "
        "(LEVEL 1..22)"
    )


def _zstd_compressor(level: int) -> Any:
    try:
        import zstandard
    except ImportError:
        raise ValueError(
            "zstd-compressed MDS shards need the zstandard package: pip install 'streamload[mds]'"
        ) from None
    return zstandard.ZstdCompressor(level=level)


class MdsShards:
    """Samples into ``shard.NNNNN.mds[.zstd]`` files and an ``index.json`` (module docstring).

    Args:
        folder: An existing folder to write into.
        columns: Column name → encoding; variable-size encodings only (``str``, ``bytes``,
            ``ndarray:<dtype>``), as MDSWriter's ``columns``.
        compression: ``None``, ``"zstd"`` or ``"zstd:LEVEL"``.
        size_limit: Shard size limit in bytes (``None``: one shard).

    Attributes:
        files: The shard files written so far, in order.
        on_shard: Called with each shard file's path once it is written.
    """

    def __init__(
        self,
        folder: str,
        columns: dict[str, str],
        *,
        compression: str | None = None,
        size_limit: int | None = MDS_SIZE_LIMIT,
    ) -> None:
        if size_limit is not None and not 0 < size_limit <= MAX_SHARD_BYTES:
            raise ValueError(f"{folder}: size_limit {size_limit} must be in 1..{MAX_SHARD_BYTES}")
        level = zstd_level(compression)
        self.folder = folder
        self.names = sorted(columns)
        self._compressor = None if level is None else _zstd_compressor(level)
        self._config: dict[str, Any] = {
            "column_encodings": [columns[n] for n in self.names],
            "column_names": self.names,
            "column_sizes": [None] * len(self.names),
            "compression": compression,
            "format": "mds",
            "hashes": [],
            "size_limit": size_limit,
            "version": 2,
        }
        self._config_data = json.dumps(self._config, sort_keys=True).encode("utf-8")
        self._limit = size_limit
        self._entries: list[dict[str, Any]] = []
        self._samples: list[bytes] = []
        self._size = 8 + len(self._config_data)
        self.files: list[str] = []
        self.on_shard: Any = None

    def add(self, values: dict[str, bytes]) -> None:
        """Append one sample: each column's encoded bytes (all columns given).

        Raises:
            ValueError: a missing column, or a sample whose shard would pass 4 GiB.
        """
        missing = sorted(set(self.names) - set(values))
        if missing:
            raise ValueError(f"{self.folder}: a sample without column(s) {missing}")
        data = [values[n] for n in self.names]
        sample = np.array([len(d) for d in data], "<u4").tobytes() + b"".join(data)
        grows = len(sample) + 4
        if self._samples and self._limit is not None and self._limit < self._size + grows:
            self._flush()
        if self._size + grows > MAX_SHARD_BYTES:
            raise ValueError(
                f"{self.folder}: a sample of {len(sample)} bytes does not fit an MDS shard "
                f"(u32 offsets: at most {MAX_SHARD_BYTES} bytes)"
            )
        self._samples.append(sample)
        self._size += grows

    def _flush(self) -> None:
        """Write the buffered samples as the next shard."""
        sizes = np.array([len(s) for s in self._samples], dtype=np.int64)
        head = 4 + 4 * (sizes.size + 1) + len(self._config_data)
        offsets = np.concatenate([[0], np.cumsum(sizes)]) + head
        raw = b"".join(
            [np.array([sizes.size], "<u4").tobytes(), offsets.astype("<u4").tobytes(),
             self._config_data, *self._samples]
        )  # fmt: skip
        raw_name = f"shard.{len(self._entries):05d}.mds"
        entry = {"samples": int(sizes.size), **self._config}
        entry["raw_data"] = {"basename": raw_name, "bytes": len(raw), "hashes": {}}
        entry["zip_data"], data, name = None, raw, raw_name
        if self._compressor is not None:
            data, name = self._compressor.compress(raw), raw_name + ".zstd"
            entry["zip_data"] = {"basename": name, "bytes": len(data), "hashes": {}}
        path = os.path.join(self.folder, name)
        with open(path, "wb") as fh:
            fh.write(data)
        self._entries.append(entry)
        self.files.append(path)
        self._samples, self._size = [], 8 + len(self._config_data)
        if self.on_shard is not None:
            self.on_shard(path)

    def finish(self) -> str:
        """Write the last shard and ``index.json``; returns the index path."""
        if self._samples:
            self._flush()
        path = os.path.join(self.folder, INDEX_NAME)
        with open(path, "w", encoding="utf-8") as fh:
            json.dump({"shards": self._entries, "version": 2}, fh, sort_keys=True)
        return path
