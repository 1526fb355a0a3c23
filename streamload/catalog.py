"""Start-up description of a source: its shards, their headers, and a fingerprint.

Only listings and header bytes are read. The fingerprint hashes, per shard in order, the path
relative to the source root, the byte size, the token count and the dtype: enough to notice
other data, a reordered or re-tokenized corpus, without reading token data; and independent
of where the corpus is mounted, so a run may move its data between folders or buckets.
"""

from __future__ import annotations

import hashlib
import posixpath
from dataclasses import dataclass

from streamload.config import SourceConfig
from streamload.formats.base import ListedFile, ReadOptions, ShardInfo
from streamload.formats.sniff import describe_shard, folder_dtype
from streamload.listing import list_source_files, sibling_names

__all__ = ["SourceCatalog", "describe_source"]


@dataclass(frozen=True)
class SourceCatalog:
    """A source's described shards, in stream order."""

    config: SourceConfig
    shards: tuple[ShardInfo, ...]

    @property
    def num_tokens(self) -> int:
        """Tokens over all shards."""
        return sum(s.num_tokens for s in self.shards)

    def fingerprint(self) -> str:
        """sha256 over (relative path, bytes, tokens, dtype) of every shard, in order."""
        digest = hashlib.sha256()
        for s in self.shards:
            digest.update(f"{s.relpath}\0{s.size}\0{s.num_tokens}\0{s.dtype}\n".encode())
        return digest.hexdigest()


def describe_source(source: SourceConfig, vocab_size: int | None = None) -> SourceCatalog:
    """List a source and read each shard's header.

    Raises:
        ConfigError: the path lists no files.
        FormatError: a shard is empty, corrupt, or of an unknown width.
    """
    fs, files = list_source_files(source)
    meta: dict[str, str | None] = {}
    siblings: dict[str, frozenset[str]] = {}
    shards = []
    for f in files:
        folder = posixpath.dirname(f.path)
        options = ReadOptions(
            dtype=source.dtype, meta_dtype=folder_dtype(fs, folder, meta), vocab_size=vocab_size
        )
        listed = ListedFile(_url(fs, f.path), f.relpath, f.size)
        names = sibling_names(fs, folder, siblings)
        shards.append(describe_shard(fs, listed, source.format.value, options, names))
    return SourceCatalog(source, tuple(shards))


def _url(fs: object, path: str) -> str:
    protocol = getattr(fs, "protocol", "file")
    protocols = protocol if isinstance(protocol, tuple) else (protocol,)
    if "file" in protocols or "local" in protocols:
        return path
    return fs.unstrip_protocol(path)  # type: ignore[attr-defined]
