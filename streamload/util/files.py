"""Atomic file output, the one way streamload writes a file that another process may read.

Every writer (format shards and indices, caches, markers, catalogs) writes under a hidden
temporary name beside its target, ``.NAME.HOST-PID-XXXXXXXX.tmp``, and renames it onto the
target when complete (``os.replace`` is atomic on POSIX): a reader sees the whole file or none.
An output made of several entries (a Megatron ``.bin`` + ``.idx``, a folder of shards) is
written into a hidden staging folder, ``.NAME.HOST-PID-XXXXXXXX.staging``, and published by
:func:`staged_output`: a folder by one rename, sibling files one by one with the file that
makes the output look complete last. An interrupted writer leaves only such hidden entries,
which no listing takes for a shard (listings skip hidden files, and ``.tmp`` is no token
suffix), which :func:`is_temp_name` recognises, and which :func:`remove_stale_temps` removes
once their writer is provably gone (the ``HOST`` tag and ``PID`` in the name say whose they
are).

Written here rather than taken from a library: ``atomicwrites`` is archived, and none of the
maintained ones gives hidden names that shard listings skip, the permissions ``open()`` would
give (``mkstemp`` makes 0600; a dataset is meant to be shared), and a two-step form (a temp
file written by several threads at offsets, then published) that the remote cache needs.
"""

from __future__ import annotations

import contextlib
import errno
import functools
import hashlib
import os
import re
import shutil
import socket
import tempfile
import time
from collections.abc import Iterator

from streamload.errors import ConfigError

__all__ = [
    "STALE_TEMP_AGE",
    "atomic_output",
    "file_sha256",
    "is_temp_name",
    "publish",
    "remove_stale_temps",
    "staged_output",
    "temp_beside",
    "write_atomic",
]

TEMP_SUFFIX = ".tmp"
STAGING_SUFFIX = ".staging"

STALE_TEMP_AGE = 24 * 3600.0
"""Seconds without any change after which a temporary entry whose writer cannot be checked
(written on another host, in another pid namespace or boot, or named before names carried a
pid) counts as abandoned. A live writer changes its output far more often than this."""

_OWNED_NAME = re.compile(
    r"^\.(?P<target>.+)\.(?P<host>[0-9a-f]{8})-(?P<pid>[0-9]{1,10})-[a-z0-9_]{8}"
    r"(?:\.tmp|\.staging)$"
)
"""A temporary name of this module: ``.NAME.HOST-PID-XXXXXXXX.tmp`` or ``….staging``."""
_LEGACY_NAME = re.compile(r"^\..+\.[a-z0-9_]{8}\.tmp$")
"""``.NAME.XXXXXXXX.tmp``: a temporary name of earlier versions (no host, no pid)."""
_MAX_NAME_IN_TEMP = 200
"""Characters of the target's name kept in a temporary name (file names stop at 255)."""


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


_FILE_MODE = 0o666 & ~_umask()
"""What ``open(path, "w")`` would give: the outputs must be as readable as the tools' own."""


@functools.cache
def _host_tag() -> str:
    """8 hex digits naming this host, boot and pid namespace: where a temporary name carries
    this tag, its pid can be checked here (another container's or node's pids cannot)."""
    parts = [socket.gethostname()]
    with (
        contextlib.suppress(OSError),
        open("/proc/sys/kernel/random/boot_id", encoding="ascii") as fh,
    ):
        parts.append(fh.read().strip())
    with contextlib.suppress(OSError):
        parts.append(os.readlink("/proc/self/ns/pid"))
    return hashlib.sha256("\0".join(parts).encode()).hexdigest()[:8]


def _temp_prefix(name: str) -> str:
    return f".{name[:_MAX_NAME_IN_TEMP]}.{_host_tag()}-{os.getpid()}-"


def temp_beside(path: str | os.PathLike[str]) -> str:
    """Create an empty hidden ``.NAME.HOST-PID-XXXXXXXX.tmp`` beside ``path`` (its folder is
    made) with the permissions ``open()`` would give, and return its path."""
    folder, name = os.path.split(os.path.abspath(os.fspath(path)))
    os.makedirs(folder, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=_temp_prefix(name), suffix=TEMP_SUFFIX, dir=folder)
    os.close(fd)
    os.chmod(tmp, _FILE_MODE)
    return tmp


def is_temp_name(name: str) -> bool:
    """Whether a file name is a writer's unfinished output: a hidden ``.tmp`` file of
    :func:`temp_beside` or a hidden ``.staging`` folder of :func:`staged_output`."""
    return name.startswith(".") and name.endswith((TEMP_SUFFIX, STAGING_SUFFIX))


