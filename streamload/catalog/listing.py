"""Expand a source's ``path`` into its ordered shard list, through fsspec.

Order rule (part of the data fingerprint): each ``path`` entry is expanded on its own and the
entries are concatenated in config order. A folder lists its token files (non-recursively)
and a glob its matches; both are sorted lexicographically by the full path string, as
KempnerForge does (``tokenized_10.bin`` sorts before ``tokenized_2.bin``); hidden files
(``.name``) are skipped. A single file is itself. Only listing and header bytes are read
here, never token data.

Folders that record their own order are listed in it instead: a ``save_to_disk`` folder by
its ``state.json`` (:mod:`streamload.formats.arrow.save_to_disk`), an MDS or LitData folder by its
``index.json`` (:mod:`streamload.formats.index_json`: ``chunk-0-2.bin`` before
``chunk-0-10.bin``, MDS shards of 0 samples left out). A glob's matches in such a folder keep
their slots in the sorted matches and take the index's order among themselves.
"""

from __future__ import annotations

import contextlib
import posixpath
from typing import Any, NamedTuple

from streamload.catalog.dataset_dict import dataset_dict_hint
from streamload.catalog.identity import folder_stamp
from streamload.config import SourceConfig
from streamload.config.storage import StorageConfig
from streamload.errors import ConfigError
from streamload.formats.arrow.columns import column_name
from streamload.formats.arrow.save_to_disk import (
    INFO_FILE,
    STATE_FILE,
    check_data_files,
    check_token_feature,
    data_files,
    is_cache_file,
)
from streamload.formats.base import ListedFile
from streamload.formats.index_json import (
    INDEX_NAME,
    INDEXED_SUFFIXES,
    IndexedShards,
    load_folder_index,
    one_shard_twice,
    order_by_index,
)
from streamload.formats.mask_names import is_mask_name
from streamload.remote.clients import client_options, limit_client_retries
from streamload.remote.retry import retrying
from streamload.remote.versions import object_version

__all__ = [
    "COMPANION_PREFIXES",
    "Siblings",
    "TOKEN_SUFFIXES",
    "list_entries",
    "list_source_files",
    "sibling_files",
    "source_url",
    "source_filesystem",
]

TOKEN_SUFFIXES = (
    ".npy", ".bin", ".pbin", ".ds", ".arrow", ".parquet", ".mds", ".mds.zstd", ".mds.gz",
)  # fmt: skip
"""Suffixes a folder listing treats as token files (companions such as ``.idx``,
``.csv.gz``, ``.ds.index``, ``metadata.yaml`` or an ``index.json`` are read with them, not
listed)."""

COMPANION_PREFIXES = ("doc_lens", "doc_lengths", "document_lengths", "label_mask")
"""Names of arrays that go with token files, never tokens themselves, though they are
``.npy`` too: OLMo-core's per-document lengths (``doc_lens_*.npy``, int64) and OLMo's older
``label_mask*.npy`` (OLMo-core's ``labels_mask*`` is a mask name:
:func:`~streamload.formats.mask_names.is_mask_name`). Read as tokens they were extra shards
of another dtype (issue 36)."""

_METADATA = ("index.json", "state.json", "dataset_info.json")
"""A folder's records (MDS, LitData, save_to_disk): never JSON documents (nor X.tok.json)."""

_GLOB_CHARS = "*?["
_MDS_SUFFIXES = (".mds", ".mds.zstd", ".mds.gz")

FolderIndexes = dict[str, IndexedShards | None]
"""Each folder's MDS or LitData index (``None``: none), looked up once per listing."""


def source_filesystem(
    source: SourceConfig, storage: StorageConfig | None = None
) -> tuple[Any, list[str]]:
    """The fsspec file system of a source and its path entries stripped of the protocol; with
    ``storage``, its client retries nothing itself and times out like our requests
    (:mod:`streamload.remote.clients`).

    Raises:
        ConfigError: entries use different protocols, or fsspec cannot open the protocol.
    """
    import fsspec  # ~90 ms (it imports asyncio and ssl): only when a source is listed

    protocol = fsspec.core.split_protocol(source.paths[0])[0] or "file"
    options = dict(source.storage_options)
    if storage is not None:
        options = client_options(protocol, options, storage)
    try:
        fs, _ = fsspec.core.url_to_fs(source.paths[0], **options)
    except (ImportError, ValueError) as exc:
        raise ConfigError(
            f"source {source.name!r}: cannot open {source.paths[0]!r}: {exc}"
        ) from exc
    limit_client_retries(fs)
    stripped = []
    for entry in source.paths:
        other, _ = fsspec.core.url_to_fs(entry, **options)
        if type(other) is not type(fs):
            raise ConfigError(
                f"source {source.name!r}: paths mix storage protocols ({source.paths[0]!r} and "
                f"{entry!r}); use one source per storage"
            )
        stripped.append(fs._strip_protocol(entry))
    return fs, stripped


