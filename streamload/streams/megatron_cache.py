"""On-disk cache of Megatron indices: content-addressed, verified, atomic, built once, mapped.

Our own files are ``{H}-streamload-megatron-{array}.npy`` plus
``{H}-streamload-megatron-description.json``, where ``H`` is the sha256 of the description
(every input of the indices: data fingerprints, split, samples, seq_len, seed, flags). Each
array is written under a temporary name and renamed; the description is written last, so its
presence means the set is complete. It also records, per array, the file's size, the array's
dtype and shape, the file's sha256 and its stat (size, mtime, ctime, inode). Two jobs sharing
the folder write identical bytes under identical names, so a race only costs a duplicate build.

Every load checks each file's size and ``.npy`` header against the record (O(1)), and its
sha256 only when its stat differs from the recorded one: a copied or restored cache, or a file
changed in place (any write sets ctime, which no user call can set back). A matching digest
records the new stat, so the next load is O(1) again. A set that fails a check is rebuilt with
a warning naming the file and what did not match; nothing unchecked is ever mapped.

Who builds: with ``torch.distributed`` initialized, rank 0 builds and the others wait on a
barrier (a rank 0 that fails still reaches it, so the others fail too instead of hanging);
otherwise the first process to create ``{H}...lock`` builds and the others poll for the
description (up to :data:`WAIT_SECONDS`, then they build themselves), logging on logger
``streamload.megatron`` while they wait. The lock names its builder's host and pid: a lock
left by a killed builder of this host, or one naming no owner (empty or torn: its builder died
between creating and writing it) older than :data:`LOCK_GRACE_SECONDS`, is taken over at
once. The builder first removes the temporary files that killed writers left in the folder
(:func:`streamload.util.files.remove_stale_temps`: only those whose writer is provably gone).

megatron-core's own cache files are read by :mod:`streamload.streams.megatron_core_cache`,
with the same checks (:func:`check_arrays`).

``cache_dir`` that is a file, or that cannot be made or written when indices must be saved, is
a :class:`~streamload.errors.ConfigError` naming it; a complete, sound cache in a read-only
folder is read (as megatron-core does; new stats cannot be recorded there, so a copied cache
in a read-only folder is hashed at each load).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import socket
import time
import warnings
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import numpy as np

from streamload.errors import ConfigError
from streamload.util.files import atomic_output, remove_stale_temps, write_atomic

__all__ = [
    "LOCK_GRACE_SECONDS",
    "WAIT_SECONDS",
    "cache_folder",
    "cache_key",
    "check_arrays",
    "is_record",
    "load_or_build",
    "record_arrays",
]

WAIT_SECONDS = 600.0
"""How long a process waits for another one's build before building itself."""
LOCK_GRACE_SECONDS = 3.0
"""Age after which a lock naming no owner counts as abandoned (its writer names itself at once)."""
_LOG_SECONDS = 30.0  # a process still waiting says so (at WARNING) this often
_POLL_SECONDS = 0.05
_PREFIX = "streamload-megatron"
_LOG = logging.getLogger("streamload.megatron")

Arrays = dict[str, np.ndarray]
Files = dict[str, str]
Record = dict[str, dict[str, Any]]
"""Per array: ``bytes``, ``dtype`` (``numpy.dtype.str``), ``shape``, ``sha256``, ``stat``."""
_RECORD_FIELDS = frozenset({"bytes", "dtype", "shape", "sha256", "stat"})


