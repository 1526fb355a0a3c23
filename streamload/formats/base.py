"""The protocol every format implements, and the picklable shard descriptor.

A format is an object with a ``name`` and three methods (:class:`ShardFormatSpec`):

* ``sniff(path, head, siblings)`` — does this file belong to the format? ``head`` is the first
  ``SNIFF_BYTES`` bytes; ``siblings`` the names of the files in the same folder (to see
  companions such as ``X.idx`` beside ``X.bin``);
* ``describe(fs, file, options)`` — read the header (and small index facts) and return a
  :class:`ShardInfo`; never token data; raise :class:`FormatError` on any inconsistency;
* ``open(info)`` — a :class:`TokenShard`: zero-copy token slices and document boundaries.

A :class:`ShardInfo` holds no open file, so it pickles cheaply into worker processes, where
:func:`open_shard` maps it lazily through the registry.
"""

from __future__ import annotations

import contextlib
import dataclasses
import io
import mmap
import os
from dataclasses import dataclass, field
from typing import Any, BinaryIO, Protocol

import numpy as np

from streamload.errors import FormatError

__all__ = [
    "FORMAT_ALIASES",
    "SNIFF_BYTES",
    "DocumentWriter",
    "ListedFile",
    "MemmapShard",
    "ReadOptions",
    "ShardFormatSpec",
    "ShardInfo",
    "TokenShard",
    "TokenizerSpec",
    "check_configured_dtype",
    "check_size_unchanged",
    "check_token_dtype",
    "companion_file",
    "open_head",
    "local_path",
    "open_token_file",
    "token_array",
]

SNIFF_BYTES = 16
"""Bytes of each file read to recognise its format."""

FORMAT_ALIASES: dict[str, str] = {"npy": "numpy"}
"""Former format names a user may have written (configs, ``--format``) and a catalog cache
may hold, and the one name each now has (docs/formats.md)."""


@dataclass(frozen=True)
class ListedFile:
    """One listed file: full path (as its file system names it), path under the root, size,
    and a version tag (ETag, generation or mtime; ``""`` when the store gives none)."""

    path: str
    relpath: str
    size: int
    version: str = field(default="", compare=False)


@dataclass(frozen=True)
class TokenizerSpec:
    """How a ``format = "jsonl"`` source tokenizes its documents.

    Args:
        path: Local ``tokenizer.json`` (HuggingFace ``tokenizers``).
        bos_token_id: Prepended when the encoding does not start with it.
        eos_token_id: Appended when the encoding does not end with it.
        text_field: JSON field of the text (dotted for nested fields).
    """

    path: str
    bos_token_id: int | None
    eos_token_id: int | None
    text_field: str = "text"


@dataclass(frozen=True)
class ReadOptions:
    """What the config says about a source's files.

    Args:
        dtype: Configured token dtype or ``"auto"``.
        meta_dtype: dtype declared by a tatm ``metadata.yaml`` beside the file, if any.
        vocab_size: Configured vocabulary size (formats may use it to pick a width).
        tokenizer: For JSONL sources: the configured tokenizing (``None``: a prepared file's
            own record decides).
        eos_token_id: The config's ``eos_token_id`` (top level): a tatm file's trailing
            zero that is this EOS ending the last document is a token, not padding
            (:mod:`streamload.formats.numpy.raw`).
        column: The source's ``column`` (Arrow, Parquet, MDS: the token column; ``None``:
            the format's default).
        cache_root: The source's disk cache folder (``[storage]``; ``None``: the default),
            where a format keeps what it derives once from a file (MDS: a decoded column).
    """

    dtype: str = "auto"
    meta_dtype: str | None = None
    vocab_size: int | None = None
    tokenizer: TokenizerSpec | None = None
    eos_token_id: int | None = None
    column: str | None = None
    cache_root: str | None = None


