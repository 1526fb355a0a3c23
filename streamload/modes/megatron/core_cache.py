"""megatron-core's own cache of GPT indices, read when it matches and is sound (FORMATS §2.9).

megatron-core 0.16.1 caches a ``GPTDataset``'s indices as
``{md5}-GPTDataset-{split}-{document,sample,shuffle}_index.npy`` plus ``-description.txt``
(``md5`` of the description's JSON) in ``path_to_cache`` (``--data-cache-path``). It finds
them by name alone (all four files present is a hit) and writes them in place, not atomically.
streamload uses such a set when the description hashes to its name, names the same dataset
(by prefix base name), ``num_samples``, split, seed and sequence length, and the arrays have
the dtypes and shapes these inputs give. megatron-core records no digest, so the first time
streamload uses a set it writes one beside it
(``{md5}-GPTDataset-{split}-streamload-megatron-digests.json``, a name megatron-core never
reads) and checks the files against it from then on, as it checks its own
(:func:`streamload.util.array_record.check_arrays`). A damaged set (missing, empty,
truncated or changed files) is never mapped: a warning names it and the indices are built.
In a read-only folder the digests cannot be recorded: size, dtype and shape are checked.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import warnings
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import numpy as np

from streamload.util.array_record import (
    Arrays,
    Files,
    check_arrays,
    is_record,
    record_arrays,
)
from streamload.util.files import write_atomic

__all__ = ["find_megatron_gpt_cache"]

_SIDECAR = "streamload-megatron-digests.json"


def find_megatron_gpt_cache(
    cache_dir: str | None,
    split_name: str,
    identifiers: Mapping[str, Any],
    check: Callable[[Arrays], bool],
) -> tuple[Arrays, Files] | None:
    """megatron-core's cached GPT indices for a dataset, when present, matching and sound.

    Args:
        cache_dir: Folder megatron-core cached into (``path_to_cache``).
        split_name: ``train``, ``valid`` or ``test``.
        identifiers: Expected values of the description: ``dataset_path`` is compared by its
            base name (the data may have moved), the other keys exactly.
        check: Whether the loaded arrays have the expected dtypes and shapes (stale caches:
            ``add_extra_token_to_sequence`` is not in Megatron's hash).

    Returns:
        The arrays (``document_index``, ``sample_index``, ``shuffle_index``) mapped, and their
        files; ``None`` when no matching, complete, sound set exists (a damaged one is named
        in a warning).
    """
    if cache_dir is None or not os.path.isdir(cache_dir):
        return None
    suffix = f"-GPTDataset-{split_name}-description.txt"
    for desc in sorted(Path(cache_dir).glob(f"*{suffix}")):
        try:
            raw = desc.read_bytes()
        except OSError:
            continue
        digest = desc.name[: -len(suffix)]
        if hashlib.md5(raw, usedforsecurity=False).hexdigest() != digest:
            continue
        try:
            found = json.loads(raw)
        except ValueError:
            continue
        if not _matches(found, identifiers):
            continue
        stem = desc.name[: -len("description.txt")]
        files = {
            name: desc.with_name(f"{stem}{name}.npy")
            for name in ("document_index", "sample_index", "shuffle_index")
        }
        arrays = _open_megatron(desc.with_name(f"{stem}{_SIDECAR}"), files, check)
        if arrays is not None:
            return arrays, {name: str(path) for name, path in files.items()}
    return None


def _open_megatron(
    sidecar: Path, files: Mapping[str, Path], check: Callable[[Arrays], bool]
) -> Arrays | None:
    """megatron-core's arrays, checked against the digests streamload recorded beside them
    (recorded now, at the first use, where the folder is writable)."""
    try:
        record = json.loads(sidecar.read_text())
    except (OSError, ValueError):
        record = None
    if is_record(record) and set(record) == set(files):  # else absent or damaged: record anew
        checked = check_arrays(files, record)
        if isinstance(checked, str):
            _not_used(f"{checked} (digests recorded in {sidecar})")
            return None
        arrays, restamp = checked
        if restamp:
            record = {name: record[name] | restamp.get(name, {}) for name in record}
            with contextlib.suppress(OSError):
                write_atomic(sidecar, json.dumps(record, indent=2, sort_keys=True))
        return arrays if check(arrays) else None
    arrays = {}
    for name, path in files.items():
        try:
            arrays[name] = np.load(path, mmap_mode="r", allow_pickle=False)
        except (OSError, ValueError, EOFError) as exc:  # missing, empty, truncated, garbage
            _not_used(f"{path} is not a readable .npy file ({exc})")
            return None
    if not check(arrays):
        return None
    with contextlib.suppress(OSError):  # a read-only folder: size, dtype and shape only
        write_atomic(sidecar, json.dumps(record_arrays(files), indent=2, sort_keys=True))
    return arrays


def _not_used(problem: str) -> None:
    warnings.warn(
        f"streamload: megatron-core's index cache: {problem}; not using it, building the "
        "indices instead",
        stacklevel=5,
    )


def _matches(found: Any, expected: Mapping[str, Any]) -> bool:
    if not isinstance(found, dict) or found.get("class") != "GPTDataset":
        return False
    for name, value in expected.items():
        if name == "dataset_path":
            if os.path.basename(str(found.get(name, ""))) != os.path.basename(str(value)):
                return False
        elif found.get(name) != value:
            return False
    return True