def cache_key(description: Mapping[str, Any]) -> str:
    """sha256 hex of the canonical JSON of ``description``."""
    text = json.dumps(description, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()


def cache_folder(cache_dir: str) -> Path:
    """``sampling.cache_dir`` as a folder, made if missing.

    Raises:
        ConfigError: it is a file (or lies below one), or it cannot be made.
    """
    folder = Path(cache_dir)
    if folder.is_dir():
        return folder
    if folder.exists():
        raise ConfigError(
            f"sampling.cache_dir = {cache_dir!r} is a file; expected a folder for the Megatron "
            "indices"
        )
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except (NotADirectoryError, FileExistsError):
        raise ConfigError(
            f"sampling.cache_dir = {cache_dir!r} lies below a file; expected a folder for the "
            "Megatron indices"
        ) from None
    except OSError as exc:
        raise _unwritable(folder, exc) from None
    return folder


def _unwritable(folder: Path, exc: OSError) -> ConfigError:
    return ConfigError(
        f"sampling.cache_dir = '{folder}': cannot write the Megatron indices there "
        f"({exc.strerror or exc}); expected a writable folder: fix its permissions or point "
        "cache_dir elsewhere"
    )


def load_or_build(
    cache_dir: str | None, description: Mapping[str, Any], build: Callable[[], Arrays]
) -> tuple[Arrays, Files | None]:
    """The arrays for ``description``: from the cache, or built (and cached) once per job.

    Returns:
        The arrays (memory maps when cached) and the files they were mapped from
        (``None`` when ``cache_dir`` is unset).

    Raises:
        ConfigError: ``cache_dir`` is a file, or holds no sound cache and cannot be written.
    """
    if cache_dir is None:
        return build(), None
    folder = cache_folder(cache_dir)
    key = cache_key(description)
    distributed = _distributed()
    if distributed is None:
        found = _open_own(folder, key) or _build_once(folder, key, description, build)
    else:
        found = _build_on_rank_zero(distributed, folder, key, description, build)
    return found


def _build_on_rank_zero(
    dist: Any, folder: Path, key: str, description: Mapping[str, Any], build: Callable[[], Arrays]
) -> tuple[Arrays, Files]:
    found, error = None, None
    if dist.get_rank() == 0:
        try:
            found = _open_own(folder, key) or _save(folder, key, description, build())
        except Exception as exc:  # every rank must reach the barrier, or the others hang there
            error = exc
    dist.barrier()
    if error is not None:
        raise error
    # Files rank 0 wrote but this rank cannot see (a node-local folder) are built here too.
    return found or _open_own(folder, key) or _save(folder, key, description, build())


def _build_once(
    folder: Path, key: str, description: Mapping[str, Any], build: Callable[[], Arrays]
) -> tuple[Arrays, Files]:
    lock = folder / f"{key}-{_PREFIX}.lock"
    done = _description_path(folder, key)
    started = time.monotonic()
    next_log = started
    while True:
        try:
            fd = os.open(lock, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o666)
            break
        except FileExistsError:
            pass
        except OSError as exc:
            raise _unwritable(folder, exc) from None
        if done.exists() and (found := _open_own(folder, key)) is not None:
            return found
        if _lock_is_dead(lock):  # its builder is gone: nobody will finish it
            _LOG.info("streamload: taking over %s: %s is gone", lock, _owner_text(lock))
            with contextlib.suppress(OSError):
                os.unlink(lock)
            continue
        waited = time.monotonic() - started
        if waited >= WAIT_SECONDS:  # the builder is on another host, or very slow
            _LOG.warning("streamload: waited %.0f s on %s; building here", waited, lock)
            return _save(folder, key, description, build())
        if time.monotonic() >= next_log:
            level = logging.INFO if waited < _LOG_SECONDS else logging.WARNING
            _LOG.log(level, "streamload: waiting %.0f s for %s to build the Megatron indices "
                     "(%s); building here after %.0f s", waited, _owner_text(lock), lock,
                     WAIT_SECONDS)  # fmt: skip
            next_log += _LOG_SECONDS
        time.sleep(_POLL_SECONDS)
    try:
        with os.fdopen(fd, "w") as fh:
            fh.write(f"{socket.gethostname()} {os.getpid()}")
        # Another builder may have finished between our last look and taking the lock.
        return _open_own(folder, key) or _save(folder, key, description, build())
    finally:
        with contextlib.suppress(OSError):
            os.unlink(lock)


def _owner(text: str) -> tuple[str, int] | None:
    """``(host, pid)`` a lock names, or ``None`` (empty, torn or garbage)."""
    parts = text.split()
    if len(parts) == 2 and parts[1].isdecimal() and 0 < int(parts[1]) < 1 << 31:
        return parts[0], int(parts[1])
    return None


def _owner_text(lock: Path) -> str:
    try:
        owner = _owner(lock.read_text(errors="replace"))
    except OSError:
        owner = None
    return "a builder that named no owner" if owner is None else f"pid {owner[1]} on {owner[0]}"


def _lock_is_dead(lock: Path) -> bool:
    """Whether nobody will release ``lock``: it names a process of this host that no longer
    runs, or it names no owner and is older than :data:`LOCK_GRACE_SECONDS`."""
    try:
        text = lock.read_text(errors="replace")
        age = time.time() - lock.stat().st_mtime
    except FileNotFoundError:
        return False  # released meanwhile: the next attempt takes it
    except OSError:  # unreadable: as good as empty
        text, age = "", LOCK_GRACE_SECONDS + 1
    owner = _owner(text)
    if owner is None:
        return age > LOCK_GRACE_SECONDS
    host, pid = owner
    if host != socket.gethostname():
        return False  # not ours to check: wait for WAIT_SECONDS
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except OSError:  # EPERM: another user's live process
        return False
    return False


def _distributed() -> Any:
    try:
        import torch.distributed as dist
    except ImportError:  # pragma: no cover - torch is a dependency
        return None
    return dist if dist.is_available() and dist.is_initialized() else None


# -- our own files ---------------------------------------------------------------------------
def _description_path(folder: Path, key: str) -> Path:
    return folder / f"{key}-{_PREFIX}-description.json"


def _paths(folder: Path, key: str, names: list[str]) -> dict[str, Path]:
    return {name: folder / f"{key}-{_PREFIX}-{name}.npy" for name in names}


def _save(
    folder: Path, key: str, description: Mapping[str, Any], arrays: Arrays
) -> tuple[Arrays, Files]:
    """Write ``arrays`` as the cache of ``key`` and map them back."""
    _write(folder, key, description, arrays)
    files = _paths(folder, key, list(arrays))
    mapped = {n: np.load(p, mmap_mode="r", allow_pickle=False) for n, p in files.items()}
    return mapped, {name: str(path) for name, path in files.items()}


def _write(folder: Path, key: str, description: Mapping[str, Any], arrays: Arrays) -> None:
    try:
        folder.mkdir(parents=True, exist_ok=True)
        remove_stale_temps(folder)  # what killed builds left
        files = _paths(folder, key, list(arrays))
        for name, path in files.items():
            with atomic_output(path) as tmp, open(tmp, "wb") as out:
                np.save(out, np.ascontiguousarray(arrays[name]), allow_pickle=False)
        body = dict(description) | {"arrays": record_arrays(files)}
        write_atomic(_description_path(folder, key), json.dumps(body, indent=2, sort_keys=True))
    except OSError as exc:
        raise _unwritable(folder, exc) from exc


def _open_own(folder: Path, key: str) -> tuple[Arrays, Files] | None:
    """Our checked, mapped set for ``key``; ``None`` when absent or unsound (then removed
    from view, with a warning, so that it is rebuilt)."""
    done = _description_path(folder, key)
    try:
        text = done.read_text()
    except FileNotFoundError:
        return None
    except OSError as exc:
        _unsound(done, f"{done} cannot be read ({exc.strerror})")
        return None
    body, problem = _parse_description(text, key)
    if body is None:
        _unsound(done, f"{done} {problem}")
        return None
    record = body["arrays"]
    files = _paths(folder, key, list(record))
    checked = check_arrays(files, record)
    if isinstance(checked, str):
        _unsound(done, checked)
        return None
    arrays, restamp = checked
    if restamp:  # verified by digest: record the new stats so the next load is O(1)
        body["arrays"] = {name: record[name] | restamp.get(name, {}) for name in record}
        with contextlib.suppress(OSError):  # a read-only folder: check the digests each time
            write_atomic(done, json.dumps(body, indent=2, sort_keys=True))
    return arrays, {name: str(path) for name, path in files.items()}


def _parse_description(text: str, key: str) -> tuple[dict[str, Any] | None, str]:
    try:
        body = json.loads(text)
    except ValueError:
        return None, "is not JSON (torn or overwritten)"
    if not isinstance(body, dict) or not isinstance(body.get("arrays"), dict):
        return None, "records no array digests (written by an older streamload)"
    if cache_key({k: v for k, v in body.items() if k != "arrays"}) != key:
        return None, "does not hash to its name (edited)"
    if not is_record(body["arrays"]):
        return None, f"lacks some of {sorted(_RECORD_FIELDS)} for an array"
    return body, ""


def _unsound(done: Path, problem: str) -> None:
    with contextlib.suppress(OSError):  # so that waiting processes wait for the rebuild
        done.unlink()
    warnings.warn(
        f"streamload: Megatron index cache: {problem}; rebuilding the indices", stacklevel=5
    )


# -- checks, shared with megatron-core's files (megatron_core_cache.py) ------------------
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
        isinstance(r, dict) and set(r) >= _RECORD_FIELDS for r in value.values()
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
