"""A source's described shards as a table: columns for what start-up needs of every shard,
one record per shard decoded only when that shard is asked for.

A corpus of 10⁵ shards must start in well under a second, so nothing at start-up may build a
Python object per shard. The table keeps, as arrays, what the stream needs of all shards at
once (token counts, hence the stream offsets) and, as facts, what it needs of their set
(dtypes, formats, whether any is remote or has a loss mask, the data fingerprint); a shard's
whole :class:`~streamload.formats.base.ShardInfo` is decoded from its record when it is
opened, printed or checked. A table read from the catalog cache maps its arrays
(:mod:`streamload.catalog.store`), so every rank and worker of a machine shares one copy, and
pickles as the paths of those files (a worker process maps them again).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from collections.abc import Callable, Iterator, Sequence
from typing import Any, overload

import numpy as np

from streamload.errors import FormatError
from streamload.formats.base import ShardInfo
from streamload.remote.handle import StorageHandle

__all__ = [
    "RECORD_FIELDS",
    "ShardTable",
    "TableFacts",
    "documents_of",
    "files_digest",
    "fingerprint_of",
    "record_of",
    "shard_identity",
]

RECORD_FIELDS = tuple(f.name for f in dataclasses.fields(ShardInfo) if f.name != "storage")
"""What a shard's record keeps: all it was described with but its storage handle (one per
source, bound when the record is decoded)."""


def record_of(info: ShardInfo) -> bytes:
    """A shard's record: its fields as compact JSON (UTF-8)."""
    fields = {name: getattr(info, name) for name in RECORD_FIELDS}
    return json.dumps(fields, separators=(",", ":")).encode()


def shard_identity(info: ShardInfo) -> list[Any]:
    """What names one shard's content: path, bytes, tokens, dtype, format, and the listed
    versions of the token file and of the files beside it that share its stem (its index):
    the part of a plan's or document cache's key for that shard."""
    companions = sorted(info.companions.items())
    return [info.path, info.size, info.num_tokens, info.dtype, info.format, info.version,
            companions]  # fmt: skip


def files_digest(shards: Sequence[ShardInfo]) -> str:
    """sha256 over :func:`shard_identity` of every shard, in order (a plan's key names its
    source's files by it)."""
    digest = hashlib.sha256()
    for info in shards:
        digest.update((json.dumps(shard_identity(info)) + "\n").encode())
    return digest.hexdigest()


def documents_of(info: ShardInfo) -> int:
    """A shard's document count as its description records it (``-1``: not recorded; the
    index says, when opened)."""
    for key in ("num_documents", "documents"):  # Megatron's header names it "documents"
        value = info.meta.get(key)
        if isinstance(value, int) and not isinstance(value, bool):
            return value
    return -1


def fingerprint_of(shards: Sequence[ShardInfo]) -> str:
    """sha256 over (relative path, bytes, tokens, dtype) of every shard, in order, and for
    shards tokenized on the fly (jsonl) the sha256 of file and tokenizer, BOS/EOS, field."""
    digest = hashlib.sha256()
    for s in shards:
        digest.update(f"{s.relpath}\0{s.size}\0{s.num_tokens}\0{s.dtype}\n".encode())
        if "tokenizer_sha256" in s.meta:
            keys = ("tokenizer_sha256", "bos", "eos", "text_field", "jsonl_sha256")
            digest.update(("\0".join(str(s.meta.get(k)) for k in keys) + "\n").encode())
    return digest.hexdigest()


@dataclasses.dataclass(frozen=True)
class TableFacts:
    """What start-up needs of a table's shards as a set.

    Attributes:
        fingerprint: :func:`fingerprint_of` the shards.
        dtypes: Each token dtype (numpy string, byte order included), in first-seen order.
        formats: Each format name, in first-seen order.
        masked: How many shards have a loss mask.
        versioned: Whether every shard has a listed version.
        indexed: Whether every shard has a document index file.
        files_sha256: :func:`files_digest` of the shards.
    """

    fingerprint: str
    dtypes: tuple[str, ...]
    formats: tuple[str, ...]
    masked: int
    versioned: bool
    indexed: bool
    files_sha256: str

    @classmethod
    def of(cls, shards: Sequence[ShardInfo]) -> TableFacts:
        """The facts of described shards (a pass over them)."""
        return cls(
            fingerprint=fingerprint_of(shards),
            dtypes=tuple(dict.fromkeys(s.dtype for s in shards)),
            formats=tuple(dict.fromkeys(s.format for s in shards)),
            masked=sum(s.loss_mask is not None for s in shards),
            versioned=all(s.version for s in shards),
            indexed=all(s.index_path for s in shards),
            files_sha256=files_digest(shards),
        )


_RECENT = 4096
"""Decoded records a table keeps (a ShardInfo is a few hundred bytes)."""


