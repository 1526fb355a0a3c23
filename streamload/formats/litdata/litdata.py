"""LitData chunks written by ``litdata.optimize(..., item_loader=TokensLoader())`` (FORMATS §7):
``format = "litdata"``.

A folder holds ``index.json`` and ``chunk-{rank}-{i}.bin`` files. A chunk is
``u32 N``, ``u32 offsets[N + 1]`` (absolute byte offsets, ``offsets[0] = 4·(N + 2)``), then
the N items back to back, each a raw token array without a header. So a chunk's tokens are
one contiguous array at byte ``4·(N + 2)``: each chunk is one shard, memory-mapped (or read by
range when remote) exactly like a NumPy shard, and a folder is one token stream, its chunks
in the order of the index's ``chunks`` (:mod:`streamload.formats.index_json`; names sort
``chunk-0-10.bin`` before ``chunk-0-2.bin``).

Documents: ``TokensLoader`` ignores item boundaries (its blocks run across items) and so does
streamload: like a NumPy folder, documents are found at ``eos_token_id`` (put the EOS in the
items when optimizing, as litgpt does). Reading with ``TokensLoader(block_size = seq_len + 1)``
means windows of ``seq_len + 1`` tokens at stride ``seq_len + 1`` that never cross a chunk;
streamload carves its own windows (``sampling.cross_shard = false`` keeps them inside a
chunk).

Sniffing is by content: an ``index.json`` in the folder and a chunk header whose first offset
is ``4·(N + 2)`` (an MDS shard's is larger: its JSON config sits between). ``describe``
checks the file against the index (listed, size, item count, token count, dtype) and every
item offset of the header.

:class:`LitdataWriter` writes what ``streamload convert --to litdata`` publishes: what
``litdata.optimize(..., item_loader=TokensLoader())`` writes for one numpy token array per
document (:mod:`streamload.formats.litdata._write`), the documents concatenated as they are.
"""

from __future__ import annotations

import os
import struct
from typing import Any

import numpy as np

from streamload.errors import FormatError
from streamload.formats._folder_writer import FolderWriter
from streamload.formats._litdata_index import LitdataChunk, LitdataIndex, parse_litdata_index
from streamload.formats._shard_masks import PendingMasks
from streamload.formats._writer_input import as_document, token_dtype
from streamload.formats.base import (
    ListedFile,
    MemmapShard,
    ReadOptions,
    ShardInfo,
    TokenShard,
    check_configured_dtype,
    open_head,
)
from streamload.formats.index_json import INDEX_NAME, load_index
from streamload.formats.litdata._write import (
    DEFAULT_CHUNK_BYTES,
    chunk_name,
    encode_chunk,
    index_config,
    write_index,
)

__all__ = [
    "DEFAULT_CHUNK_BYTES",
    "FORMAT",
    "FORMAT_NAME",
    "LitdataFormat",
    "LitdataWriter",
    "check_chunk_header",
]

FORMAT_NAME = "litdata"


def _header_looks_like_chunk(head: bytes) -> bool:
    if len(head) < 8:
        return False
    count, first = struct.unpack_from("<II", head)
    if first != 4 * (count + 2):
        return False
    return len(head) < 12 or struct.unpack_from("<I", head, 8)[0] >= first


def check_chunk_header(header: bytes, chunk: LitdataChunk, itemsize: int, path: str) -> None:
    """Check a chunk's ``4·(N + 2)`` header bytes against its index entry.

    Raises:
        FormatError: another item count, offsets that do not start after the header,
            decrease, end elsewhere than the file's end, or cut a token in two.
    """
    (count,) = struct.unpack_from("<I", header)
    if count != chunk.items:
        raise FormatError(
            f"{path}: header says {count} items but {INDEX_NAME} says chunk_size "
            f"{chunk.items}; the chunk or the index comes from another run"
        )
    offsets = np.frombuffer(header, dtype="<u4", count=count + 1, offset=4).astype(np.int64)
    sizes = np.diff(offsets)
    checks = (
        (offsets[0] == len(header), f"offsets[0] is {offsets[0]}, expected {len(header)}"),
        (not (sizes < 0).any(), "its item offsets decrease"),
        (offsets[-1] == chunk.nbytes, f"its items end at byte {offsets[-1]}"),
        (not (sizes % itemsize).any(), f"an item is not a whole number of {itemsize}-byte tokens"),
    )  # fmt: skip
    for ok, problem in checks:
        if not ok:
            raise FormatError(
                f"{path}: {problem}; expected a TokensLoader chunk of {count} items ending at "
                f"byte {chunk.nbytes} (the file is damaged)"
            )