@dataclass(frozen=True)
class ShardInfo:
    """What is known about one shard without reading its tokens.

    Args:
        path: Full path or URL of the token file.
        relpath: Path relative to its source root (what the data fingerprint uses, so a
            corpus may move between folders or buckets).
        size: Token file size in bytes.
        format: Format name (a key of the registry).
        dtype: Token dtype as a numpy dtype string (byte order included, e.g. ``<u2``).
        offset: Byte offset of the first token in the token file.
        num_tokens: Token count.
        index_path: Companion index file (Megatron ``.idx``, Dolma ``.csv.gz``...), if any.
        meta: Small format-specific header facts (ints and strings), e.g. Megatron's
            sequence and document counts.
        version: The token file's version tag from the listing: an ETag or generation, a
            local file's modification time (remote cache keys, packing plan keys).
        storage: For remote shards, the :class:`~streamload.remote.StorageHandle` their
            bytes are read through (range reads, block cache); ``None`` for local files.
        companions: The listed version of each file beside the token file that shares its
            stem (``X.idx`` of ``X.bin``): a remote companion is read only in that version
            (:func:`companion_file`).
        loss_mask: The shard's per-token loss-mask file, if it has one (found by the catalog:
            :mod:`streamload.catalog.masks`): headerless, one byte per token, nonzero where
            the token is trained as a label (:mod:`streamload.formats.loss_mask`).
    """

    path: str
    relpath: str
    size: int
    format: str
    dtype: str
    offset: int
    num_tokens: int
    index_path: str | None = None
    meta: dict[str, Any] = field(default_factory=dict, compare=False, hash=False)
    version: str = field(default="", compare=False)
    storage: Any = field(default=None, compare=False, hash=False, repr=False)
    companions: dict[str, str] = field(default_factory=dict, compare=False, hash=False, repr=False)
    loss_mask: str | None = None

    def __post_init__(self) -> None:
        # one name per format, also for descriptions cached under a former name
        if self.format in FORMAT_ALIASES:
            object.__setattr__(self, "format", FORMAT_ALIASES[self.format])

    @property
    def is_remote(self) -> bool:
        """Whether the token file is read through remote storage (not mapped)."""
        return self.storage is not None and local_path(self.path) is None


class TokenShard(Protocol):
    """An opened shard: zero-copy tokens and, where the format records them, documents."""

    info: ShardInfo

    def tokens(self, start: int, stop: int) -> np.ndarray:
        """Tokens ``[start, stop)`` as a zero-copy array (a memmap view for local files)."""
        ...

    def document_bounds(self) -> np.ndarray | None:
        """Document ``i`` is tokens ``[b[i], b[i+1])``; int64, ``num_documents + 1`` long,
        non-decreasing (empty documents repeat a value). ``None`` if the format has no index.
        """
        ...


class ShardFormatSpec(Protocol):
    """A readable format (see the module docstring).

    Attributes:
        name: Registry key and ``format =`` value.
        has_documents: Whether shards record document boundaries (an index); formats without
            one find documents by ``eos_token_id``.
    """

    name: str
    has_documents: bool

    def sniff(self, path: str, head: bytes, siblings: frozenset[str]) -> bool:
        """Whether ``path`` belongs to this format."""
        ...

    def describe(self, fs: Any, file: ListedFile, options: ReadOptions) -> ShardInfo:
        """Describe one shard from its header; raise ``FormatError`` when inconsistent."""
        ...

    def open(self, info: ShardInfo) -> TokenShard:
        """Open a described shard."""
        ...


class DocumentWriter(Protocol):
    """Streams documents into one output of a format (bounded memory).

    Output goes to temporary names and is renamed into place by ``close()``, so an interrupted
    write never leaves files that look complete. Use as a context manager: an exception inside
    the block discards the output.
    """

    def add_document(self, tokens: np.ndarray) -> None:
        """Append one document (1-D integer tokens, possibly empty where the format allows)."""
        ...

    def close(self) -> None:
        """Finish the output and move it into place."""
        ...

    def __enter__(self) -> DocumentWriter: ...

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> None: ...


def check_token_dtype(dtype: np.dtype, path: str) -> np.dtype:
    """Return ``dtype`` if it can hold token ids, else raise naming the file."""
    if dtype.kind not in "ui" or dtype.itemsize > 8:
        raise FormatError(f"{path}: dtype {dtype} cannot hold token ids; expected an integer dtype")
    return dtype


def check_configured_dtype(configured: str, found: np.dtype, path: str, what: str) -> None:
    """A source's configured ``dtype`` (``"auto"``: whatever the file holds) must hold every
    value of ``found``, the dtype the file itself records (a file of a narrower dtype is read
    in its own: a source may mix uint16 and uint32 files when its config says uint32).

    Args:
        configured: The config's ``dtype`` (``"auto"`` or a numpy name).
        found: What the file records (any byte order).
        path: The file the message names.
        what: Where the file records it, ending in the dtype (``"column 'input_ids' holds
            int64 tokens"``): the message is ``"{path}: {what} but the config says ..."``.

    Raises:
        FormatError: ``found`` does not cast safely to the configured dtype.
    """
    if configured != "auto" and not np.can_cast(found.newbyteorder("="), configured, "safe"):
        raise FormatError(
            f"{path}: {what} but the config says dtype = {configured!r}; remove dtype or fix it"
        )


def local_path(path: str) -> str | None:
    """The local file system path of ``path``, or ``None`` when it is a remote URL."""
    if path.startswith("file://"):
        return path.removeprefix("file://")
    return None if "://" in path else path


HEAD_READAHEAD = 64 << 10
"""Bytes a header read may fetch beyond what it asks for (fsspec backends otherwise read
ahead by their default block: 50 MiB for s3fs)."""