class ShardTable(Sequence[ShardInfo]):
    """The described shards of a source, in stream order (a read-only sequence).

    Args:
        num_tokens: Token count per shard (int64).
        facts: What is known of the shards as a set.
        decode: Shard ``i``'s :class:`~streamload.formats.base.ShardInfo` (called per access;
            a table built from ShardInfo objects returns them).
        storage: The handle remote shards are read through (bound as records are decoded);
            ``None`` keeps what ``decode`` gives.
        origin: How to make the table again in another process (what ``__reduce__``
            returns: the catalog cache's files to map, or a view's base), or ``None``: its
            records are pickled.
        forget: Removes the cache entry the table was read from (:meth:`forget`).
        documents: Each shard's recorded document count (:func:`documents_of`), if known.
    """

    def __init__(
        self,
        num_tokens: np.ndarray,
        facts: TableFacts,
        decode: Callable[[int], ShardInfo],
        storage: Any = None,
        origin: Any = None,
        forget: Callable[[], None] | None = None,
        documents: np.ndarray | None = None,
    ) -> None:
        self.num_tokens = num_tokens
        self._documents = documents
        self.facts = facts
        self._decode = decode
        self.storage = storage
        self.origin = origin
        self._forget = forget
        self._recent: dict[int, ShardInfo] = {}  # decoded records, bounded (_RECENT)

    @property
    def num_documents(self) -> np.ndarray:
        """int64 document count per shard as described (``-1`` where the description
        records none: the shard's index tells, when opened)."""
        if self._documents is None:
            self._documents = np.fromiter(
                (documents_of(s) for s in self), dtype=np.int64, count=len(self)
            )
        return self._documents

    def forget(self) -> None:
        """Remove the catalog entry the table was read from (its data changed), so that the
        next start describes the source again; a no-op for a table not read from the cache."""
        if self._forget is not None:
            self._forget()

    @classmethod
    def of(cls, shards: Sequence[ShardInfo], facts: TableFacts | None = None) -> ShardTable:
        """A table of described shards held in memory (small corpora, fresh descriptions)."""
        if isinstance(shards, ShardTable):
            return shards
        infos = tuple(shards)
        counts = np.fromiter((s.num_tokens for s in infos), dtype=np.int64, count=len(infos))
        return cls(counts, facts or TableFacts.of(infos), infos.__getitem__)

    def __len__(self) -> int:
        return int(self.num_tokens.shape[0])

    @overload
    def __getitem__(self, index: int) -> ShardInfo: ...

    @overload
    def __getitem__(self, index: slice) -> tuple[ShardInfo, ...]: ...

    def __getitem__(self, index: int | slice) -> ShardInfo | tuple[ShardInfo, ...]:
        if isinstance(index, slice):
            return tuple(self[i] for i in range(*index.indices(len(self))))
        count = len(self)
        if not -count <= index < count:
            raise IndexError(f"shard {index} of {count}")
        index %= count
        info = self._recent.get(index)
        if info is None:  # a shard reopened chunk after chunk decodes its record once
            info = self._decode(index)
            if self.storage is not None and info.storage is not self.storage:
                info = dataclasses.replace(info, storage=self.storage)
            if len(self._recent) >= _RECENT:
                self._recent.clear()
            self._recent[index] = info
        return info

    def __iter__(self) -> Iterator[ShardInfo]:
        return (self[i] for i in range(len(self)))

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Sequence) or isinstance(other, str):
            return NotImplemented
        return len(self) == len(other) and all(a == b for a, b in zip(self, other, strict=True))

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"ShardTable({len(self)} shards, {int(self.num_tokens.sum())} tokens)"

    @property
    def remote(self) -> bool:
        """Whether the shards are read through remote storage (a source's shards are all
        local or all remote: one storage per source)."""
        return len(self) > 0 and self[0].is_remote

    def with_storage(self, storage: Any) -> ShardTable:
        """The same shards read through ``storage`` (a handle)."""
        return ShardTable(
            self.num_tokens,
            self.facts,
            self._decode,
            storage,
            self.origin,
            self._forget,
            self._documents,
        )

    def read_with(self, storage: Any) -> ShardTable:
        """The same shards read with the fetching options ``storage`` (a
        :class:`~streamload.config.storage.StorageConfig`, or ``None``: as described)."""
        if storage is None or not self.remote:
            return self
        handle = self[0].storage
        if handle is None or handle.config == storage:
            return self
        return self.with_storage(
            StorageHandle(handle.protocol, handle.options, storage, handle.on_error)
        )

    def common_dtype(self) -> np.dtype:
        """The narrowest integer dtype holding every shard's tokens (uint16 + uint32 → uint32).

        Raises:
            FormatError: no integer dtype holds them all (naming a shard of each).
        """
        dtypes = sorted({np.dtype(d).newbyteorder("=") for d in self.facts.dtypes}, key=str)
        common = np.result_type(*dtypes)
        if common.kind in "ui":
            return common
        first: dict[np.dtype, str] = {}
        for info in self:
            first.setdefault(np.dtype(info.dtype).newbyteorder("="), info.path)
        found = ", ".join(f"{d.name} ({first[d]})" for d in dtypes)
        raise FormatError(
            f"shards of one source hold token dtypes no integer dtype can hold together: {found}"
        )

    def mapped(self, view: Callable[[ShardInfo], ShardInfo], facts: TableFacts) -> ShardTable:
        """A table of ``view(shard)`` for each shard (same token counts), with ``facts``."""
        return _viewed(self, view, facts)

    def __reduce__(self) -> tuple[Any, ...]:
        if self.origin is not None:  # mapped from the cache or a view: rebuilt from its parts
            return (_rebuilt, (self.origin, self.storage))
        return (_rebuilt, ((ShardTable.of, (tuple(self), self.facts)), self.storage))


def _rebuilt(origin: tuple[Any, tuple[Any, ...]], storage: Any) -> ShardTable:
    table: ShardTable = origin[0](*origin[1])
    return table if storage is None else table.with_storage(storage)


def _viewed(
    base: ShardTable, view: Callable[[ShardInfo], ShardInfo], facts: TableFacts
) -> ShardTable:
    def decode(index: int) -> ShardInfo:
        return view(base[index])

    return ShardTable(base.num_tokens, facts, decode, None, (_viewed, (base, view, facts)))
