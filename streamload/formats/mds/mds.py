"""Mosaic Streaming MDS shards (FORMATS §8): ``format = "mds"``.

A folder holds ``index.json`` (version 2) and ``shard.NNNNN.mds`` files, or compressed
``shard.NNNNN.mds.zstd`` / ``.mds.gz`` ones. Each shard file is one streamload shard; each
sample is one document, whose tokens are the sample's token column (``column``, or the only
``ndarray``/``bytes`` column: :mod:`streamload.formats.mds._column` says which encodings are
read and which are refused). Other columns are not read.

The token column is scattered through the shard (each sample has its own header and other
columns), so each shard is decoded once — decompressed first when compressed — into a
contiguous token array in the disk cache (:mod:`streamload.formats.mds._cache`), keyed by the
file's sha256, and memory-mapped from there: reads then cost what a NumPy shard's cost. The
decoding happens when the shard is described (the token count needs every sample's header),
so with the catalog cache a warm start reads neither the shards nor their index.

Sniffing is by content: an ``index.json`` in the folder and either a zstd or gzip magic, or
an uncompressed header (``u32 n``, then offsets whose first lies past the ``4·(n + 2)``-byte
table by the size of the shard's JSON config). ``describe`` then requires the index to be an
MDS index listing the file, with the listed size.

A folder is listed in the order of its index's ``shards``, without the shards of 0 samples
and without the decompressed copies Streaming leaves beside compressed shards
(:mod:`streamload.formats.index_json`): ``MDSWriter`` writes an empty ``shard.00000.mds``
when the first sample passes its size limit, and no shard holding no tokens is described.

:class:`MdsWriter` writes what ``streamload convert --to mds`` publishes: a folder of
``MDSWriter``'s layout (:mod:`streamload.formats.mds.write`), one sample per document in a
``tokens`` column encoded ``ndarray:<dtype>`` (LLM Foundry's ``convert_dataset_hf
--concat_tokens`` column, which Streaming decodes to a numpy array).
"""

from __future__ import annotations

import os
import posixpath
import struct
from typing import Any

import numpy as np

from streamload.config.storage import default_cache_dir
from streamload.errors import ConfigError, FormatError
from streamload.formats._folder_writer import FolderWriter
from streamload.formats._mds_index import MdsIndex, MdsShardEntry, parse_mds_index
from streamload.formats._shard_masks import PendingMasks
from streamload.formats._writer_input import as_document, token_dtype
from streamload.formats.base import ListedFile, ReadOptions, ShardInfo
from streamload.formats.index_json import INDEX_NAME, load_index
from streamload.formats.mds._cache import decoded_key, load_decoded, save_decoded
from streamload.formats.mds._column import TokenColumn, token_column
from streamload.formats.mds._decode import DecodedShard, decode_shard
from streamload.formats.mds._read import (
    GZIP_MAGIC,
    ZSTD_MAGIC,
    content_sha256,
    decompress,
    read_listed,
    read_opened,
)
from streamload.formats.mds.write import (
    MDS_SIZE_LIMIT,
    MdsShards,
    encode_ndarray,
    ndarray_encoding,
)

__all__ = ["FORMAT", "FORMAT_NAME", "MDS_SIZE_LIMIT", "TOKEN_COLUMN", "MdsFormat", "MdsShard",
           "MdsWriter", "shard_entry"]  # fmt: skip

FORMAT_NAME = "mds"
TOKEN_COLUMN = "tokens"
"""The column :class:`MdsWriter` writes the tokens to (LLM Foundry's)."""
MAX_CONFIG_BYTES = 1 << 16
"""Most bytes of the JSON config between a shard's offset table and its first sample (real
ones are ~250 bytes); a larger gap is not sniffed as MDS."""


def _looks_like_shard(head: bytes) -> bool:
    if head.startswith((ZSTD_MAGIC, GZIP_MAGIC)):
        return True
    if len(head) < 8:
        return False
    count, first = struct.unpack_from("<II", head)
    table = 4 * (count + 2)
    return table < first <= table + MAX_CONFIG_BYTES


