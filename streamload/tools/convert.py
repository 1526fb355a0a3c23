"""Converting token data between formats, document by document, with bounded memory.

Documents come from the source format's index, else from an EOS token, else one per shard
(:mod:`streamload.tools.documents`); they are written by the target format's writer inside a
hidden staging folder, and the whole output is published at once when complete
(:func:`streamload.util.files.staged_output`): the NumPy shard folder by one rename, sibling
files with the token file a listing takes last. An interrupted or killed conversion leaves
nothing that looks like data, and the next one removes what a dead run left.

Destination rules (every target):

* ``megatron``: a path prefix (``out/web_text_document``; a trailing ``.bin``/``.idx`` is
  dropped), written as ``PREFIX.bin`` + ``PREFIX.idx``;
* ``modalities``, ``dolma``, ``datatrove``, ``parquet``: a file whose name ends in the
  format's suffix (``.pbin``, ``.npy``, ``.ds``, ``.parquet``), which is how readers (and
  folder listings) recognise the format; another name is refused (:class:`ConfigError`
  naming the suffix), never silently renamed;
* ``numpy``: a folder of ``shard_00000.npy``…; it must not exist or be empty;
* an existing folder given for a single-file target receives the format's default name;
* nothing is ever replaced: an existing output is refused;
* a relative path is relative to the working folder; ``file://`` URLs are local paths; other
  URLs are refused (write locally, then upload).

Loss masks (:mod:`streamload.tools.masks`): sources with masks give an output with masks,
datatrove's ``.ds.loss`` or the mask file beside each token file
(:func:`~streamload.formats.mask_names.mask_path_for`), published with the output, before
its token file.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from streamload.catalog.sources import SourceCatalog
from streamload.errors import ConfigError, StreamloadError
from streamload.formats.base import DocumentWriter, ShardInfo, local_path
from streamload.formats.dolma import CSV_SUFFIX
from streamload.formats.mask_names import mask_path_for
from streamload.formats.registry import open_shard
from streamload.tools.documents import document_bounds, iter_documents
from streamload.tools.masks import MaskedWriter, mask_reader, wants_masks
from streamload.util.files import staged_output

__all__ = [
    "SUFFIXES",
    "TARGETS",
    "ConvertStats",
    "StagedWriter",
    "convert",
    "default_destination",
    "open_output",
    "open_writer",
    "output_paths",
    "parse_dtype",
]

TARGETS = ("megatron", "modalities", "dolma", "numpy", "datatrove", "parquet")
"""Formats ``streamload convert`` writes."""

SUFFIXES = {"modalities": ".pbin", "dolma": ".npy", "datatrove": ".ds", "parquet": ".parquet"}
"""The suffix a single-file target's name must end in (readers recognise the format by it)."""

NUMPY_SHARD_TOKENS = 1 << 28
"""Tokens per NPY shard when converting to a shard folder."""

_DEFAULT_NAMES = {
    "megatron": "data_text_document",
    "modalities": "data.pbin",
    "dolma": "part-0-00000.npy",
    "datatrove": "data_00000_unshuffled.ds",
    "parquet": "train-00000-of-00001.parquet",
}
"""The name written inside a folder given as the destination of a single-file target."""


@dataclass
class ConvertStats:
    """What a conversion wrote: documents, tokens, the published paths (token file first),
    and the token dtype."""

    documents: int = 0
    tokens: int = 0
    paths: list[str] = field(default_factory=list)
    dtype: np.dtype | None = None


def parse_dtype(text: str) -> np.dtype:
    """The ``--dtype`` argument as an integer numpy dtype.

    Raises:
        ConfigError: not a numpy dtype, or not an integer one of at most 8 bytes.
    """
    try:
        dtype = np.dtype(text)
    except TypeError:
        raise ConfigError(
            f"--dtype {text!r} is not a numpy dtype; use an integer dtype such as uint16 or int32"
        ) from None
    if dtype.kind not in "ui" or dtype.itemsize > 8:
        raise ConfigError(
            f"--dtype {dtype.name} cannot hold token ids; use an integer dtype such as uint16 "
            "or int32"
        )
    return dtype


