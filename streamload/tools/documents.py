"""Documents of a shard in storage order, whatever the format records.

Three sources of truth, in order: the format's document index (Megatron ``document_indices``,
Dolma CSV, datatrove ``.ds.index``, Modalities pickle), else an EOS token (a document ends
after each EOS; a trailing partial document counts), else the whole shard is one document.
Token data is streamed in blocks, so memory stays bounded on any shard size.

Per-document metadata (:func:`document_metadata`) is what a format records beside its
documents: Dolma's CSV ``id``/``src``/``loc``, an Arrow or Parquet row's scalar columns (its
``id`` column, or the column a source names, first as ``id``), read only for the documents
asked for.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np

from streamload.errors import ConfigError
from streamload.formats.base import TokenShard
from streamload.formats.documents import BLOCK_TOKENS, document_bounds

__all__ = [
    "BLOCK_TOKENS",
    "PENDING_LENGTHS",
    "SHOWN_CHARS",
    "LengthCounts",
    "TokenStats",
    "count_documents",
    "document_bounds",
    "document_metadata",
    "iter_documents",
    "scan_tokens",
    "short_value",
]


def count_documents(shard: TokenShard, eos_token_id: int) -> int:
    """How many documents ``document_bounds(shard, eos_token_id)`` splits an index-less shard
    into, without building the bounds: one per EOS plus a trailing partial document.

    Streams ``BLOCK_TOKENS`` tokens at a time (one vectorized comparison per block), so
    memory stays bounded whatever the shard size or document count.
    """
    total = shard.info.num_tokens
    if total == 0:
        return 0
    count = 0
    for start in range(0, total, BLOCK_TOKENS):
        block = np.asarray(shard.tokens(start, min(total, start + BLOCK_TOKENS)))
        count += int(np.count_nonzero(block == eos_token_id))
    last = int(np.asarray(shard.tokens(total - 1, total))[0])
    return count + (last != eos_token_id)


def iter_documents(shard: TokenShard, bounds: np.ndarray, start: int = 0) -> Iterator[np.ndarray]:
    """Yield documents ``start, start+1, …`` of a shard as zero-copy token arrays."""
    for i in range(start, len(bounds) - 1):
        yield shard.tokens(int(bounds[i]), int(bounds[i + 1]))


_ID_COLUMN_FORMATS = ("arrow", "parquet")
"""Formats whose documents' id column may be named (``id_column``)."""


def document_metadata(
    shard: TokenShard, index: int, id_column: str | None = None
) -> dict[str, Any] | None:
    """The fields the format records for document ``index`` of ``shard`` (``None`` when it
    records none): Dolma's ``{"id", "src", "loc"}``; an Arrow or Parquet row's ``id`` (the
    ``id_column`` value, default the ``id`` column's) first, then its other scalar columns
    by name (:mod:`~streamload.formats.arrow._metadata`; ``{}`` without any).

    Raises:
        ConfigError: ``id_column`` named for a format without id columns.
        FormatError: the file has no column ``id_column``.
    """
    read = getattr(shard, "document_metadata", None)
    if id_column is not None and shard.info.format not in _ID_COLUMN_FORMATS:
        raise ConfigError(
            f"{shard.info.path}: id_column = {id_column!r} applies to Arrow and Parquet "
            f"files; this one is {shard.info.format}"
        )
    if not callable(read):
        return None
    fields: dict[str, Any] = read(index) if id_column is None else read(index, id_column)
    return fields


PENDING_LENGTHS = 1 << 20
"""Lengths a :class:`LengthCounts` holds before merging them into its tally (8 MiB)."""


class LengthCounts:
    """How many documents have each length, tallied shard by shard.

    Memory follows the distinct lengths, not the documents: added lengths wait in a buffer
    of about :data:`PENDING_LENGTHS` and are then merged into the tally with one sort of
    both (merging per buffer, not per add, keeps the cost near one sort of every length).
    """

    def __init__(self) -> None:
        self._lengths = np.zeros(0, dtype=np.int64)
        self._counts = np.zeros(0, dtype=np.int64)
        self._pending: list[np.ndarray] = []
        self._pending_size = 0

    def add(self, lengths: np.ndarray) -> None:
        """Count one document of each of ``lengths`` (copied: a mapped view stays unheld)."""
        self._pending.append(np.array(lengths, dtype=np.int64))
        self._pending_size += self._pending[-1].size
        if self._pending_size >= PENDING_LENGTHS:
            self._merge()

    def counts(self) -> tuple[np.ndarray, np.ndarray]:
        """The distinct lengths (ascending, int64) and the documents of each (int64)."""
        self._merge()
        return self._lengths, self._counts

    def _merge(self) -> None:
        if not self._pending:
            return
        pending = np.concatenate(self._pending)
        lengths, inverse = np.unique(np.concatenate([self._lengths, pending]), return_inverse=True)
        weights = np.concatenate([self._counts, np.ones(pending.size, dtype=np.int64)])
        # float weights count exactly below 2**53 documents
        self._counts = np.bincount(inverse, weights=weights, minlength=lengths.size).astype(
            np.int64
        )
        self._lengths, self._pending, self._pending_size = lengths, [], 0


@dataclass
class TokenStats:
    """What one streaming pass over a shard's tokens found."""

    num_tokens: int = 0
    min_id: int | None = None
    max_id: int | None = None
    eos_count: int = 0
    zero_tail: int = 0


def scan_tokens(shard: TokenShard, eos_token_id: int | None = None) -> TokenStats:
    """One vectorized pass over all tokens: id range, EOS count, length of the zero tail."""
    stats = TokenStats(num_tokens=shard.info.num_tokens)
    total = stats.num_tokens
    signed = np.dtype(shard.info.dtype).kind == "i"
    for start in range(0, total, BLOCK_TOKENS):
        block = np.asarray(shard.tokens(start, min(total, start + BLOCK_TOKENS)))
        hi = int(block.max())
        lo = int(block.min()) if signed else 0
        stats.min_id = lo if stats.min_id is None else min(stats.min_id, lo)
        stats.max_id = hi if stats.max_id is None else max(stats.max_id, hi)
        if eos_token_id is not None:
            stats.eos_count += int(np.count_nonzero(block == eos_token_id))
        tail = _zero_run(block)
        stats.zero_tail = stats.zero_tail + tail if tail == block.size else tail
    return stats


def _zero_run(block: np.ndarray) -> int:
    """Length of the run of 0 tokens at the end of ``block`` (cheap when it ends non-zero)."""
    end = block.size
    step = 4096
    while end > 0:
        piece = block[max(0, end - step) : end]
        nonzero = np.flatnonzero(piece)
        if nonzero.size:
            return block.size - (end - piece.size + int(nonzero[-1]) + 1)
        end -= piece.size
        step *= 4
    return block.size


SHOWN_CHARS = 60
"""A metadata value is cut to this many characters in text output (JSON keeps it whole)."""


def short_value(value: Any) -> str:
    """``value`` on one line (line breaks and tabs escaped), cut to :data:`SHOWN_CHARS`."""
    text = str(value).replace("\r", "\\r").replace("\n", "\\n").replace("\t", "\\t")
    if len(text) <= SHOWN_CHARS:
        return text
    return f"{text[: SHOWN_CHARS - 1]}…"