def remove_stale_temps(
    folder: str | os.PathLike[str], *, max_age: float = STALE_TEMP_AGE
) -> list[str]:
    """Remove the temporary files and staging folders in ``folder`` whose writer is gone.

    An entry is removed only when it is provably abandoned:

    * its name carries this host's tag (host name, boot id and pid namespace) and a pid, and no
      process with that pid exists (a live process with a reused pid keeps it: never wrong,
      only late); or
    * its writer cannot be checked here (another host, container or boot, or a name of an
      earlier version without a pid) and nothing in it changed for ``max_age`` seconds (the
      newest modification time of the file, or of anything in the folder).

    So a running writer's output is never removed: on this host its pid is alive, elsewhere it
    keeps changing its files. Names that are not this module's are left alone. Call it before
    writing beside earlier runs (:func:`staged_output` does, for its destination).

    Args:
        folder: The folder to clean (missing or unreadable: nothing to do).
        max_age: Seconds without change after which an uncheckable entry counts as abandoned.

    Returns:
        The paths removed.
    """
    try:
        entries = list(os.scandir(folder))
    except OSError:  # missing, not a folder, unreadable: nothing this call can clean
        return []
    now = time.time()
    removed = []
    for entry in entries:
        if not _is_stale(entry.path, entry.name, now, max_age):
            continue
        with contextlib.suppress(OSError):  # best effort: a clean-up never fails its caller
            if entry.is_dir(follow_symlinks=False):
                shutil.rmtree(entry.path, ignore_errors=True)
            else:
                os.unlink(entry.path)
        if not os.path.lexists(entry.path):
            removed.append(entry.path)
    return removed


def _is_stale(path: str, name: str, now: float, max_age: float) -> bool:
    if not is_temp_name(name):
        return False
    owned = _OWNED_NAME.match(name)
    if owned is None and _LEGACY_NAME.match(name) is None:
        return False  # someone else's hidden file
    if owned is not None and owned["host"] == _host_tag() and os.name == "posix":
        pid = int(owned["pid"])
        if 0 < pid < 1 << 31:
            return not _process_exists(pid)
    return now - _newest_mtime(path) > max_age


def _process_exists(pid: int) -> bool:
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)  # signal 0: existence check only
    except ProcessLookupError:
        return False
    except OSError:  # EPERM: another user's live process
        return True
    return True


def _newest_mtime(path: str) -> float:
    """The newest modification time of ``path`` and, for a folder, of everything in it."""
    try:
        newest = os.lstat(path).st_mtime
    except FileNotFoundError:
        return time.time()  # gone meanwhile: not stale
    for root, dirs, files in os.walk(path):
        for name in (*dirs, *files):
            with contextlib.suppress(FileNotFoundError):
                newest = max(newest, os.lstat(os.path.join(root, name)).st_mtime)
    return newest


def publish(tmp: str, path: str | os.PathLike[str]) -> None:
    """Rename the finished temporary file ``tmp`` onto ``path`` (atomic); on failure ``tmp``
    is removed and the error raised."""
    try:
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


@contextlib.contextmanager
def atomic_output(path: str | os.PathLike[str]) -> Iterator[str]:
    """Yield a temporary path beside ``path``; rename it onto ``path`` if the block succeeds,
    remove it if the block raises."""
    tmp = temp_beside(path)
    try:
        yield tmp
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    publish(tmp, path)


def write_atomic(path: str | os.PathLike[str], data: bytes | memoryview | str) -> None:
    """Write ``data`` (text as UTF-8) to ``path`` atomically."""
    raw = data.encode("utf-8") if isinstance(data, str) else data
    with atomic_output(path) as tmp, open(tmp, "wb") as fh:
        fh.write(raw)