def default_destination(fmt: str, destination: str) -> str:
    """Name a file inside ``destination`` when a folder (an existing one, or a path ending in
    ``/``) is given for a single-file format."""
    if fmt == "numpy" or fmt not in _DEFAULT_NAMES:
        return destination
    if os.path.isdir(destination) or destination.endswith(("/", os.sep)):
        return os.path.join(destination, _DEFAULT_NAMES[fmt])
    return destination


def _local(destination: str) -> str:
    """``destination`` as a local path (``file://`` stripped).

    Raises:
        ConfigError: a remote URL (outputs are written locally, then uploaded).
    """
    local = local_path(destination)
    if local is None:
        raise ConfigError(
            f"{destination}: streamload writes its outputs to local paths only; write it "
            "locally, then upload it"
        )
    return local


def output_paths(fmt: str, destination: str, *, masks: bool = False) -> list[str]:
    """The entries an output of ``fmt`` at ``destination`` consists of, in publishing order:
    companions first (with ``masks``, the loss mask last of them), the file a listing takes
    for the shard last. A NumPy folder holds its shards' masks.

    Raises:
        ConfigError: an unknown format, or a file name without the format's suffix.
    """
    if fmt not in TARGETS:
        raise ConfigError(f"--to {fmt!r} is not a format streamload writes ({', '.join(TARGETS)})")
    suffix = SUFFIXES.get(fmt)
    if suffix is not None and not destination.endswith(suffix):
        stem = os.path.splitext(destination)[0] if os.path.basename(destination) else "out"
        raise ConfigError(
            f"{destination}: --to {fmt} writes a file whose name must end in {suffix} (readers "
            f"recognise the format by it); name it e.g. {stem}{suffix}"
        )
    if fmt == "megatron":
        prefix = destination.removesuffix(".bin").removesuffix(".idx")
        paths = [prefix + ".idx", prefix + ".bin"]
    elif fmt == "dolma":
        paths = [destination.removesuffix(".npy") + CSV_SUFFIX, destination]
    elif fmt == "datatrove":
        paths = [destination + ".index", destination + ".metadata", destination]
    elif fmt in ("modalities", "parquet"):
        paths = [destination]
    else:
        return [destination]  # a NumPy folder holds its shards' masks
    return [*paths[:-1], mask_path_for(paths[-1]), paths[-1]] if masks else paths


class StagedWriter:
    """A format writer whose whole output is published at once, or not at all.

    The wrapped writer writes inside a hidden staging folder (:func:`staged_output`);
    :meth:`close` finishes it and moves the entries into place; an exception inside the
    ``with`` block (or a killed process) leaves nothing at the destination.

    Args:
        paths: The output's entries in publishing order (:func:`output_paths`).
        dtype: Token dtype; a token outside its range raises :class:`ConfigError`.
        make: Opens the format's writer given the staging folder.
        masks: The writer takes a loss mask with each document.

    Attributes:
        paths: The output's entries, as given.
        masks: Whether :meth:`add_document` takes loss masks.
    """

    def __init__(
        self,
        paths: Sequence[str],
        dtype: np.dtype,
        make: Callable[[str], DocumentWriter],
        *,
        masks: bool = False,
    ) -> None:
        self.paths = [os.path.abspath(p) for p in paths]
        self.dtype = dtype
        self.masks = masks
        self._closed = False
        with contextlib.ExitStack() as stack:
            staging = stack.enter_context(staged_output(*self.paths))
            # Unwound last in, first out: the writer finishes (or discards) its files, then
            # the staging folder is published (or removed).
            self._writer = stack.enter_context(make(staging))
            self._stack = stack.pop_all()

    def add_document(self, tokens: np.ndarray, *, loss_mask: Any = None) -> None:
        """Append one document (with ``masks``, and its loss mask: one flag per token).

        Raises:
            ConfigError: a token does not fit the dtype (the value and range named).
        """
        arr = np.asarray(tokens)
        if arr.size and arr.dtype.kind in "ui" and not np.can_cast(arr.dtype, self.dtype):
            info = np.iinfo(self.dtype)
            lo, hi = int(arr.min()), int(arr.max())
            if lo < info.min or hi > info.max:
                raise ConfigError(
                    f"token id {lo if lo < info.min else hi} does not fit --dtype "
                    f"{self.dtype.name} ({info.min}..{info.max}); choose a wider --dtype"
                )
        if self.masks:
            self._writer.add_document(arr, loss_mask=loss_mask)  # type: ignore[call-arg]
        else:
            self._writer.add_document(arr)

    def close(self) -> None:
        """Finish the output and publish it (on a failure, nothing is published)."""
        self.__exit__(None, None, None)

    def __enter__(self) -> StagedWriter:
        return self

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        """Publish (no exception) or discard (an exception) the output, once."""
        if not self._closed:
            self._closed = True
            self._stack.__exit__(exc_type, exc, tb)


