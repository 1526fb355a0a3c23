"""On-disk cache of Megatron indices: content-addressed, atomic, built once, mapped on load.

Our own files are ``{H}-streamload-megatron-{array}.npy`` plus
``{H}-streamload-megatron-description.json``, where ``H`` is the sha256 of the description
(every input of the indices: data fingerprints, split, samples, seq_len, seed, flags). Each
array is written under a temporary name and renamed; the description is renamed last, so
its presence means the set is complete. Two jobs sharing the folder write identical bytes
under identical names, so a race only costs a duplicate build.

Who builds: with ``torch.distributed`` initialized, rank 0 builds and the others wait on a
barrier; otherwise the first process to create ``{H}...lock`` builds and the others poll for
the description (up to :data:`WAIT_SECONDS`, then they build themselves). The lock names its
builder's host and pid: a lock left by a killed builder of this host is taken over at once.

megatron-core's own cache (``{md5}-GPTDataset-{split}-{document,sample,shuffle}_index.npy``
and ``-description.txt``, FORMATS §2.9) is read when a description matches the dataset's
identifiers, its md5 matches the file name and the arrays have the expected shapes.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import socket
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import numpy as np

from streamload.util.files import atomic_output

__all__ = [
    "WAIT_SECONDS",
    "cache_key",
    "find_megatron_gpt_cache",
    "load_or_build",
]

WAIT_SECONDS = 600.0
"""How long a process waits for another one's build before building itself."""
_POLL_SECONDS = 0.05
_PREFIX = "streamload-megatron"

Arrays = dict[str, np.ndarray]


def cache_key(description: Mapping[str, Any]) -> str:
    """sha256 hex of the canonical JSON of ``description``."""
    text = json.dumps(description, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()


def _paths(folder: Path, key: str, names: list[str]) -> dict[str, Path]:
    return {name: folder / f"{key}-{_PREFIX}-{name}.npy" for name in names}


def _load(files: Mapping[str, Path]) -> Arrays:
    return {name: np.load(path, mmap_mode="r", allow_pickle=False) for name, path in files.items()}


def _write(folder: Path, key: str, description: Mapping[str, Any], arrays: Arrays) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    for name, path in _paths(folder, key, list(arrays)).items():
        with atomic_output(path) as tmp, open(tmp, "wb") as out:
            np.save(out, np.ascontiguousarray(arrays[name]), allow_pickle=False)
    body = dict(description) | {"arrays": sorted(arrays)}
    with atomic_output(folder / f"{key}-{_PREFIX}-description.json") as tmp:
        Path(tmp).write_text(json.dumps(body, indent=2, sort_keys=True))


def _read_description(path: Path) -> list[str] | None:
    try:
        return list(json.loads(path.read_text())["arrays"])
    except (OSError, ValueError, KeyError, TypeError):
        return None


def load_or_build(
    cache_dir: str | None, description: Mapping[str, Any], build: Callable[[], Arrays]
) -> tuple[Arrays, dict[str, str] | None]:
    """The arrays for ``description``: from the cache, or built (and cached) once per job.

    Returns:
        The arrays (memory maps when cached) and the files they were mapped from
        (``None`` when ``cache_dir`` is unset).
    """
    if cache_dir is None:
        return build(), None
    folder = Path(cache_dir)
    key = cache_key(description)
    done = folder / f"{key}-{_PREFIX}-description.json"
    distributed = _distributed()
    if distributed is not None:  # every rank reaches the barrier, whoever finds the files
        if distributed.get_rank() == 0 and not done.exists():
            _write(folder, key, description, build())
        distributed.barrier()
    elif not done.exists():
        _build_once(folder, key, description, build, done)
    names = _read_description(done)
    if names is None:  # vanished or unreadable (another job's cleanup): build here
        _write(folder, key, description, build())
        names = _read_description(done) or []
    files = _paths(folder, key, names)
    return _load(files), {name: str(path) for name, path in files.items()}


def _build_once(
    folder: Path, key: str, description: Mapping[str, Any], build: Callable[[], Arrays], done: Path
) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    lock = folder / f"{key}-{_PREFIX}.lock"
    deadline = time.monotonic() + WAIT_SECONDS
    while True:
        try:
            fd = os.open(lock, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
        except FileExistsError:
            if done.exists():
                return
            if _stale(lock):  # its builder was killed: nobody will finish it
                with contextlib.suppress(OSError):
                    os.unlink(lock)
                continue
            if time.monotonic() >= deadline:  # the builder is on another host, or very slow
                _write(folder, key, description, build())
                return
            time.sleep(_POLL_SECONDS)
            continue
        with os.fdopen(fd, "w") as fh:
            fh.write(f"{socket.gethostname()} {os.getpid()}")
        try:
            _write(folder, key, description, build())
        finally:
            with contextlib.suppress(OSError):
                os.unlink(lock)
        return


def _stale(lock: Path) -> bool:
    """Whether ``lock`` was taken by a process of this host that no longer runs."""
    try:
        host, pid = lock.read_text().split()
        if host != socket.gethostname():
            return False
        os.kill(int(pid), 0)
    except ProcessLookupError:
        return True
    except (OSError, ValueError):  # being written, unreadable, or not ours to signal
        return False
    return False


def _distributed() -> Any:
    try:
        import torch.distributed as dist
    except ImportError:  # pragma: no cover - torch is a dependency
        return None
    return dist if dist.is_available() and dist.is_initialized() else None


def find_megatron_gpt_cache(
    cache_dir: str | None,
    split_name: str,
    identifiers: Mapping[str, Any],
    check: Callable[[Arrays], bool],
) -> tuple[Arrays, dict[str, str]] | None:
    """megatron-core's cached GPT indices for a dataset, when present and matching.

    Args:
        cache_dir: Folder megatron-core cached into (``path_to_cache``).
        split_name: ``train``, ``valid`` or ``test``.
        identifiers: Expected values of the description: ``dataset_path`` is compared by its
            base name (the data may have moved), the other keys exactly.
        check: Whether the loaded arrays have the expected dtypes and shapes (stale caches:
            ``add_extra_token_to_sequence`` is not in Megatron's hash).

    Returns:
        The arrays (``document_index``, ``sample_index``, ``shuffle_index``) mapped, and their
        files; ``None`` when no matching, complete, consistent set exists.
    """
    if cache_dir is None or not os.path.isdir(cache_dir):
        return None
    suffix = f"-GPTDataset-{split_name}-description.txt"
    for desc in sorted(Path(cache_dir).glob(f"*{suffix}")):
        raw = desc.read_bytes()
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
        if not all(path.exists() for path in files.values()):
            continue
        try:
            arrays = {n: np.load(p, mmap_mode="r", allow_pickle=False) for n, p in files.items()}
        except (OSError, ValueError):
            continue
        if check(arrays):
            return arrays, {name: str(path) for name, path in files.items()}
    return None


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
