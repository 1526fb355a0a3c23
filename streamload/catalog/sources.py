"""Start-up description of a source: its shards, their headers, and a fingerprint.

Only listings and header bytes are read. The fingerprint hashes, per shard in order, the path
relative to the source root, the byte size, the token count and the dtype: enough to notice
other data, a reordered or re-tokenized corpus, without reading token data; and independent
of where the corpus is mounted, so a run may move its data between folders or buckets.

Remote sources (any fsspec URL but ``file://``) are listed once; their headers are read
concurrently (``storage.max_concurrency``) with retries, or taken from the catalog cache when
the listing shows the very same objects (:mod:`streamload.catalog.cache`), and every shard carries a
:class:`~streamload.remote.StorageHandle` through which its tokens are later read by byte
range (docs/remote.md). With ``on_error = "skip"`` a shard whose header stays unreadable is
left out, warned about and counted; the fingerprint then covers only the shards kept.
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
import os
import posixpath
import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, cast

import numpy as np

from streamload.catalog.identity import folder_stamp, glob_identity, is_local, listing_digest
from streamload.catalog.listing import (
    Siblings,
    list_source_files,
    sibling_files,
    source_filesystem,
    source_url,
)
from streamload.catalog.masks import attach_masks
from streamload.catalog.store import (
    Identity,
    NotCached,
    cached_table,
    catalog_description,
    catalog_folder,
)
from streamload.catalog.table import ShardTable
from streamload.config import DataConfig, SourceConfig
from streamload.config.source import OnError
from streamload.config.storage import StorageConfig
from streamload.errors import ConfigError, FormatError, RemoteReadError
from streamload.formats.base import ListedFile, ReadOptions, ShardInfo, TokenizerSpec
from streamload.formats.sniff import describe_shard, folder_dtype
from streamload.remote.handle import StorageHandle
from streamload.remote.retry import retrying

__all__ = [
    "SourceCatalog",
    "check_one_dtype",
    "describe_source",
    "describe_sources",
    "storage_handle",
]

Job = tuple[ListedFile, ReadOptions, Siblings]
"""A file to describe: as listed, its read options, and its folder's files and versions."""

COMPANION_SUFFIXES = ("idx", "csv.gz", "ds.index", "ds.metadata", "tok.json")
"""Files beside a token file ``X.<ext>`` named ``X.<suffix>`` that its format reads (Megatron
``.idx``, dolma ``.csv.gz``, datatrove ``.ds.index/.metadata``, a jsonl record): their
listed versions go with the shard, so a remote one is read only in that version (a loss
mask's is added where it is found: :mod:`streamload.catalog.masks`)."""


@dataclass(frozen=True)
class SourceCatalog:
    """A source's described shards, in stream order.

    Attributes:
        config: The source.
        shards: The described shards.
        skipped: Shards left out under ``on_error = "skip"``: (path, reason), in order.
    """

    config: SourceConfig
    shards: ShardTable
    skipped: tuple[tuple[str, str], ...] = ()

    def __post_init__(self) -> None:
        if not isinstance(self.shards, ShardTable):  # described shards given as a sequence
            object.__setattr__(self, "shards", ShardTable.of(self.shards))

    @property
    def num_tokens(self) -> int:
        """Tokens over all shards."""
        return int(self.shards.num_tokens.sum())

    def fingerprint(self) -> str:
        """sha256 over (relative path, bytes, tokens, dtype) of every shard, in order, and
        for shards tokenized on the fly (jsonl) the sha256 of file and tokenizer, BOS/EOS, field.

        Computed once, when the shards were described (every saved state holds it, and a
        catalog may describe 10^5 shards)."""
        return self.shards.facts.fingerprint


def _native(dtypes: Sequence[str]) -> set[np.dtype]:
    return {np.dtype(d).newbyteorder("=") for d in dtypes}


def _tokenizer_spec(source: SourceConfig) -> TokenizerSpec | None:
    if source.tokenizer is None:
        return None
    return TokenizerSpec(
        source.tokenizer, source.bos_token_id, source.eos_token_id, source.text_field
    )


def storage_handle(fs: Any, source: SourceConfig, storage: StorageConfig) -> StorageHandle | None:
    """The handle remote shards of ``source`` are read through (``None`` for local files)."""
    protocols = fs.protocol if isinstance(fs.protocol, tuple) else (fs.protocol,)
    if "file" in protocols or "local" in protocols:
        return None
    return StorageHandle(protocols[0], dict(source.storage_options), storage, source.on_error.value)


def describe_sources(config: DataConfig) -> tuple[SourceCatalog, ...]:
    """Every source of a config, described with its ``vocab_size`` and ``[storage]``."""
    return tuple(
        describe_source(s, config.vocab_size, config.storage, eos_token_id=config.eos_token_id)
        for s in config.sources
    )


