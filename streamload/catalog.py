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
from streamload.formats.base import ShardInfo
from streamload.formats.sniff import describe_shard, folder_dtype
from streamload.listing import list_source_files

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


def describe_source(source: SourceConfig) -> SourceCatalog:
    """List a source and read each shard's header.

    Raises:
        ConfigError: the path lists no files.
        FormatError: a shard is empty, corrupt, or of an unknown width.
    """
    fs, files = list_source_files(source)
    meta: dict[str, str | None] = {}
    shards = []
    for f in files:
        meta_dtype = folder_dtype(fs, posixpath.dirname(f.path), meta)
        url = _url(fs, f.path)
        shards.append(
            describe_shard(fs, url, f.relpath, f.size, source.format, source.dtype, meta_dtype)
        )
    return SourceCatalog(source, tuple(shards))


def _url(fs: object, path: str) -> str:
    protocol = getattr(fs, "protocol", "file")
    protocols = protocol if isinstance(protocol, tuple) else (protocol,)
    if "file" in protocols or "local" in protocols:
        return path
    return fs.unstrip_protocol(path)  # type: ignore[attr-defined]
