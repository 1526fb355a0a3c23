"""Text sources: text files tokenized once into a cache, then described as token shards.

A source with a ``tokenizer`` (``SourceConfig.is_text``; docs/text.md) lists its text files
(JSONL(.gz/.zst), Parquet, Arrow, MDS: :data:`~streamload.tokenize.inputs.TEXT_SUFFIXES`)
with the listing rules of every source (a folder, a glob, a file or a list; a
``save_to_disk`` folder in its ``state.json`` order, an MDS folder in its ``index.json``
order), makes sure each file is in its cache (:mod:`streamload.tokenize.text_build`:
tokenized by one process, the others waiting) and is then described as the Megatron shards
of the cache, in input order, so every mode, mixture, split, mask and resumption works on
it unchanged.

The shards' paths in the data fingerprint are the input files' paths under the source's root
(``a.jsonl``; ``a.jsonl#1`` for a file's second part): a corpus that moves, or a cache that is
rebuilt elsewhere, keeps its fingerprint, and a state saved on it resumes. The description
is cached in the catalog under the cache files' names, which the input files' identities
decide; those files never change once written, so the cached description is not checked
against listings.
"""

from __future__ import annotations

import dataclasses
import hashlib
import os
from collections.abc import Callable
from typing import Any

from streamload.catalog.identity import is_local
from streamload.catalog.listing import Siblings, list_entries, sibling_files, source_filesystem
from streamload.catalog.masks import attach_masks
from streamload.catalog.store import Identity, cached_table, catalog_description
from streamload.catalog.table import ShardTable
from streamload.config import SourceConfig
from streamload.config.source import ShardFormat
from streamload.config.storage import StorageConfig
from streamload.errors import ConfigError, StreamloadError
from streamload.formats.base import ListedFile, ReadOptions, ShardInfo
from streamload.tokenize.inputs import input_kind
from streamload.tokenize.text_build import BuildReport, ensure_cache
from streamload.tokenize.text_cache import TextCache, TextInput, TextSettings
from streamload.tokenize.text_progress import TextProgress

__all__ = [
    "describe_text_source",
    "list_text_inputs",
    "prepare_text_source",
    "text_cache",
]

ProgressFn = Callable[[int, int, int], None]

_KINDS = {ShardFormat.PARQUET: "parquet", ShardFormat.ARROW: "arrow", ShardFormat.MDS: "mds"}


def text_cache(source: SourceConfig, storage: StorageConfig | None = None) -> TextCache:
    """The cache folder of a text source's settings (``cache_dir``, else ``text/`` in the
    storage cache).

    Raises:
        ConfigError: the tokenizer is unreadable or the dtype cannot hold its ids.
    """
    storage = storage or StorageConfig()
    root = source.cache_dir or os.path.join(storage.cache_root, "text")
    settings = TextSettings(
        tokenizer=source.tokenizer or "",
        bos_token_id=source.bos_token_id,
        eos_token_id=source.eos_token_id,
        text_field=source.text_field,
        kind=_KINDS.get(source.format),
        dtype=source.dtype,
        skip_bad=source.on_error.value == "skip",
        messages_field=source.messages_field,
        chat_template=source.chat_template,
        train_on=source.train_on.value if source.train_on is not None else "assistant",
    )
    try:
        options = _cache_options(source, root)
        return TextCache(root, settings, options, input_options=source.storage_options)
    except ConfigError as exc:
        raise ConfigError(f"source {source.name!r}: {exc}") from None


def list_text_inputs(source: SourceConfig, storage: StorageConfig | None = None) -> list[TextInput]:
    """A text source's input files, in the listing order of every source.

    Raises:
        ConfigError: a path that does not exist or holds no text file.
    """
    fs, entries = source_filesystem(source, storage)
    # fsspec shares a file system per options and keeps its listings: a second start in
    # this process would see the sizes and ETags of the first, and read the old entry
    fs.invalidate_cache()
    files = list_entries(fs, source, source.paths, entries, storage, text=True)
    local = is_local(fs)
    urls = [f.path if local else str(fs.unstrip_protocol(f.path)) for f in files]
    wanted = _KINDS.get(source.format)
    for url in urls:  # every file's kind known (and the one asked for) before any work
        kind = input_kind(url)
        if wanted is not None and kind != wanted:
            raise ConfigError(
                f"source {source.name!r}: {url} is a {kind} file but format = {wanted!r}; "
                'use format = "text" to read files of several kinds'
            )
    return [TextInput(u, f.relpath, f.size, f.version) for u, f in zip(urls, files, strict=True)]