def list_source_files(
    source: SourceConfig, storage: StorageConfig | None = None
) -> tuple[Any, list[ListedFile]]:
    """List a source's shard files in the documented order (listing calls retried as
    ``storage`` says, see :func:`retrying`).

    Raises:
        ConfigError: a path does not exist, matches nothing, or a file is listed twice.
        RemoteReadError: a listing kept failing.
    """
    fs, entries = source_filesystem(source, storage)
    return fs, list_entries(fs, source, source.paths, entries, storage)


def list_entries(
    fs: Any,
    source: SourceConfig,
    raws: tuple[str, ...],
    entries: list[str],
    storage: StorageConfig | None,
    masks: bool = False,
    text: bool = False,
) -> list[ListedFile]:
    """The files of path entries (``raws`` as written, ``entries`` stripped), each entry
    sorted, in entry order: token files, with ``masks`` the loss-mask files a source
    names (``label_masks``: a folder lists every file in it), with ``text`` a text source's
    text files (:data:`~streamload.tokenize.inputs.TEXT_SUFFIXES`).

    Raises:
        ConfigError: a path does not exist, matches nothing, or a file is listed twice.
    """
    files: list[ListedFile] = []
    what = "loss-mask files" if masks else "text files" if text else "token files"
    suffixes: tuple[str, ...] = TOKEN_SUFFIXES
    if text:  # fsspec-level module: only when a text source is listed
        from streamload.tokenize.inputs import TEXT_SUFFIXES as suffixes
    indexes: FolderIndexes = {}
    field = "label_masks" if masks else "path"
    for raw, entry in zip(raws, entries, strict=True):
        column = None if masks else "" if text else column_name(source.column)
        try:
            infos = retrying(
                storage, f"listing {raw}", _expand, fs, entry, column, indexes, suffixes
            )
        except _MissingPath:
            raise ConfigError(
                f"source {source.name!r}: {field} {raw!r}: no such file or folder"
            ) from None
        found = [_listed(fs, i, rel, storage) for i, rel in infos]
        if not found:
            looked = "" if masks else f" (looked for {', '.join('*' + s for s in suffixes)}"
            looked += "; MDS shards of 0 samples are left out)" if looked else ""
            looked += "" if masks else dataset_dict_hint(fs, entry, raw)
            verb = "matches" if any(c in entry for c in _GLOB_CHARS) else "holds"
            raise ConfigError(f"source {source.name!r}: {field} {raw!r} {verb} no {what}{looked}")
        files.extend(found)
    seen: set[str] = set()
    for f in files:
        if f.path in seen:
            where = source_url(fs, f.path, source)
            raise ConfigError(f"source {source.name!r}: {where} is listed twice in its {what}")
        seen.add(f.path)
    twice = one_shard_twice((f.path for f in files), indexes)
    if twice is not None:
        first, second = (source_url(fs, path, source) for path in twice)
        raise ConfigError(
            f"source {source.name!r}: {first} and {second} are one shard of their index.json "
            f"(a compressed shard and the copy Streaming decompressed beside it): list one"
        )
    return files


class _MissingPath(ConfigError):
    """A path entry names nothing (:func:`list_entries` says which source and field)."""


def _is_file(fs: Any, info: dict[str, Any]) -> bool:
    if posixpath.basename(info["name"]).startswith("."):
        return False  # hidden: temporary outputs of interrupted writers, editor files
    # fsspec reports symlinks as type "other"/"link"; follow them.
    kind = info.get("type")
    return kind == "file" or (kind in ("other", "link") and fs.isfile(info["name"]))


def _is_token_file(fs: Any, info: dict[str, Any]) -> bool:
    """A listed file that may be a shard: a file, not a loss mask (``labels_mask*``,
    ``*.loss``: :mod:`streamload.formats.mask_names`) nor another companion array
    (:data:`COMPANION_PREFIXES`), which go with token files."""
    name = posixpath.basename(info["name"])
    companion = is_mask_name(name) or name.startswith(COMPANION_PREFIXES)
    companion = companion or name in _METADATA or name.endswith(".tok.json")
    return not companion and _is_file(fs, info)