def describe_source(
    source: SourceConfig,
    vocab_size: int | None = None,
    storage: StorageConfig | None = None,
    *,
    eos_token_id: int | None = None,
    fresh: bool = False,
) -> SourceCatalog:
    """A source's shards: from the catalog cache when the data did not change (one listing
    per folder, :mod:`streamload.catalog.store`), else listed and described (each shard's
    header read) and cached.

    Args:
        source: The source.
        vocab_size: Configured vocabulary size (some formats pick a width by it).
        storage: Fetching options for remote sources (default ``StorageConfig()``).
        eos_token_id: The EOS id (tatm zero-tail trimming keeps a trailing EOS 0).
        fresh: Describe every shard now, neither reading nor writing the catalog cache
            (``validate``, ``inspect``: the files as they are).

    Raises:
        ConfigError: the path lists no files (or every shard was skipped).
        FormatError: a shard is empty, corrupt, or of an unknown width.
        RemoteReadError: a remote header stays unreadable (``on_error = "raise"``).
    """
    storage = storage or StorageConfig()
    if source.is_text:  # tokenized into its cache first (a module that needs this one)
        from streamload.catalog.text_source import describe_text_source

        return cast(
            SourceCatalog,
            describe_text_source(
                source, vocab_size, storage, eos_token_id=eos_token_id, fresh=fresh
            ),
        )
    fs, entries = source_filesystem(source, storage)
    handle = storage_handle(fs, source, storage)

    def build() -> tuple[tuple[ShardInfo, ...], Identity]:
        catalog, identity = _describe(fs, source, storage, handle, vocab_size, eos_token_id)
        if catalog.skipped:  # a transient fault must not be remembered
            raise NotCached(catalog)
        return tuple(catalog.shards), identity

    if not fresh and source.tokenizer is None and _cache_usable(storage):
        options = {"vocab_size": vocab_size, "eos": eos_token_id, "cache": storage.cache_root}
        description = catalog_description(fs, source, entries, options)
        try:
            table = cached_table(fs, source, storage, description, build, handle)
        except NotCached as exc:
            return cast(SourceCatalog, exc.result)
        check_one_dtype(source, table)
        return SourceCatalog(source, table)
    return _describe(fs, source, storage, handle, vocab_size, eos_token_id)[0]


def _cache_usable(storage: StorageConfig) -> bool:
    """Whether the catalog is cached: a disk cache is on and its folder can be made (a
    ``cache_dir`` the user set that cannot is a :class:`ConfigError`; the default folder
    that cannot only costs each start its headers)."""
    if not storage.cache_size:
        return False
    try:
        catalog_folder(storage)
    except ConfigError:
        if storage.cache_dir is not None:
            raise
        return False
    return True


def _describe(
    fs: Any,
    source: SourceConfig,
    storage: StorageConfig,
    handle: StorageHandle | None,
    vocab_size: int | None,
    eos_token_id: int | None,
) -> tuple[SourceCatalog, Identity]:
    """List a source and read each shard's header; what was listed, to check it later."""
    identity, stamps = Identity(), {}
    for entry in (*source.paths, *source.mask_paths):  # before listing: a change shows
        path = fs._strip_protocol(entry)
        pattern = any(c in entry for c in "*?[")
        if pattern and (digest := retrying(storage, f"listing {entry}", _glob, fs, path)):
            identity.globs[entry] = digest
        elif is_local(fs):  # the folder's files (index.json) are read as it is listed
            folder = path if os.path.isdir(path) else posixpath.dirname(path)
            stamps[folder] = folder_stamp(fs, folder)
    fs, files = list_source_files(source, storage)
    meta: dict[str, str | None] = {}
    siblings: dict[str, Siblings] = {}
    jobs: list[Job] = []
    for f in files:  # folder facts first (one listing per folder), sequentially
        folder = posixpath.dirname(f.path)
        if folder not in siblings:  # remote calls once per folder, not once per file
            retrying(storage, f"{folder}/", folder_dtype, fs, folder, meta)
            retrying(storage, f"listing {folder}/", sibling_files, fs, folder, siblings)
        options = ReadOptions(
            dtype=source.dtype,
            meta_dtype=meta[folder],
            vocab_size=vocab_size,
            eos_token_id=eos_token_id,
            tokenizer=_tokenizer_spec(source),
            column=source.column,
            cache_root=storage.cache_root,
        )
        listed = ListedFile(source_url(fs, f.path, source), f.relpath, f.size, f.version)
        jobs.append((listed, options, siblings[folder]))
    if handle is None:
        catalog = _describe_local(fs, source, jobs)
    else:
        catalog = _describe_all(fs, source, storage, handle, jobs)
    check_one_dtype(source, catalog.shards)
    paths = [(file.path, folder) for file, _, folder in jobs]
    shards = attach_masks(fs, source, storage, tuple(catalog.shards), paths)
    _record_folders(fs, identity, siblings, stamps, shards)
    return dataclasses.replace(catalog, shards=ShardTable.of(shards)), identity


def _glob(fs: Any, path: str) -> str | None:
    """The digest of a glob's matches; ``None`` when ``path`` exists (a name, not a glob)."""
    return None if fs.exists(path) else glob_identity(fs, path)


