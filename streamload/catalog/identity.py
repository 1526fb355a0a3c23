"""Whether the files a catalog describes are still the files it described, without a stat per
file.

A catalog records, for every folder its description listed, the folder's identity:

* local: the folder's modification time (nanoseconds, taken *before* the listing, so a file
  added while the catalog is built makes it stale) and the sha256 of its sorted entry names.
  Adding, removing or renaming an entry changes both, and so does the usual way of replacing
  a file (a new file renamed over the old one); checking costs one ``stat`` and one
  ``readdir`` of the folder (:func:`os.listdir`), never a ``stat`` per file.
* remote: the sha256 of its sorted (name, size, version) triples, from one listing (the
  ETag or generation of every object comes with it).

and for every glob of the source's paths the sha256 of its sorted matches. A file rewritten in
place, under its own name (which changes neither its folder's time nor its name), is caught
when the stream opens it: each local shard's size and modification time are compared with
the recorded ones at its first opening in a process (:func:`check_opened`), which reads
nothing the opening does not already touch. (File times tick with the kernel's coarse clock,
a few milliseconds: a file replaced by one of the same size within that tick of the listing
looks unchanged, as it did to the per-file times this check replaces.)
"""

from __future__ import annotations

import hashlib
import json
import os
import posixpath
from collections.abc import Iterable, Sequence
from typing import Any

from streamload.errors import FormatError
from streamload.formats.base import ShardInfo

__all__ = [
    "FolderIdentity",
    "check_opened",
    "refuse_changed",
    "describe_change",
    "folder_identity",
    "folder_stamp",
    "glob_identity",
    "is_local",
    "listing_digest",
]

FolderIdentity = tuple[Any, str]
"""A folder's (:func:`folder_stamp`, digest of its listing), as JSON gives it back."""

FOLDER_FILES = ("index.json", "state.json", "dataset_info.json", "metadata.yaml")
"""Files of a folder that a listing reads (MDS and LitData orders, ``save_to_disk``'s
files and features, a tatm dtype): rewritten in place, they change neither the folder's time
nor its names, so their own size and time are part of a local folder's stamp."""


def is_local(fs: Any) -> bool:
    """Whether ``fs`` is the local file system."""
    protocols = fs.protocol if isinstance(fs.protocol, tuple) else (fs.protocol,)
    return "file" in protocols or "local" in protocols


def listing_digest(entries: Iterable[tuple[str, int, str]], local: bool) -> str:
    """The digest of a folder listing's (name, size, version) entries: names alone when
    ``local`` (sizes and times would need a ``stat`` per file)."""
    if local:  # names hold no NUL
        names = sorted(name for name, _, _ in entries)
        return hashlib.sha256("\0".join(names).encode()).hexdigest()
    return hashlib.sha256(json.dumps(sorted(entries)).encode()).hexdigest()


def folder_stamp(fs: Any, folder: str) -> list[Any] | None:
    """A local folder's modification time in ns and the (name, size, time) of each of its
    :data:`FOLDER_FILES` (``None`` when remote or unreadable): a ``stat`` or a few."""
    if not is_local(fs):
        return None
    try:
        stamp: list[Any] = [os.stat(folder).st_mtime_ns]
    except OSError:
        return None
    for name in FOLDER_FILES:
        try:
            stat = os.stat(os.path.join(folder, name))
        except OSError:
            continue
        stamp.append([name, stat.st_size, stat.st_mtime_ns])
    return stamp


def _entries(fs: Any, folder: str, local: bool) -> list[tuple[str, int, str]]:
    from streamload.remote.versions import object_version

    if local:
        return [(name, 0, "") for name in os.listdir(folder)]
    out = []
    for info in fs.ls(folder, detail=True):
        size = info.get("size")
        name = posixpath.basename(str(info["name"]).rstrip("/"))
        out.append((name, int(size) if isinstance(size, int) else -1, object_version(info)))
    return out


def folder_identity(fs: Any, folder: str) -> tuple[FolderIdentity, list[tuple[str, int, str]]]:
    """A folder's identity now, and the listing it was taken from.

    Raises:
        OSError: the folder cannot be listed (gone, unreadable).
    """
    local = is_local(fs)
    stamp = folder_stamp(fs, folder)
    entries = _entries(fs, folder, local)
    return (stamp, listing_digest(entries, local)), entries


def glob_identity(fs: Any, pattern: str) -> str:
    """The digest of a glob's sorted matches (names only)."""
    return hashlib.sha256(json.dumps(sorted(fs.glob(pattern))).encode()).hexdigest()


def describe_change(
    folder: str,
    before: Sequence[Sequence[Any]],
    after: Sequence[tuple[str, int, str]],
    local: bool,
) -> str:
    """What changed in ``folder`` between two listings, in words (a few names each); a
    local listing has names only."""
    width = 1 if local else 3
    old = {str(row[0]): tuple(row[1:width]) for row in before}
    new = {row[0]: tuple(row[1:width]) for row in after}
    added = sorted(set(new) - set(old))
    removed = sorted(set(old) - set(new))
    changed = sorted(n for n in set(old) & set(new) if list(old[n]) != list(new[n]))
    parts = [
        f"{label} {_some(names)}"
        for label, names in (("added", added), ("removed", removed), ("changed", changed))
        if names
    ]
    if not parts:  # a local folder whose time moved with the same names
        return f"{folder} was modified (an entry was replaced or rewritten)"
    return f"{folder}: " + "; ".join(parts)


def _some(names: list[str], limit: int = 3) -> str:
    shown = ", ".join(names[:limit])
    return shown + (f" and {len(names) - limit} more" if len(names) > limit else "")


def check_opened(info: ShardInfo) -> str | None:
    """Compare a local shard (and the companions recorded with it) with its recorded size and
    version; ``None`` when they match (or the shard is remote: its reads are pinned to its
    version), else what differs, in words."""
    if info.is_remote or not info.version:
        return None
    try:
        stat = os.stat(info.path)
    except OSError:  # gone or unreadable: opening it names the problem
        return None
    if stat.st_size != info.size or str(stat.st_mtime) != info.version:
        return (
            f"{info.path} changed since the catalog was built ({info.size} bytes modified at "
            f"{info.version} then, {stat.st_size} bytes modified at {stat.st_mtime} now)"
        )
    folder = posixpath.dirname(info.path)
    for name, version in info.companions.items():
        path = posixpath.join(folder, name)
        try:
            now = str(os.stat(path).st_mtime)
        except OSError:  # not beside it (a named mask's own folder), or gone: opening says
            continue
        if version and now != version:
            return (
                f"{path} changed since the catalog was built (modified at {version} then, "
                f"{now} now)"
            )
    return None


def refuse_changed(problem: str) -> FormatError:
    """The error of a shard found changed at opening."""
    return FormatError(
        f"{problem}; a shard must not change while streamload's catalog "
        "of it is in use. The stale catalog entry was removed: start again to describe the "
        "source anew (a resumed state is then checked against the new data)"
    )