def open_writer(
    fmt: str,
    destination: str,
    dtype: np.dtype,
    *,
    tokenizer_name: str | None = None,
    masks: bool = False,
) -> StagedWriter:
    """A writer of ``fmt`` at ``destination`` that publishes the whole output at once.

    ``destination`` follows the module's rules (a prefix for ``megatron``, a file with the
    format's suffix, a folder for ``numpy``); stale leftovers of killed writers beside it are
    removed first. With ``masks`` each document comes with its loss mask, written beside
    the token file(s) (module docstring).

    Raises:
        ConfigError: an unknown format, a name without the format's suffix, an existing
            output, an unwritable place, or a dtype the format cannot store.
    """
    dtype = np.dtype(dtype)
    paths = output_paths(fmt, _local(destination), masks=masks)
    if fmt in ("datatrove", "modalities"):
        _check_unsigned_width(fmt, dtype)
    name = os.path.basename(os.path.abspath(paths[-1]))

    def make(staging: str) -> DocumentWriter:
        writer = _format_writer(fmt, staging, name, dtype, tokenizer_name, masks)
        if masks and fmt not in ("numpy", "datatrove"):  # those two write their own
            return MaskedWriter(writer, mask_path_for(os.path.join(staging, name)))
        return writer

    return StagedWriter(paths, dtype, make, masks=masks)


def _format_writer(
    fmt: str, staging: str, name: str, dtype: np.dtype, tokenizer_name: str | None, masks: bool
) -> DocumentWriter:
    """The format's own writer, writing ``name`` inside ``staging`` (NumPy and datatrove
    with their own loss masks when ``masks``)."""
    path = os.path.join(staging, name)
    if fmt == "megatron":
        from streamload.formats.megatron import MegatronWriter

        return MegatronWriter(path.removesuffix(".bin"), dtype)
    if fmt == "dolma":
        from streamload.formats.dolma import DolmaWriter

        return DolmaWriter(path, dtype)
    if fmt == "numpy":
        from streamload.formats.numpy_folder import NumpyShardWriter

        os.mkdir(path)  # published even without documents
        return NumpyShardWriter(path, dtype, NUMPY_SHARD_TOKENS, save_loss_masks=masks)
    if fmt == "datatrove":
        from streamload.formats.datatrove import DatatroveWriter

        return DatatroveWriter(path, tokenizer_name, dtype.itemsize, save_loss_metadata=masks)
    if fmt == "parquet":
        from streamload.formats.parquet import ParquetWriter

        return ParquetWriter(path, dtype)
    from streamload.formats.modalities import ModalitiesWriter

    return ModalitiesWriter(path, dtype.itemsize)