def _record_folders(
    fs: Any,
    identity: Identity,
    siblings: dict[str, Siblings],
    stamps: dict[str, Any],
    shards: tuple[ShardInfo, ...],
) -> None:
    """Record the identity of every folder the description listed (with the stamp taken
    before anything in it was read), and of the folders of named loss masks (listed now)."""
    local = is_local(fs)
    for folder, sib in siblings.items():
        rows = [(name, sib.sizes[name], version) for name, version in sib.versions.items()]
        stamp = stamps.get(folder, sib.stamp)
        identity.folders[folder] = (stamp, listing_digest(rows, local))
        identity.listings[folder] = rows
    for info in shards:
        if info.loss_mask and not info.is_remote:
            identity.add_folder(fs, posixpath.dirname(info.loss_mask))


def check_one_dtype(source: SourceConfig, shards: Sequence[ShardInfo]) -> None:
    """A source's files hold one token dtype, unless its config names a ``dtype`` (then
    each file's casts safely to it: checked as each is described).

    Files of several dtypes in one folder are more often a mistake (another tool's arrays
    beside the shards: int64 document lengths beside uint32 tokens) than a corpus.

    Raises:
        FormatError: naming a file of each of two dtypes.
    """
    if source.dtype != "auto":
        return
    if isinstance(shards, ShardTable) and len(_native(shards.facts.dtypes)) < 2:
        return  # the described set's dtypes: no walk over the shards
    first: dict[np.dtype, str] = {}
    for info in shards:
        first.setdefault(np.dtype(info.dtype).newbyteorder("="), info.path)
    if len(first) > 1:
        (a, path_a), (b, path_b) = list(first.items())[:2]
        both = np.result_type(a, b)
        fix = f"set dtype = {both.name!r}" if both.kind in "ui" else "split it into sources"
        raise FormatError(
            f"source {source.name!r}: {path_a} holds {a.name} tokens but {path_b} holds "
            f"{b.name}; one source's files hold one token dtype. Move files that are not "
            f"tokens out of the folder, or {fix} in the source if every file is a token file"
        )


def _describe_local(fs: Any, source: SourceConfig, jobs: list[Job]) -> SourceCatalog:
    """Describe local shards. The folder listing's times are the local files' versions,
    recorded like a remote object's (the shard's and its companions'), so what is keyed by
    versions (a packing plan) sees a rewritten file."""
    fmt = source.format.value
    versioned = [
        (dataclasses.replace(listed, version=f.versions.get(_name(listed.path), "")), o, f)
        for listed, o, f in jobs
    ]
    infos = [
        dataclasses.replace(
            describe_shard(fs, listed, fmt, opts, folder.names),
            version=listed.version,
            companions=_companions(listed.path, folder),
        )
        for listed, opts, folder in versioned
    ]
    return SourceCatalog(source, ShardTable.of(infos))


def _name(path: str) -> str:
    return posixpath.basename(path)


def _companions(path: str, folder: Siblings) -> dict[str, str]:
    """The listed version of each file beside ``path`` that shares its stem (X.bin: X.idx;
    X.ds: X.ds.index): a lookup per suffix, not a scan of the folder."""
    stem = _name(path).rsplit(".", 1)[0] + "."
    names = (stem + suffix for suffix in COMPANION_SUFFIXES)
    return {name: folder.versions[name] for name in names if name in folder.versions}


def _describe_all(
    fs: Any, source: SourceConfig, storage: StorageConfig, handle: StorageHandle, jobs: list[Job]
) -> SourceCatalog:
    fetcher = handle.store().fetcher

    def describe(job: tuple[ListedFile, ReadOptions, Siblings]) -> ShardInfo | str:
        listed, options, folder = job
        try:
            # One retry, timeout and counting policy for every remote read (remote/fetch.py).
            info = fetcher.call(listed.path, "its header", describe_shard, fs, listed,
                                source.format.value, options, folder.names)  # fmt: skip
        except RemoteReadError as exc:
            if source.on_error is not OnError.SKIP:
                raise
            return str(exc)
        return dataclasses.replace(
            info,
            version=listed.version,
            storage=handle,
            companions=_companions(listed.path, folder),
        )

    with concurrent.futures.ThreadPoolExecutor(storage.max_concurrency) as pool:
        results = list(pool.map(describe, jobs))
    shards, skipped = [], []
    for job, result in zip(jobs, results, strict=True):
        if isinstance(result, str):
            skipped.append((job[0].path, result))
            warnings.warn(
                f"source {source.name!r}: skipping {job[0].path} (on_error = 'skip'): {result}",
                stacklevel=3,
            )
        else:
            shards.append(result)
    if not shards:
        raise ConfigError(f"source {source.name!r}: every shard was unreadable and skipped")
    stats = handle.store().stats
    for path, reason in skipped:
        stats.add("skipped_shards")
        stats.skipped(path, reason)
    return SourceCatalog(source, ShardTable.of(shards), tuple(skipped))