def open_head(fs: Any, path: str) -> Any:
    """``path`` of ``fs`` opened to read a header or an index tail: each read fetches what it
    asks for plus at most ``HEAD_READAHEAD`` bytes."""
    return fs.open(path, "rb", block_size=HEAD_READAHEAD, cache_type="readahead")


def companion_file(info: ShardInfo, path: str, expected: int) -> str:
    """The local path of ``path``, a companion of shard ``info`` (an index, a CSV), checked
    unchanged since start-up: its size, and when remote the version listed beside the shard
    (copied into the cache of the shard's storage).

    Raises:
        FormatError: missing, resized, or (remote) replaced since start-up.
    """
    version = info.companions.get(path.rsplit("/", 1)[-1])
    return check_size_unchanged(path, expected, info.storage, version)


def check_size_unchanged(
    path: str, expected: int, storage: Any = None, version: str | None = None
) -> str:
    """The local path of ``path`` after checking its size is still ``expected`` bytes.

    A remote ``path`` is copied into the cache of ``storage`` (a
    :class:`~streamload.remote.StorageHandle`; only in ``version`` when given) and that copy's
    path returned.

    Raises:
        FormatError: remote without a storage, missing, or changed since start-up.
    """
    local = local_path(path)
    if local is None:
        if storage is None:
            raise FormatError(f"{path}: a remote file, but the shard was described without storage")
        return str(storage.store().whole.companion(path, expected, version))
    try:
        size = os.path.getsize(local)
    except OSError as exc:
        raise FormatError(f"{path}: cannot open: {exc}") from exc
    if size != expected:
        raise FormatError(
            f"{path}: file is {size} bytes but was {expected} bytes at start-up; "
            "it changed while the loader was running"
        )
    return local


def token_array(info: ShardInfo) -> Any:
    """The shard's tokens as a 1-D array sliced without copying the file.

    Local files (and remote ones cached whole): a read-only ndarray over an ``mmap`` of the
    file (the array keeps the map alive). Other remote files: a
    :class:`~streamload.remote.RemoteTokens` whose slices are byte-range reads through the
    block cache.

    Raises:
        FormatError: the local file is missing or resized since start-up.
    """
    dtype = np.dtype(info.dtype)
    if info.num_tokens == 0:
        return np.empty(0, dtype=dtype)
    if not info.is_remote:
        local = check_size_unchanged(info.path, info.size)
        return _map(local, dtype, info)
    from streamload.remote.array import RemoteTokens
    from streamload.remote.store import RemoteObject

    store = info.storage.store()
    obj = RemoteObject(info.path, info.size, info.version)
    # A small file (storage.whole_shard_size) is cached whole and mapped like a local one.
    whole = store.whole.token_file(obj)
    if whole is not None:
        with contextlib.suppress(FileNotFoundError):  # evicted just now: read by range
            return _map(whole, dtype, info)
    return RemoteTokens(store, obj, dtype, info.offset, info.num_tokens)


def _map(path: str, dtype: np.dtype, info: ShardInfo) -> np.ndarray:
    # A plain mmap read through np.frombuffer: a third of np.memmap's cost to open (shards are
    # reopened when more are in use than stay open), and slicing a plain ndarray is ~3x
    # cheaper than slicing the np.memmap subclass. The array keeps the map alive.
    with open(path, "rb") as fh:
        mapped = mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ)
    return np.frombuffer(mapped, dtype=dtype, count=info.num_tokens, offset=info.offset)


def open_token_file(info: ShardInfo) -> BinaryIO:
    """The shard's token file opened for reading (seekable; ranged reads when remote).

    Raises:
        FormatError: the local file is missing or resized since start-up.
    """
    if info.is_remote:
        from streamload.remote.array import RemoteFile
        from streamload.remote.store import RemoteObject

        obj = RemoteObject(info.path, info.size, info.version)
        return io.BufferedReader(RemoteFile(info.storage.store(), obj))
    return open(check_size_unchanged(info.path, info.size), "rb")


class MemmapShard:
    """A flat token file: mapped with ``numpy.memmap`` when local (zero-copy slices), read by
    byte range when remote (:func:`token_array`).

    Args:
        info: The shard.
        bounds: Document bounds, if the format has them (see :meth:`document_bounds`).
    """

    def __init__(self, info: ShardInfo, bounds: np.ndarray | None = None) -> None:
        self.info = info
        self._array = token_array(info)
        self._bounds = bounds

    @property
    def remote_array(self) -> Any:
        """The :class:`~streamload.remote.RemoteTokens` read by range, or ``None`` (mapped)."""
        return None if isinstance(self._array, np.ndarray) else self._array

    def tokens(self, start: int, stop: int) -> np.ndarray:
        return self._array[start:stop]

    def document_bounds(self) -> np.ndarray | None:
        return self._bounds


def replace_path(info: ShardInfo, path: str) -> ShardInfo:
    """A copy of ``info`` with another path."""
    return dataclasses.replace(info, path=path)