def _check_unsigned_width(fmt: str, dtype: np.dtype) -> None:
    """datatrove (2 or 4 bytes) and Modalities (1, 2 or 4 bytes) store unsigned tokens."""
    widths = (2, 4) if fmt == "datatrove" else (1, 2, 4)
    if dtype.itemsize not in widths:
        raise ConfigError(
            f"{fmt} stores {' or '.join(map(str, widths))}-byte tokens; --dtype {dtype.name} "
            "does not fit: pass --dtype uint16 or uint32"
        )


def open_output(
    catalog: SourceCatalog,
    fmt: str,
    destination: str,
    *,
    dtype: np.dtype | None = None,
    tokenizer_name: str | None = None,
    drop_masks: bool = False,
    assume_trained: bool = False,
) -> StagedWriter:
    """:func:`open_writer` for converting ``catalog``: a folder given for a single-file
    target gets the format's default name, the dtype defaults to the sources' common one,
    and the output has loss masks when the sources have them
    (:func:`~streamload.tools.masks.wants_masks`: ``drop_masks``, ``assume_trained``).

    Raises:
        ConfigError: a bad destination or dtype, or sources of which only some have a loss
            mask (before anything is written).
        StreamloadError: the staging folder could not be written.
    """
    masks = wants_masks(catalog.shards, drop_masks=drop_masks, assume_trained=assume_trained)
    if dtype is None:
        dtype = np.result_type(*{np.dtype(s.dtype).newbyteorder("=") for s in catalog.shards})
    destination = default_destination(fmt, _local(destination))
    try:
        return open_writer(
            fmt, destination, np.dtype(dtype), tokenizer_name=tokenizer_name, masks=masks
        )
    except OSError as exc:
        raise _write_failed(exc, destination) from exc


def convert(
    catalog: SourceCatalog,
    writer: DocumentWriter,
    *,
    eos_token_id: int | None = None,
    progress: Callable[[int, int], Any] | None = None,
) -> ConvertStats:
    """Copy every document of ``catalog`` into ``writer``, in storage order, then close it.

    Args:
        catalog: The source shards.
        writer: An open writer; closed (moved into place) on success, discarded on error.
        eos_token_id: Splits documents where the source format has no index.
        progress: Called with (documents, tokens) written, after each document.

    Returns:
        What was written; for a :class:`StagedWriter` also the published paths (token file
        first) and the dtype.

    Raises:
        ConfigError: the writer refused a document (named by source file and number).
        StreamloadError: reading or writing failed (a staged output publishes nothing).
    """
    stats = ConvertStats()
    paths = getattr(writer, "paths", [])
    try:
        with writer:
            for info in catalog.shards:
                _copy_shard(info, writer, stats, eos_token_id, progress)
    except OSError as exc:
        raise _write_failed(exc, paths[-1] if paths else "the output") from exc
    if isinstance(writer, StagedWriter):
        stats.paths, stats.dtype = writer.paths[::-1], writer.dtype
    return stats


def _copy_shard(
    info: ShardInfo,
    writer: DocumentWriter,
    stats: ConvertStats,
    eos_token_id: int | None,
    progress: Callable[[int, int], Any] | None,
) -> None:
    shard = open_shard(info)
    bounds = document_bounds(shard, eos_token_id)
    masks = iter_documents(mask_reader(info), bounds) if getattr(writer, "masks", False) else None
    for number, doc in enumerate(iter_documents(shard, bounds)):
        try:
            if masks is None:
                writer.add_document(np.asarray(doc))
            else:
                writer.add_document(np.asarray(doc), loss_mask=np.asarray(next(masks)))  # type: ignore[call-arg]
        except ConfigError as exc:
            raise ConfigError(f"{info.path}: document {number}: {exc}") from exc
        stats.documents += 1
        stats.tokens += int(doc.shape[0])
        if progress is not None:
            progress(stats.documents, stats.tokens)


def _write_failed(exc: OSError, destination: str) -> StreamloadError:
    where = f"{exc.filename}: " if exc.filename else ""
    return StreamloadError(
        f"converting to {destination} failed, nothing was published: {where}{exc.strerror or exc}"
    )
