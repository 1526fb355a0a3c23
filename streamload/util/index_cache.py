"""On-disk cache of built index arrays: content-addressed, verified, atomic, built once, mapped.

Each kind of arrays (:class:`CacheKind`: Megatron indices, packing and piece plans, the shard
catalog) has files ``{H}-streamload-{kind}-{array}.npy`` and ``…-description.json``, ``H``
the sha256 of the description (every input of the arrays). Arrays are written under a
temporary name and renamed; the description, which records each array
(:mod:`streamload.util.array_record`), last, so its presence means the set is complete. Two
jobs sharing the folder write identical bytes under identical names.

Every load checks each file's size and ``.npy`` header against the record (O(1)), and its
sha256 only when its stat differs from the recorded one (a copied, restored or edited file).
A matching digest records the new stat, so the next load is O(1) again. A set that fails a
check (or its caller's ``check``) is rebuilt with a warning naming what did not match.

Who builds: with ``torch.distributed`` initialized and ``rank_zero_builds`` (Megatron's way),
rank 0 builds and the others wait on a barrier (a rank 0 that fails still reaches it, so the
others fail too instead of hanging); otherwise (and always for packing plans: one builder
per folder, so per node when the folder is node-local) the first process to create
``{H}...lock`` builds and the others poll for the description (up to :data:`WAIT_SECONDS`,
then they build themselves), logging on logger ``streamload.<kind>`` while they wait. The
lock names its builder's host and pid: a lock left by a killed builder of this host, or one
naming no owner (empty or torn: its builder died between creating and writing it) older than
:data:`LOCK_GRACE_SECONDS`, is taken over at once. The builder first removes the temporary
files that killed writers left in the folder (:func:`streamload.util.files.remove_stale_temps`:
only those whose writer is provably gone).

megatron-core's own cache files are read by :mod:`streamload.modes.megatron.core_cache`.
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
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from streamload.errors import ConfigError
from streamload.util.array_record import (
    RECORD_FIELDS,
    Arrays,
    Files,
    check_arrays,
    is_record,
    record_arrays,
)
from streamload.util.files import atomic_output, remove_stale_temps, write_atomic

__all__ = [
    "LOCK_GRACE_SECONDS",
    "CacheUnwritable",
    "MEGATRON",
    "PACKING",
    "WAIT_SECONDS",
    "CacheKind",
    "cache_folder",
    "cache_key",
    "load_or_build",
]

WAIT_SECONDS = 600.0
"""How long a process waits for another one's build before building itself."""
LOCK_GRACE_SECONDS = 3.0
"""Age after which a lock naming no owner counts as abandoned (its writer names itself at once)."""
_LOG_SECONDS = 30.0  # a process still waiting says so (at WARNING) this often
_POLL_SECONDS = 0.05


@dataclass(frozen=True)
class CacheKind:
    """What a set of cached arrays is: names its files, its logger and its messages."""

    name: str
    """File name part (``{H}-streamload-{name}-…``) and logger ``streamload.{name}``."""
    what: str
    """The arrays in words, for messages (``"the Megatron indices"``)."""

    @property
    def prefix(self) -> str:
        return f"streamload-{self.name}"

    @property
    def log(self) -> logging.Logger:
        return logging.getLogger(f"streamload.{self.name}")


MEGATRON = CacheKind("megatron", "the Megatron indices")
PACKING = CacheKind("packing", "the packing plan")
VSL = CacheKind("vsl", "the piece plan")