class LitdataFormat:
    """LitData ``TokensLoader`` chunks: ``index.json`` + ``chunk-*.bin``."""

    name = FORMAT_NAME
    has_documents = False

    def sniff(self, path: str, head: bytes, siblings: frozenset[str]) -> bool:
        return INDEX_NAME in siblings and _header_looks_like_chunk(head)

    def describe(self, fs: Any, file: ListedFile, options: ReadOptions) -> ShardInfo:
        index: LitdataIndex = load_index(fs, file.path, "LitData", parse_litdata_index)
        chunk = _listed_chunk(index, file)
        dtype = index.dtype
        what = f"{INDEX_NAME} says data_format {index.data_format!r} ({dtype.name} tokens)"
        check_configured_dtype(options.dtype, dtype, file.path, what)
        offset = 4 * (chunk.items + 2)
        expected = offset + chunk.tokens * dtype.itemsize
        if file.size != expected or chunk.nbytes != expected:
            state = "truncated" if file.size < expected else "not what the index describes"
            state += " (or the index comes from another run)"
            raise FormatError(
                f"{file.path}: {file.size} bytes, but {INDEX_NAME} says {chunk.items} items of "
                f"{chunk.tokens} {dtype.name} tokens ({expected} bytes with the header; "
                f"chunk_bytes {chunk.nbytes}); the file is {state}"
            )
        with open_head(fs, file.path) as fh:
            header = fh.read(offset)
        if len(header) != offset:
            raise FormatError(f"{file.path}: the file ends inside its {offset}-byte header")
        check_chunk_header(header, chunk, dtype.itemsize, file.path)
        meta = {"num_items": chunk.items}
        return ShardInfo(
            file.path, file.relpath, file.size, self.name, dtype.str, offset, chunk.tokens,
            meta=meta,
        )  # fmt: skip

    def open(self, info: ShardInfo) -> TokenShard:
        return MemmapShard(info)


def _listed_chunk(index: LitdataIndex, file: ListedFile) -> LitdataChunk:
    name = file.path.rsplit("/", 1)[-1]
    chunk = index.chunks.get(name)
    if chunk is None:
        raise FormatError(
            f"{file.path}: not listed in the {INDEX_NAME} beside it ({len(index.chunks)} "
            "chunks); a chunk of another dataset, or the index is from another run"
        )
    return chunk


class LitdataWriter(FolderWriter):
    """Write documents as a LitData ``TokensLoader`` folder: ``chunk-0-N.bin`` + ``index.json``.

    Each non-empty document is one item; items fill a chunk up to ``chunk_bytes`` bytes of
    tokens, or ``chunk_size`` tokens (one of them; :mod:`streamload.formats.litdata._write`
    states litdata's rule), and ``index.json`` is written last. The folder appears whole at
    :meth:`close`.

    Args:
        folder: The output folder; it must not exist, or be empty.
        dtype: Token dtype (an integer dtype of at most 8 bytes).
        chunk_bytes: Bytes of tokens per chunk (default :data:`DEFAULT_CHUNK_BYTES` when
            ``chunk_size`` is not given either).
        chunk_size: Tokens per chunk, instead of ``chunk_bytes``.
        save_loss_masks: Write each chunk's loss mask beside it (``chunk-0-0.bin.loss``).

    Raises:
        ValueError: a bad dtype, both limits, or a limit below 1.
        ConfigError: the folder exists and is not empty.
    """

    def __init__(
        self,
        folder: str | os.PathLike[str],
        dtype: Any,
        *,
        chunk_bytes: int | None = None,
        chunk_size: int | None = None,
        save_loss_masks: bool = False,
    ) -> None:
        self._dtype = token_dtype(dtype, os.fspath(folder))
        if chunk_bytes is None and chunk_size is None:
            chunk_bytes = DEFAULT_CHUNK_BYTES
        given = [v for v in (chunk_bytes, chunk_size) if v is not None]
        if len(given) != 1 or given[0] < 1:
            raise ValueError(
                f"{os.fspath(folder)}: give chunk_bytes or chunk_size (>= 1), not both: got "
                f"{chunk_bytes} and {chunk_size}"
            )
        self._config = index_config(self._dtype, chunk_bytes, chunk_size)
        self._limit = (chunk_bytes, chunk_size)
        self._inner = self._open_folder(folder)
        self._masks = PendingMasks(save_loss_masks)
        self._items: list[np.ndarray] = []
        self._bytes = self._tokens = 0  # of the items not yet written
        self._chunks: list[dict[str, Any]] = []
        self._documents = 0

    def add_document(self, tokens: Any, *, loss_mask: Any = None) -> None:
        """Append one document's tokens to the stream (an empty one adds nothing)."""
        where = f"{self.folder}: document {self._documents}"
        doc = as_document(tokens, self._dtype, where)
        self._documents += 1
        if doc.size == 0:
            return
        max_bytes, max_tokens = self._limit
        if self._items and (
            (max_bytes is not None and self._bytes + doc.nbytes > max_bytes)
            or (max_tokens is not None and self._tokens + doc.size > max_tokens)
        ):
            self._write_chunk()
        self._items.append(doc)
        self._bytes += doc.nbytes
        self._tokens += doc.size
        self._masks.add(loss_mask, doc, where)  # after a full chunk took the others

    def _write_chunk(self) -> None:
        name = chunk_name(len(self._chunks))
        data = encode_chunk(self._items)
        path = os.path.join(self._inner, name)
        with open(path, "wb") as fh:
            fh.write(data)
        self._chunks.append(
            {"chunk_bytes": len(data), "chunk_size": len(self._items), "dim": self._tokens,
             "filename": name}
        )  # fmt: skip
        self._masks.write(path)
        self._items, self._bytes, self._tokens = [], 0, 0

    def _finish(self) -> None:
        if self._items:
            self._write_chunk()
        write_index(self._inner, self._chunks, self._config)


FORMAT = LitdataFormat()