@contextlib.contextmanager
def staged_output(*paths: str | os.PathLike[str]) -> Iterator[str]:
    """Write an output of one or several entries (files or folders) and publish it whole.

    Yields a new hidden staging folder ``.NAME.HOST-PID-XXXXXXXX.staging`` beside the first
    path; the block writes each entry under its final base name inside it (an entry it does
    not make is not published). When the block succeeds, the entries are moved into place in
    the order given, none replacing anything: a folder by one rename (only an empty folder
    may stand in its place), a file by a hard link then an unlink (or, where the file system
    has no hard links, a rename after checking the place is free). So a reader sees a folder
    whole or not at all, and sibling files appear with the one named last (give the file a
    listing takes for the shard last: companions first). When the block raises, the staging
    folder is removed; a killed process leaves only that hidden folder, which the next
    ``staged_output`` beside it removes (:func:`remove_stale_temps`).

    Args:
        *paths: The output's entries, all in one folder, in publishing order.

    Raises:
        ConfigError: an entry exists already (a file, or a folder that is not empty; also when
            one appears while writing: what this call had published is taken back), or the
            folder cannot be written.

    Example:
        >>> with staged_output("out/data.idx", "out/data.bin") as staging:  # doctest: +SKIP
        ...     write_dataset(os.path.join(staging, "data"))
    """
    targets = [os.path.abspath(os.fspath(p)) for p in paths]
    folder = os.path.dirname(targets[0]) if targets else ""
    if not targets or any(os.path.dirname(t) != folder for t in targets):
        raise ValueError(f"staged_output needs paths in one folder, got {targets}")
    for target in targets:
        remove_stale_temps(target)  # an earlier version's leftovers inside a folder output
        _check_free(target)
    staging = _make_staging(folder, os.path.basename(targets[0]))
    try:
        yield staging
        _publish_entries(staging, targets)
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def _check_free(target: str) -> None:
    """Raise unless ``target`` is missing or an empty folder."""
    try:
        is_folder = os.path.isdir(target) and not os.path.islink(target)
        if not os.path.lexists(target) or (is_folder and not os.listdir(target)):
            return
    except OSError:
        return  # unreadable here: the publishing step reports what is wrong
    raise ConfigError(
        f"{target} already exists; streamload never replaces an output: remove it or choose "
        "another destination"
    )


def _make_staging(folder: str, name: str) -> str:
    try:
        os.makedirs(folder, exist_ok=True)
        remove_stale_temps(folder)
        staging = tempfile.mkdtemp(prefix=_temp_prefix(name), suffix=STAGING_SUFFIX, dir=folder)
    except OSError as exc:
        raise ConfigError(f"{folder}: cannot write the output there: {exc.strerror}") from exc
    return staging


def _publish_entries(staging: str, targets: list[str]) -> None:
    names = {os.path.basename(t) for t in targets}
    extra = sorted(n for n in os.listdir(staging) if n not in names and not n.startswith("."))
    if extra:
        raise ValueError(f"{staging}: the writer made {extra}, which are not among {sorted(names)}")
    published: list[str] = []
    try:
        for target in targets:
            entry = os.path.join(staging, os.path.basename(target))
            if os.path.lexists(entry):
                _move_no_clobber(entry, target)
                published.append(target)
    except BaseException:
        for target in reversed(published):  # take back a half-published output
            if os.path.isdir(target) and not os.path.islink(target):
                shutil.rmtree(target, ignore_errors=True)
            else:
                with contextlib.suppress(OSError):
                    os.unlink(target)
        raise


_NO_HARD_LINKS = {errno.EPERM, errno.ENOTSUP, errno.EOPNOTSUPP, errno.EMLINK, errno.ENOSYS}
"""What ``link()`` says on file systems without hard links (FAT, some FUSE and SMB mounts)."""


def _move_no_clobber(src: str, dst: str) -> None:
    """Move ``src`` onto ``dst``, which must not exist (or be an empty folder, for a folder)."""
    taken = ConfigError(
        f"{dst} appeared while this output was written; streamload never replaces an output: "
        "remove it or choose another destination"
    )
    if os.path.isdir(src) and not os.path.islink(src):
        try:
            os.rename(src, dst)  # replaces an empty folder only
        except OSError as exc:
            if exc.errno in (errno.ENOTEMPTY, errno.EEXIST, errno.ENOTDIR, errno.EISDIR):
                raise taken from exc
            raise
        return
    try:
        os.link(src, dst, follow_symlinks=False)
    except FileExistsError as exc:
        raise taken from exc
    except OSError as exc:
        if exc.errno not in _NO_HARD_LINKS:
            raise
        if os.path.lexists(dst):
            raise taken from exc
        os.replace(src, dst)
        return
    os.unlink(src)


def file_sha256(path: str) -> str:
    """sha256 of a file's bytes (remembered per path, size and mtime: a source names one
    tokenizer for all its files, and every rank describes them)."""
    stat = os.stat(path)
    return _sha256(os.path.abspath(path), stat.st_size, stat.st_mtime_ns)


@functools.lru_cache(maxsize=64)
def _sha256(path: str, size: int, mtime_ns: int) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()