def _expand(
    fs: Any, entry: str, column: str | None, indexes: FolderIndexes, suffixes: tuple[str, ...]
) -> list[tuple[dict[str, Any], str]]:
    """The listed entries (fsspec infos) of one path entry, each with its relative path, in
    listing order: one attempt of a few requests (exists/isdir/isfile, then ls/glob/info).
    Without a token ``column`` a folder or glob lists every file (the loss masks a source
    names), else its files of ``suffixes`` (``column = ""``: a text source's, whose
    ``save_to_disk`` features are not token features); a ``save_to_disk`` folder's are
    checked against and ordered by its ``state.json`` (:func:`_save_to_disk_order`), an MDS
    or LitData folder's by its ``index.json`` (:func:`_index_order`)."""
    keep = _is_file if column is None else _is_token_file
    # An existing path wins over a glob reading, so a folder named "run[1]" works.
    if any(c in entry for c in _GLOB_CHARS) and not fs.exists(entry):
        root = entry[: min(entry.find(c) for c in _GLOB_CHARS if c in entry)]
        root = root if root.endswith("/") else posixpath.dirname(root)
        infos = fs.glob(entry, detail=True).values()
        files = sorted((i for i in infos if keep(fs, i)), key=_name)
        if column is not None:
            files = _index_order(fs, files, indexes, None)
    elif fs.isdir(entry):
        root = entry
        listed = fs.ls(entry, detail=True)
        files = sorted(
            (i for i in listed if (column is None or i["name"].endswith(suffixes))),
            key=_name,
        )
        files = [i for i in files if keep(fs, i)]
        if column is not None:
            files = _save_to_disk_order(fs, entry, listed, files, column)
            names = {posixpath.basename(i["name"]) for i in listed}
            files = _index_order(fs, files, indexes, INDEX_NAME in names)
    elif fs.isfile(entry):
        single = _single(fs, entry)
        mds = column is not None and entry.endswith(_MDS_SUFFIXES)
        if mds and not _index_order(fs, [single[0]], indexes, None):
            return []  # an MDS shard of 0 samples
        return [single]
    elif fs.isfile(entry + ".bin"):  # a Megatron path prefix: data/web_text_document
        return [_single(fs, entry + ".bin")]
    else:
        with contextlib.suppress(FileNotFoundError):  # isdir/isfile say False on any error:
            fs.info(entry)  # raise that one (retried) unless the path is missing
        raise _MissingPath(f"{entry}: no such file or folder")
    return [(i, _relative(i["name"], root)) for i in files]


def _name(info: dict[str, Any]) -> str:
    return str(info["name"])


def _save_to_disk_order(
    fs: Any, folder: str, listed: list[dict[str, Any]], files: list[dict[str, Any]], column: str
) -> list[dict[str, Any]]:
    """``files`` of a folder, in the order its ``state.json`` lists its Arrow files when it
    has one beside them (:mod:`streamload.formats.arrow.save_to_disk`: the files checked, the
    token column's feature too)."""
    names = {posixpath.basename(i["name"]): i for i in listed}
    arrows = {posixpath.basename(i["name"]): i for i in files if i["name"].endswith(".arrow")}
    if STATE_FILE not in names or not arrows:
        return files
    # datasets' map/filter caches (cache-*.arrow) beside a saved dataset are not its data
    files = [i for i in files if not is_cache_file(posixpath.basename(i["name"]))]
    arrows = {n: i for n, i in arrows.items() if not is_cache_file(n)}
    state = posixpath.join(folder, STATE_FILE)
    expected = data_files(fs.cat_file(state), state)
    check_data_files(list(arrows), expected, folder)
    if INFO_FILE in names and column:
        info = posixpath.join(folder, INFO_FILE)
        check_token_feature(fs.cat_file(info), column, info)
    rank = {name: at for at, name in enumerate(expected)}
    return sorted(files, key=lambda i: (rank.get(posixpath.basename(i["name"]), -1), i["name"]))


