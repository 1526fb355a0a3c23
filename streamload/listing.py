"""Expand a source's ``path`` into its ordered shard list, through fsspec.

Order rule (part of the data fingerprint): each ``path`` entry is expanded on its own and the
entries are concatenated in config order. A folder lists its token files (non-recursively)
and a glob its matches; both are sorted lexicographically by the full path string, as
KempnerForge does (``tokenized_10.bin`` sorts before ``tokenized_2.bin``); hidden files
(``.name``) are skipped. A single file is itself. Only listing and header bytes are read
here, never token data.
"""

from __future__ import annotations

import posixpath
from typing import Any

import fsspec

from streamload.config import SourceConfig
from streamload.errors import ConfigError
from streamload.formats.base import ListedFile

__all__ = [
    "TOKEN_SUFFIXES",
    "list_source_files",
    "object_version",
    "sibling_files",
    "source_filesystem",
]

TOKEN_SUFFIXES = (".npy", ".bin", ".pbin", ".ds")
"""Suffixes a folder listing treats as token files (companions such as ``.idx``,
``.csv.gz``, ``.ds.index`` or ``metadata.yaml`` are read with them, not listed)."""

_GLOB_CHARS = "*?["


def source_filesystem(source: SourceConfig) -> tuple[Any, list[str]]:
    """The fsspec file system of a source and its path entries stripped of the protocol.

    Raises:
        ConfigError: entries use different protocols, or fsspec cannot open the protocol.
    """
    try:
        fs, _ = fsspec.core.url_to_fs(source.paths[0], **source.storage_options)
    except (ImportError, ValueError) as exc:
        raise ConfigError(
            f"source {source.name!r}: cannot open {source.paths[0]!r}: {exc}"
        ) from exc
    stripped = []
    for entry in source.paths:
        other, _ = fsspec.core.url_to_fs(entry, **source.storage_options)
        if type(other) is not type(fs):
            raise ConfigError(
                f"source {source.name!r}: paths mix storage protocols ({source.paths[0]!r} and "
                f"{entry!r}); use one source per storage"
            )
        stripped.append(fs._strip_protocol(entry))
    return fs, stripped


def list_source_files(source: SourceConfig) -> tuple[Any, list[ListedFile]]:
    """List a source's shard files in the documented order.

    Raises:
        ConfigError: a path does not exist, matches nothing, or a file is listed twice.
    """
    fs, entries = source_filesystem(source)
    files: list[ListedFile] = []
    for raw, entry in zip(source.paths, entries, strict=True):
        found = _expand(fs, entry)
        if not found:
            raise ConfigError(
                f"source {source.name!r}: {raw!r} holds no token files "
                f"(looked for {', '.join('*' + s for s in TOKEN_SUFFIXES)})"
            )
        files.extend(found)
    seen: set[str] = set()
    for f in files:
        if f.path in seen:
            raise ConfigError(f"source {source.name!r}: {f.path} is listed twice")
        seen.add(f.path)
    return fs, files


def _is_file(fs: Any, info: dict[str, Any]) -> bool:
    if posixpath.basename(info["name"]).startswith("."):
        return False  # hidden: temporary outputs of interrupted writers, editor files
    # fsspec reports symlinks as type "other"/"link"; follow them.
    kind = info.get("type")
    return kind == "file" or (kind in ("other", "link") and fs.isfile(info["name"]))


def _expand(fs: Any, entry: str) -> list[ListedFile]:
    # An existing path wins over a glob reading, so a folder named "run[1]" works.
    if any(c in entry for c in _GLOB_CHARS) and not fs.exists(entry):
        root = entry[: min(entry.find(c) for c in _GLOB_CHARS if c in entry)]
        root = root if root.endswith("/") else posixpath.dirname(root)
        infos = fs.glob(entry, detail=True).values()
        files = [i for i in infos if _is_file(fs, i)]
    elif fs.isdir(entry):
        root = entry
        files = [
            i
            for i in fs.ls(entry, detail=True)
            if i["name"].endswith(TOKEN_SUFFIXES) and _is_file(fs, i)
        ]
    elif fs.isfile(entry):
        return [_single(fs, entry)]
    elif fs.isfile(entry + ".bin"):  # a Megatron path prefix: data/web_text_document
        return [_single(fs, entry + ".bin")]
    else:
        raise ConfigError(f"{entry}: no such file or folder")
    listed = [
        ListedFile(i["name"], _relative(i["name"], root), int(i["size"]), object_version(i))
        for i in files
    ]
    return sorted(listed, key=lambda f: f.path)


def _single(fs: Any, path: str) -> ListedFile:
    info = fs.info(path)
    name = info["name"]
    return ListedFile(name, posixpath.basename(name), int(info["size"]), object_version(info))


def object_version(info: dict[str, Any]) -> str:
    """A listed object's version tag, or ``""``: the ETag (S3, Azure, HTTP), generation
    (GCS), git blob id (Hugging Face), content MD5, or last modification time. The remote
    cache keys pieces by it, so a replaced object never reads stale pieces."""
    keys = ("ETag", "etag", "generation", "md5Hash", "blob_id", "Content-MD5", "LastModified",
            "Last-Modified", "last_modified", "mtime")  # fmt: skip
    for key in keys:
        value = info.get(key)
        if value not in (None, ""):
            return str(value)
    return ""


def sibling_files(fs: Any, folder: str, cache: dict[str, dict[str, str]]) -> dict[str, str]:
    """Names of the files in ``folder`` with their listed versions (:func:`object_version`;
    one listing per folder, cached): sniffing looks for companions by name, and a remote
    companion is later read only in the version listed here."""
    if folder not in cache:
        cache[folder] = {
            posixpath.basename(entry["name"]): object_version(entry)
            for entry in fs.ls(folder, detail=True)
        }
    return cache[folder]


def _relative(name: str, root: str) -> str:
    root = root.rstrip("/")
    if root and name.startswith(root + "/"):
        return name[len(root) + 1 :]
    return posixpath.basename(name)