class MdsShard:
    """An opened MDS shard: its decoded tokens (mapped from the cache) and one document per
    sample."""

    remote_array = None
    """Always mapped (the decoded copy is local), so windows take the zero-copy gather."""

    def __init__(self, info: ShardInfo, decoded: DecodedShard) -> None:
        self.info = info
        self._tokens = decoded.tokens
        self._bounds = decoded.bounds

    def tokens(self, start: int, stop: int) -> np.ndarray:
        return self._tokens[start:stop]

    def document_bounds(self) -> np.ndarray:
        return self._bounds


def shard_entry(index: MdsIndex, file: ListedFile) -> tuple[MdsShardEntry, str | None]:
    """The file's index entry and its compression (``None``: the raw shard).

    Raises:
        FormatError: the index does not list the file, or lists another size for it.
    """
    name = posixpath.basename(file.path)
    entry = index.shards.get(name)
    if entry is None:
        raise FormatError(
            f"{file.path}: not listed in {index.path}; a shard of another dataset, or the index "
            "is from another run"
        )
    zipped = name == entry.zip_name
    expected = entry.zip_bytes if zipped else entry.raw_bytes
    if file.size != expected:
        raise FormatError(
            f"{file.path}: {file.size} bytes but {INDEX_NAME} says {expected} "
            f"(shards[{entry.number}]); the file is truncated or from another run"
        )
    # A decompressed copy beside a compressed shard (a folder Streaming has read) is the
    # same shard: the listing keeps one of them (formats/index_json.py).
    return entry, entry.compression if zipped else None


def _meta(entry: MdsShardEntry, col: TokenColumn, compression: str | None) -> dict[str, Any]:
    """What :meth:`MdsFormat.open` needs to decode the shard again without its index."""
    return {
        "samples": entry.samples,
        "raw_bytes": entry.raw_bytes,
        "compression": compression,
        "columns": list(entry.names),
        "encodings": list(entry.encodings),
        "sizes": list(entry.sizes),
        "column": col.name,
    }


def _decode(data: Any, meta: dict[str, Any], dtype: str, where: str) -> DecodedShard:
    entry = MdsShardEntry(
        0, "", int(meta["raw_bytes"]), None, None, meta["compression"], int(meta["samples"]),
        tuple(meta["columns"]), tuple(meta["encodings"]), tuple(meta["sizes"]),
    )  # fmt: skip
    col = token_column(entry, meta["column"], dtype, where)
    if meta["compression"] is not None:
        data = decompress(data, meta["compression"], entry.raw_bytes, where)
    return decode_shard(data, entry, col, where)


class MdsFormat:
    """Mosaic Streaming MDS shards: ``index.json`` + ``shard.NNNNN.mds[.zstd|.gz]``."""

    name = FORMAT_NAME
    has_documents = True

    def sniff(self, path: str, head: bytes, siblings: frozenset[str]) -> bool:
        return INDEX_NAME in siblings and _looks_like_shard(head)

    def describe(self, fs: Any, file: ListedFile, options: ReadOptions) -> ShardInfo:
        index: MdsIndex = load_index(fs, file.path, "MDS", parse_mds_index)
        entry, compression = shard_entry(index, file)
        col = token_column(entry, options.column, options.dtype, file.path)
        data = read_listed(fs, file.path, file.size)
        meta = _meta(entry, col, compression)
        decoded = _decode(data, meta, options.dtype, file.path)
        dtype = decoded.tokens.dtype
        meta["sha256"] = content_sha256(data)
        meta["key"] = decoded_key(meta["sha256"], col.name, col.encoding, col.position, dtype.str)
        meta["cache_root"] = options.cache_root or default_cache_dir()
        meta["num_documents"] = int(decoded.bounds.size - 1)
        _keep(meta, decoded)
        return ShardInfo(
            file.path, file.relpath, file.size, self.name, dtype.str, 0,
            int(decoded.tokens.size), meta=meta,
        )  # fmt: skip

    def open(self, info: ShardInfo) -> MdsShard:
        meta, dtype = info.meta, np.dtype(info.dtype)
        docs = int(meta["num_documents"])
        decoded = load_decoded(meta["cache_root"], meta["key"], dtype, info.num_tokens, docs)
        if decoded is None:  # not cached here (another machine, a cleared cache): decode again
            data = read_opened(info)
            if content_sha256(data) != meta["sha256"]:
                raise FormatError(f"{info.path}: its content changed since start-up")
            decoded = _decode(data, meta, dtype.str, info.path)
            save_decoded(meta["cache_root"], meta["key"], decoded)
        return MdsShard(info, decoded)