def cache_key(description: Mapping[str, Any]) -> str:
    """sha256 hex of the canonical JSON of ``description``."""
    text = json.dumps(description, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()


def cache_folder(cache_dir: str, kind: CacheKind = MEGATRON) -> Path:
    """``sampling.cache_dir`` as a folder, made if missing.

    Raises:
        ConfigError: it is a file (or lies below one), or it cannot be made.
    """
    folder = Path(cache_dir)
    if folder.is_dir():
        return folder
    if folder.exists() and not folder.is_dir():  # (made by another process meanwhile: fine)
        raise CacheUnwritable(
            f"sampling.cache_dir = {cache_dir!r} is a file; expected a folder for {kind.what}"
        )
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except (NotADirectoryError, FileExistsError):
        raise CacheUnwritable(
            f"sampling.cache_dir = {cache_dir!r} lies below a file; expected a folder for "
            f"{kind.what}"
        ) from None
    except OSError as exc:
        raise _unwritable(folder, exc, kind) from None
    return folder


class CacheUnwritable(ConfigError):
    """The folder cannot hold the cache (a file, or unwritable): a caller for whom the cache
    is a speed-up goes on without it."""


def _unwritable(folder: Path, exc: OSError, kind: CacheKind) -> ConfigError:
    return CacheUnwritable(
        f"sampling.cache_dir = '{folder}': cannot write {kind.what} there "
        f"({exc.strerror or exc}); expected a writable folder: fix its permissions or point "
        "cache_dir elsewhere"
    )


def load_or_build(
    cache_dir: str | None,
    description: Mapping[str, Any],
    build: Callable[[], Arrays],
    kind: CacheKind = MEGATRON,
    rank_zero_builds: bool = True,
    check: Callable[[Arrays], str | None] | None = None,
) -> tuple[Arrays, Files | None]:
    """The arrays for ``description``: from the cache, or built (and cached) once.

    Args:
        cache_dir: The cache folder (``None``: build in memory, cache nothing).
        description: Every input of the arrays (its sha256 names the files).
        build: Builds the arrays (called only when no sound cache exists).
        kind: What the arrays are (file names, logger, messages).
        rank_zero_builds: With ``torch.distributed`` initialized, rank 0 builds behind a
            barrier; ``False``: the lock file alone decides, one builder per folder.
        check: Whether a sound cached set still describes its inputs (``None``: yes, else
            what changed, in words): a set it refuses is rebuilt after a warning on the
            kind's logger (the catalog's data listings, :mod:`streamload.catalog.store`).

    Returns:
        The arrays (memory maps when cached) and the files they were mapped from
        (``None`` when ``cache_dir`` is unset).

    Raises:
        ConfigError: ``cache_dir`` is a file, or holds no sound cache and cannot be written.
    """
    if cache_dir is None:
        return build(), None
    entry = _Entry(cache_folder(cache_dir, kind), cache_key(description), kind, check)
    distributed = _distributed() if rank_zero_builds else None
    if distributed is None:
        return entry.open() or _build_once(entry, description, build)
    return _build_on_rank_zero(distributed, entry, description, build)


@dataclass(frozen=True)
class _Entry:
    """One cached set: its folder, key and kind, and its files."""

    folder: Path
    key: str
    kind: CacheKind
    check: Callable[[Arrays], str | None] | None = None

    @property
    def description(self) -> Path:
        """Written last: its presence means the set is complete."""
        return self.folder / f"{self.key}-{self.kind.prefix}-description.json"

    @property
    def lock(self) -> Path:
        return self.folder / f"{self.key}-{self.kind.prefix}.lock"

    def paths(self, names: list[str]) -> dict[str, Path]:
        return {n: self.folder / f"{self.key}-{self.kind.prefix}-{n}.npy" for n in names}

    def save(self, description: Mapping[str, Any], arrays: Arrays) -> tuple[Arrays, Files]:
        """Write ``arrays`` as this set and map them back."""
        _write(self, description, arrays)
        files = self.paths(list(arrays))
        mapped = {n: np.load(p, mmap_mode="r", allow_pickle=False) for n, p in files.items()}
        return mapped, {name: str(path) for name, path in files.items()}

    def open(self) -> tuple[Arrays, Files] | None:
        """The checked, mapped set; ``None`` when absent or unsound (then removed from view,
        with a warning, so that it is rebuilt)."""
        return _open_own(self)


def _build_on_rank_zero(
    dist: Any, entry: _Entry, description: Mapping[str, Any], build: Callable[[], Arrays]
) -> tuple[Arrays, Files]:
    found, error = None, None
    if dist.get_rank() == 0:
        try:
            found = entry.open() or entry.save(description, build())
        except Exception as exc:  # every rank must reach the barrier, or the others hang there
            error = exc
    dist.barrier()
    if error is not None:
        raise error
    # Files rank 0 wrote but this rank cannot see (a node-local folder) are built here too.
    return found or entry.open() or entry.save(description, build())


def _build_once(
    entry: _Entry, description: Mapping[str, Any], build: Callable[[], Arrays]
) -> tuple[Arrays, Files]:
    fd = _take_lock(entry)
    if not isinstance(fd, int):
        return fd if fd is not None else entry.save(description, build())
    try:
        with os.fdopen(fd, "w") as fh:
            fh.write(f"{socket.gethostname()} {os.getpid()}")
        # Another builder may have finished between our last look and taking the lock.
        return entry.open() or entry.save(description, build())
    finally:
        with contextlib.suppress(OSError):
            os.unlink(entry.lock)


def _take_lock(entry: _Entry) -> int | tuple[Arrays, Files] | None:
    """The lock's file descriptor; or the set another process finished meanwhile; or
    ``None`` after :data:`WAIT_SECONDS` of waiting (then this process builds too)."""
    lock, log = entry.lock, entry.kind.log
    started = time.monotonic()
    next_log = started
    while True:
        try:
            return os.open(lock, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o666)
        except FileExistsError:
            pass
        except OSError as exc:
            raise _unwritable(entry.folder, exc, entry.kind) from None
        if entry.description.exists() and (found := entry.open()) is not None:
            return found
        if _lock_is_dead(lock):  # its builder is gone: nobody will finish it
            log.info("streamload: taking over %s: %s is gone", lock, _owner_text(lock))
            with contextlib.suppress(OSError):
                os.unlink(lock)
            continue
        waited = time.monotonic() - started
        if waited >= WAIT_SECONDS:  # the builder is on another host, or very slow
            log.warning("streamload: waited %.0f s on %s; building here", waited, lock)
            return None
        if time.monotonic() >= next_log:
            level = logging.INFO if waited < _LOG_SECONDS else logging.WARNING
            log.log(level, "streamload: waiting %.0f s for %s to build %s (%s); building "
                    "here after %.0f s", waited, _owner_text(lock), entry.kind.what, lock,
                    WAIT_SECONDS)  # fmt: skip
            next_log += _LOG_SECONDS
        time.sleep(_POLL_SECONDS)


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
def _write(entry: _Entry, description: Mapping[str, Any], arrays: Arrays) -> None:
    try:
        entry.folder.mkdir(parents=True, exist_ok=True)
        remove_stale_temps(entry.folder)  # what killed builds left
        files = entry.paths(list(arrays))
        for name, path in files.items():
            with atomic_output(path) as tmp, open(tmp, "wb") as out:
                np.save(out, np.ascontiguousarray(arrays[name]), allow_pickle=False)
        body = dict(description) | {"arrays": record_arrays(files)}
        write_atomic(entry.description, json.dumps(body, indent=2, sort_keys=True))
    except OSError as exc:
        raise _unwritable(entry.folder, exc, entry.kind) from exc


def _open_own(entry: _Entry) -> tuple[Arrays, Files] | None:
    done = entry.description
    try:
        text = done.read_text()
    except FileNotFoundError:
        return None
    except OSError as exc:
        _unsound(entry, f"{done} cannot be read ({exc.strerror})")
        return None
    body, problem = _parse_description(text, entry.key)
    if body is None:
        _unsound(entry, f"{done} {problem}")
        return None
    record = body["arrays"]
    files = entry.paths(list(record))
    checked = check_arrays(files, record)
    if isinstance(checked, str):
        _unsound(entry, checked)
        return None
    arrays, restamp = checked
    if entry.check is not None and (stale := entry.check(arrays)) is not None:
        with contextlib.suppress(OSError):  # so that waiting processes wait for the rebuild
            done.unlink()
        entry.kind.log.warning("streamload: %s in %s is out of date: %s; building it again",
                               entry.kind.what, entry.folder, stale)  # fmt: skip
        return None
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
        return None, f"lacks some of {sorted(RECORD_FIELDS)} for an array"
    return body, ""


def _unsound(entry: _Entry, problem: str) -> None:
    with contextlib.suppress(OSError):  # so that waiting processes wait for the rebuild
        entry.description.unlink()
    what = entry.kind.what
    warnings.warn(f"streamload: cache of {what}: {problem}; rebuilding {what}", stacklevel=6)
