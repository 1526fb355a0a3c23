"""Converting token data between formats, document by document, with bounded memory.

Documents come from the source format's index, else from an EOS token, else one per shard
(:mod:`streamload.tools.documents`); they are written by the target format's writer inside a
hidden staging folder, and the whole output is published at once when complete
(:func:`streamload.util.files.staged_output`): a folder output by one rename, sibling
files with the token file a listing takes last. An interrupted or killed conversion leaves
nothing that looks like data, and the next one removes what a dead run left.

The destination rules and each target's options and writer are in
:mod:`streamload.tools.convert_targets`: a prefix for ``megatron``, a file with the format's
suffix for ``modalities``, ``dolma``, ``datatrove`` and a ``.parquet`` file, a folder for
``numpy``, ``mds``, ``litdata``, ``arrow`` (a ``datasets.save_to_disk`` folder) and
Hub-sized Parquet files; nothing is ever replaced; a
relative path is relative to the working folder; ``file://`` URLs are local paths; other
URLs are refused (write locally, then upload).

Loss masks (:mod:`streamload.tools.masks`): sources with masks give an output with masks,
datatrove's ``.ds.loss`` or the mask file beside each token file
(:func:`~streamload.formats.mask_names.mask_path_for`; in a folder output, beside each of its
files; in ``arrow`` and ``parquet`` output, a ``labels_mask`` column beside the tokens),
published with the output, before its token file.
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
from streamload.formats.mask_names import mask_path_for
from streamload.formats.registry import open_shard
from streamload.tools.convert_targets import (
    SUFFIXES,
    TARGETS,
    WriteOptions,
    check_dtype,
    check_options,
    default_destination,
    format_writer,
    output_paths,
    replace_options,
    writes_own_masks,
)
from streamload.tools.documents import document_bounds, iter_documents
from streamload.tools.masks import MaskedWriter, mask_reader, wants_masks
from streamload.util.files import staged_output

__all__ = [
    "SUFFIXES",
    "TARGETS",
    "ConvertStats",
    "StagedWriter",
    "WriteOptions",
    "convert",
    "default_destination",
    "open_output",
    "open_writer",
    "output_paths",
    "parse_dtype",
]

NUMPY_SHARD_TOKENS = 1 << 28
"""Tokens per NPY shard when converting to a shard folder."""


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
    options: WriteOptions | None = None,
) -> StagedWriter:
    """A writer of ``fmt`` at ``destination`` that publishes the whole output at once.

    ``destination`` follows the rules of :mod:`streamload.tools.convert_targets` (a prefix
    for ``megatron``, a file with the format's suffix, a folder for ``numpy``, ``mds``,
    ``litdata``, ``arrow`` and Hub-sized Parquet files); stale leftovers of killed writers beside it
    are removed first. With ``masks`` each document comes with its loss mask, written
    beside the token file(s) (module docstring). ``options`` are the target's own
    (``tokenizer_name`` is a shorthand for ``options.tokenizer_name``).

    Raises:
        ConfigError: an unknown format, a name without the format's suffix, an existing
            output, an unwritable place, a dtype the format cannot store, or an option of
            another target.
    """
    dtype = np.dtype(dtype)
    destination = _local(destination)
    paths = output_paths(fmt, destination, masks=masks)
    options = replace_options(options, tokenizer_name)
    check_options(fmt, destination, options)
    check_dtype(fmt, dtype)
    name = os.path.basename(os.path.abspath(paths[-1]))
    own_masks = writes_own_masks(fmt, destination)

    def make(staging: str) -> DocumentWriter:
        path = os.path.join(staging, name)
        writer = format_writer(fmt, path, dtype, options, masks, NUMPY_SHARD_TOKENS)
        if masks and not own_masks:
            return MaskedWriter(writer, mask_path_for(path))
        return writer

    return StagedWriter(paths, dtype, make, masks=masks)


def open_output(
    catalog: SourceCatalog,
    fmt: str,
    destination: str,
    *,
    dtype: np.dtype | None = None,
    tokenizer_name: str | None = None,
    drop_masks: bool = False,
    assume_trained: bool = False,
    options: WriteOptions | None = None,
) -> StagedWriter:
    """:func:`open_writer` for converting ``catalog``: a folder given for a single-file
    target gets the format's default name, the dtype defaults to the sources' common one,
    and the output has loss masks when the sources have them
    (:func:`~streamload.tools.masks.wants_masks`: ``drop_masks``, ``assume_trained``);
    ``options`` are the target's own.

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
            fmt,
            destination,
            np.dtype(dtype),
            tokenizer_name=tokenizer_name,
            masks=masks,
            options=options,
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