def prepare_text_source(
    source: SourceConfig,
    storage: StorageConfig | None = None,
    *,
    rank: int = 0,
    world: int = 1,
    processes: int = 1,
    progress: ProgressFn | None = None,
) -> BuildReport:
    """Tokenize what a text source's cache still lacks (this rank's share, and files nobody
    is building), waiting for the rest; the files' markers in input order."""
    cache = text_cache(source, storage)
    inputs = list_text_inputs(source, storage)
    try:
        return ensure_cache(
            cache, inputs, rank=rank, world=world, processes=processes, progress=progress
        )
    except StreamloadError as exc:
        if not str(exc).startswith("source "):
            exc.args = (f"source {source.name!r}: {exc}", *exc.args[1:])
        raise


def describe_text_source(
    source: SourceConfig,
    vocab_size: int | None,
    storage: StorageConfig,
    *,
    eos_token_id: int | None = None,
    fresh: bool = False,
) -> Any:
    """A text source described as its cache's token shards (tokenizing what is missing).

    Returns:
        A :class:`~streamload.catalog.sources.SourceCatalog` whose ``config`` is the
        source read as Megatron shards of its cache.
    """
    from streamload.catalog.sources import (
        SourceCatalog,
        _describe_all,
        _describe_local,
        storage_handle,
    )

    shown = os.environ.get("RANK", "0") == "0"  # one bar per job (torchrun sets RANK)
    progress = TextProgress(0, source.name) if shown else None
    try:
        report = prepare_text_source(source, storage, progress=progress)
    finally:
        if progress is not None:
            progress.close()
    inputs = [TextInput(**m["input"]) for m in report.markers]
    cache = text_cache(source, storage)
    derived = tokens_source(source, cache)
    fs, _ = source_filesystem(derived, storage)
    handle = storage_handle(fs, derived, storage)
    parts = [(name, i) for i, m in zip(inputs, report.markers, strict=True) for name in m["parts"]]
    paths = [cache.path(name) for name, _ in parts]

    def build() -> tuple[tuple[ShardInfo, ...], Identity]:
        folder = sibling_files(fs, cache.folder, {})
        options = ReadOptions(vocab_size=vocab_size, cache_root=storage.cache_root)
        jobs = [(_listed(cache, name, item, folder), options, folder) for name, item in parts]
        if handle is None:
            found = _describe_local(fs, derived, jobs)
        else:
            found = _describe_all(fs, derived, storage, handle, jobs)
        shards = tuple(
            dataclasses.replace(info, meta={**info.meta, "text_input": item.url})
            for info, (_, item) in zip(found.shards, parts, strict=True)
        )
        # a chat source's parts have their loss masks beside them (<part>.bin.loss)
        listed = [(job[0].path, folder) for job in jobs]
        return attach_masks(fs, derived, storage, shards, listed), Identity()

    if fresh or not storage.cache_size:
        return SourceCatalog(derived, ShardTable.of(build()[0]))
    # a cache removed and built again has new parts under the same names: `built` tells
    built = hashlib.sha256("".join(str(m.get("built")) for m in report.markers).encode())
    options = {"vocab_size": vocab_size, "eos": eos_token_id, "cache": storage.cache_root,
               "built": built.hexdigest()}  # fmt: skip
    description = catalog_description(fs, derived, paths, options)
    return SourceCatalog(derived, cached_table(fs, derived, storage, description, build, handle))


def tokens_source(source: SourceConfig, cache: TextCache) -> SourceConfig:
    """The source as its cache's Megatron shards (name, weight and policies kept)."""
    return dataclasses.replace(
        source,
        path=cache.url,
        format=ShardFormat.MEGATRON,
        dtype="auto",
        tokenizer=None,
        bos_token_id=None,
        eos_token_id=None,
        text_field="text",
        cache_dir=None,
        messages_field=None,  # a chat source's masks are the cache's .bin.loss files
        chat_template=None,
        train_on=None,
        storage_options=dict(cache.storage_options),
    )


def _listed(cache: TextCache, name: str, item: TextInput, folder: Siblings) -> ListedFile:
    """A cache part as listed; its path in the fingerprint is its input's (``#M`` added
    for a second part on: ``<file key>-0000M.bin``)."""
    path = cache.path(name)
    url = path if cache.local else str(cache.fs.unstrip_protocol(path))
    number = int(name.rsplit(".", 1)[0].rsplit("-", 1)[1])
    relpath = item.relpath if number == 0 else f"{item.relpath}#{number}"
    return ListedFile(url, relpath, folder.sizes.get(name, -1), folder.versions.get(name, ""))


def _cache_options(source: SourceConfig, root: str) -> dict[str, Any] | None:
    """The fsspec options of a text source's remote cache: the source's ``storage_options``
    when the cache is on the inputs' storage, or when the inputs are local (they need none,
    so the options are the cache's: its endpoint and credentials); none for a local cache or
    one on another storage."""
    cache = _protocol(root)
    if cache != "file" and _protocol(source.paths[0]) in ("file", cache):
        return dict(source.storage_options)
    return None


def _protocol(url: str) -> str:
    protocol = url.split("://", 1)[0] if "://" in url else "file"
    return "file" if protocol == "local" else protocol
