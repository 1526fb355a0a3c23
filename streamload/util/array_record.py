"""Records of cached ``.npy`` arrays, and the check that maps a file only if it matches its
record: size and header always (O(1)), sha256 only when the file's stat changed.

A record holds, per array, the file's size, the array's dtype and shape, the file's sha256
and its stat (size, mtime, ctime, inode). Any write sets ctime, which no user call can set
back, so a file whose stat still matches was not changed since it was hashed; a copied,
restored or edited file is hashed again. Used by the index cache
(:mod:`streamload.util.index_cache`) and for megatron-core's own cache files
(:mod:`streamload.modes.megatron.core_cache`).
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

__all__ = [
    "RECORD_FIELDS",
    "Arrays",
    "Files",
    "Record",
    "check_arrays",
    "is_record",
    "record_arrays",
]

Arrays = dict[str, np.ndarray]
Files = dict[str, str]
"""Per array: the file it is mapped from."""
Record = dict[str, dict[str, Any]]
"""Per array: ``bytes``, ``dtype`` (``numpy.dtype.str``), ``shape``, ``sha256``, ``stat``."""
RECORD_FIELDS = frozenset({"bytes", "dtype", "shape", "sha256", "stat"})
"""The keys of one array's record."""


def _stat(path: Path) -> list[int]:
    info = path.stat()
    return [info.st_size, info.st_mtime_ns, info.st_ctime_ns, info.st_ino]


def _sha256(path: Path) -> str:
    # Not util.files.file_sha256: it remembers digests by mtime, which a user can set back.
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        while block := fh.read(1 << 22):
            digest.update(block)
    return digest.hexdigest()


def is_record(value: Any) -> bool:
    """Whether ``value`` has the shape of a :data:`Record` (what :func:`check_arrays` reads)."""
    return isinstance(value, dict) and all(
        isinstance(r, dict) and set(r) >= RECORD_FIELDS for r in value.values()
    )


def record_arrays(files: Mapping[str, Path]) -> Record:
    """What :func:`check_arrays` compares, for files just written (or first used)."""
    record = {}
    for name, path in files.items():
        array = np.load(path, mmap_mode="r", allow_pickle=False)
        stat = _stat(path)
        record[name] = {"bytes": stat[0], "dtype": array.dtype.str, "shape": list(array.shape),
                        "sha256": _sha256(path), "stat": stat}  # fmt: skip
    return record


def check_arrays(files: Mapping[str, Path], record: Record) -> tuple[Arrays, Record] | str:
    """The mapped arrays, checked against ``record`` (size and header always; sha256 when a
    file's stat changed), and the new stats of the files verified by digest; or a sentence
    saying what is wrong (it names the file)."""
    arrays, restamp = {}, {}
    for name, path in files.items():
        want = record[name]
        try:
            stat = _stat(path)
        except FileNotFoundError:
            return f"{path} is missing"
        except OSError as exc:
            return f"{path} cannot be read ({exc.strerror})"
        if stat[0] != want["bytes"]:
            return f"{path} is {stat[0]} bytes, expected {want['bytes']} (truncated or replaced)"
        try:
            array = np.load(path, mmap_mode="r", allow_pickle=False)
        except (OSError, ValueError, EOFError) as exc:
            return f"{path} is not a readable .npy file ({exc})"
        if array.dtype.str != want["dtype"] or list(array.shape) != want["shape"]:
            return (f"{path} holds dtype {array.dtype.str} shape {list(array.shape)}, expected "
                    f"dtype {want['dtype']} shape {want['shape']}")  # fmt: skip
        if stat != want["stat"]:
            digest = _sha256(path)
            if digest != want["sha256"]:
                return f"{path} changed: sha256 {digest}, expected {want['sha256']}"
            restamp[name] = {"stat": stat}
        arrays[name] = array
    return arrays, restamp