def _keep(meta: dict[str, Any], decoded: DecodedShard) -> None:
    """Write the decoded shard into the cache unless its entry is already there (a start-up
    after the first: the key covers the content, so the entry holds these very arrays)."""
    root, key = meta["cache_root"], meta["key"]
    docs = int(meta["num_documents"])
    if load_decoded(root, key, decoded.tokens.dtype, int(decoded.tokens.size), docs) is None:
        save_decoded(root, key, decoded)


class MdsWriter(FolderWriter):
    """Write documents as a Mosaic MDS dataset folder, one sample per document.

    The shards are ``MDSWriter(columns={column: "ndarray:<dtype>"}, compression=...,
    size_limit=...)``'s, byte for byte (:mod:`streamload.formats.mds.write`), and so is
    ``index.json`` (written last). The folder appears whole at :meth:`close`.

    Args:
        folder: The output folder; it must not exist, or be empty.
        dtype: Token dtype (an integer dtype of at most 8 bytes).
        column: Name of the token column.
        compression: ``None``, ``"zstd"`` or ``"zstd:LEVEL"`` (needs ``zstandard``).
        size_limit: Shard size limit in bytes (MDSWriter's default: 64 MiB).
        save_loss_masks: Write each shard's loss mask beside it (``shard.00000.mds.loss``;
            ``add_document(..., loss_mask=...)``).

    Raises:
        ValueError: a bad dtype, compression or size limit; ``zstandard`` missing.
        ConfigError: the folder exists and is not empty.
    """

    def __init__(
        self,
        folder: str | os.PathLike[str],
        dtype: Any,
        *,
        column: str = TOKEN_COLUMN,
        compression: str | None = None,
        size_limit: int | None = MDS_SIZE_LIMIT,
        save_loss_masks: bool = False,
    ) -> None:
        self._dtype = token_dtype(dtype, os.fspath(folder))
        columns = {column: ndarray_encoding(self._dtype)}
        MdsShards(os.fspath(folder), columns, compression=compression, size_limit=size_limit)
        inner = self._open_folder(folder)  # the arguments are checked: nothing to clean
        self._shards = MdsShards(inner, columns, compression=compression, size_limit=size_limit)
        self._column = column
        self._masks = PendingMasks(save_loss_masks)
        self._shards.on_shard = self._masks.write
        self._documents = 0

    def add_document(self, tokens: Any, *, loss_mask: Any = None) -> None:
        """Append one document as one sample (with ``save_loss_masks``, its loss mask).

        Raises:
            ConfigError: an empty document (an MDS ndarray cannot be empty).
            ValueError: not 1-D integer tokens fitting the dtype.
        """
        where = f"{self.folder}: document {self._documents}"
        doc = as_document(tokens, self._dtype, where)
        if doc.size == 0:
            raise ConfigError(
                "an empty document cannot be an MDS sample (Streaming's ndarray encoding "
                "refuses 0 elements); drop empty documents, or convert to another format"
            )
        self._shards.add({self._column: encode_ndarray(doc)})
        self._masks.add(loss_mask, doc, where)  # after add(): a full shard took the others
        self._documents += 1

    def _finish(self) -> None:
        self._shards.finish()


FORMAT = MdsFormat()