def _index_order(
    fs: Any, files: list[dict[str, Any]], indexes: FolderIndexes, indexed: bool | None
) -> list[dict[str, Any]]:
    """``files`` (sorted) with those of each folder holding an MDS or LitData ``index.json``
    in its order, in the slots they had, and without its empty shards
    (:func:`~streamload.formats.index_json.order_by_index`).

    Args:
        fs: The file system.
        files: The listed files, sorted by name.
        indexes: The folders' indexes looked up so far in this listing (updated).
        indexed: For a whole folder, whether its listing holds an ``index.json`` (all its
            shards must then be there); ``None`` for a glob's matches or a single file (some
            files of their folders), whose folders are looked up.
    """
    slots: dict[str, list[int]] = {}
    for at, info in enumerate(files):
        slots.setdefault(posixpath.dirname(info["name"]), []).append(at)
    kept: list[dict[str, Any] | None] = list(files)
    for folder, places in slots.items():
        if indexed is None and not any(
            files[at]["name"].endswith(INDEXED_SUFFIXES) for at in places
        ):
            continue  # no file an index orders: no request for this folder
        if folder not in indexes:
            exists = indexed if indexed is not None else fs.isfile(f"{folder}/{INDEX_NAME}")
            url = fs.unstrip_protocol(folder)  # what load_index reads: local path or URL
            indexes[folder] = load_folder_index(fs, url) if exists else None
        index = indexes[folder]
        if index is None:
            continue
        by_name = {posixpath.basename(files[at]["name"]): files[at] for at in places}
        order = order_by_index(list(by_name), index, folder, complete=indexed is not None)
        for at in places:
            kept[at] = None
        for at, name in zip(places, order, strict=False):  # fewer: empty shards left out
            kept[at] = by_name[name]
    return [i for i in kept if i is not None]


def _single(fs: Any, path: str) -> tuple[dict[str, Any], str]:
    info = fs.info(path)
    return info, posixpath.basename(info["name"])


def _info(fs: Any, path: str) -> dict[str, Any]:
    return dict(fs.info(path))


def _listed(
    fs: Any, info: dict[str, Any], relpath: str, storage: StorageConfig | None
) -> ListedFile:
    """A listed file; a listing without sizes (an HTTP index page) asks for each file's, in a
    call of its own (bounded and retried as ``storage`` says)."""
    if info.get("size") is None:
        info = retrying(storage, f"metadata of {info['name']}", _info, fs, info["name"])
        if info.get("size") is None:
            raise ConfigError(
                f"{info['name']}: the store gives no size for this file (no Content-Length); "
                "list its files one by one in the source path"
            )
    return ListedFile(info["name"], relpath, int(info["size"]), object_version(info))


class Siblings(NamedTuple):
    """The files of one folder: name → listed version (:func:`object_version`), the set of
    names (built once per folder: a folder may hold many thousands of shards), name → size
    in bytes (``-1`` when the listing gives none), and a local folder's modification time
    in ns taken before the listing (``None`` when remote: :mod:`streamload.catalog.identity`)."""

    versions: dict[str, str]
    names: frozenset[str]
    sizes: dict[str, int]
    stamp: list[Any] | None = None


def sibling_files(fs: Any, folder: str, cache: dict[str, Siblings]) -> Siblings:
    """The files in ``folder`` (one listing per folder, cached): sniffing looks for companions
    by name, and a remote companion is later read only in the version listed here."""
    if folder not in cache:
        stamp = folder_stamp(fs, folder)  # before the listing: a file added meanwhile shows
        entries = fs.ls(folder, detail=True)
        versions = {posixpath.basename(e["name"]): object_version(e) for e in entries}
        sizes = {posixpath.basename(e["name"]): _size(e) for e in entries}
        cache[folder] = Siblings(versions, frozenset(versions), sizes, stamp)
    return cache[folder]


def _size(entry: dict[str, Any]) -> int:
    size = entry.get("size")
    return int(size) if isinstance(size, int) else -1


def _relative(name: str, root: str) -> str:
    root = root.rstrip("/")
    if root and name.startswith(root + "/"):
        return name[len(root) + 1 :]
    return posixpath.basename(name)


def source_url(fs: object, path: str, source: SourceConfig) -> str:
    """The URL of a listed path, in the scheme the user wrote (adlfs would name ``az://``
    objects ``abfs://``, gcsfs ``gcs://`` ones ``gs://``: messages name what the config says)."""
    protocol = getattr(fs, "protocol", "file")
    protocols = protocol if isinstance(protocol, tuple) else (protocol,)
    if "file" in protocols or "local" in protocols or "://" in path:  # local, or http(s) URLs
        return path
    first = source.paths[0]
    scheme = first.split("://", 1)[0] if "://" in first else ""
    if scheme in protocols:
        return f"{scheme}://{path}"
    return fs.unstrip_protocol(path)  # type: ignore[attr-defined]
