"""Megatron-LM / Megatron-Core ``IndexedDataset``: a ``.bin`` of tokens and its ``.idx``.

A dataset is a path prefix ``P`` with two files: ``P.bin`` (the tokens of every sequence,
concatenated, no header) and ``P.idx`` (MMIDIDX: dtype code, sequence lengths and byte
pointers, document_indices; layout in :mod:`streamload.formats.megatron._index`). A
*document* is a run of sequences (``document_indices``); Megatron's GPTDataset treats every
*sequence* as a document, so shards expose both :meth:`MegatronShard.document_bounds` and
:meth:`MegatronShard.sequence_bounds`.

Tolerated variants: fairseq's MMIDIDX (no document index: one document per sequence) and
legacy merges that dropped their document index (a warning, then one document per
sequence). Refused by name: TNTIDX (lazy/cached) indexes and float dtype codes.

:class:`MegatronWriter` mirrors megatron-core's ``IndexedDatasetBuilder`` byte for byte
(``add_item``/``end_document``/``add_document``/``add_index``); :func:`merge_megatron` is
``tools/merge_datasets.py``.
"""

from __future__ import annotations

import contextlib
import os
import shutil
from array import array
from collections.abc import Sequence
from typing import Any

import numpy as np

from streamload.errors import ConfigError, FormatError
from streamload.formats.base import (
    ListedFile,
    ReadOptions,
    ShardInfo,
    check_configured_dtype,
    check_token_dtype,
    companion_file,
    token_array,
)
from streamload.formats.megatron._index import (
    MegatronIndex,
    code_of_dtype,
    load_buffer,
    map_index,
    read_index,
    write_index,
)
from streamload.util.files import temp_beside

__all__ = [
    "FORMAT",
    "MegatronFormat",
    "MegatronShard",
    "MegatronWriter",
    "code_of_dtype",
    "merge_megatron",
    "read_index",
]


def _index_path(bin_path: str) -> str:
    return bin_path[: -len(".bin")] + ".idx"


class MegatronShard:
    """An opened Megatron dataset: tokens mapped zero-copy, bounds computed on first use."""

    def __init__(self, info: ShardInfo) -> None:
        self.info = info
        if info.index_path is None or "index_size" not in info.meta:
            raise FormatError(f"{info.path}: shard was not described by the megatron format")
        self._tokens = token_array(info)  # a mapped view, or range reads when remote
        self._index_path: str = info.index_path
        self._index: MegatronIndex | None = None
        self._sequences: np.ndarray | None = None
        self._documents: np.ndarray | None = None

    @property
    def remote_array(self) -> Any:
        """The :class:`~streamload.remote.RemoteTokens` read by range, or ``None`` (mapped)."""
        return None if isinstance(self._tokens, np.ndarray) else self._tokens

    def tokens(self, start: int, stop: int) -> np.ndarray:
        return self._tokens[start:stop]

    def index(self) -> MegatronIndex:
        """The index arrays, mapped on first use (reading tokens never needs them; not
        re-validated: the ``.idx`` is checked unchanged in size, and copied when remote)."""
        if self._index is None:
            local = companion_file(self.info, self._index_path, self.info.meta["index_size"])
            index = map_index(np.memmap(local, dtype=np.uint8, mode="r"), local)
            if index.header.sequences != self.info.meta["sequences"]:
                raise FormatError(
                    f"{self.info.index_path}: header now says {index.header.sequences} sequences "
                    f"but said {self.info.meta['sequences']} at start-up; the file changed"
                )
            self._index = index
        return self._index

    def sequence_bounds(self) -> np.ndarray:
        """Token offsets of the S sequences (int64, S + 1): GPTDataset's "documents"."""
        if self._sequences is None:
            index = self.index()
            bounds = np.empty(index.header.sequences + 1, dtype=np.int64)
            np.floor_divide(index.pointers, index.header.dtype.itemsize, out=bounds[:-1])
            bounds[-1] = self.info.num_tokens
            self._sequences = bounds
        return self._sequences

    def document_bounds(self) -> np.ndarray:
        """Token offsets of the documents (int64, documents + 1; empty ones repeat)."""
        if self._documents is None:
            sequences = self.sequence_bounds()
            docs = self.index().document_indices
            complete = self.info.meta["documents_from"] == "index"
            self._documents = sequences[docs] if complete and docs is not None else sequences
        return self._documents

    def sequence_modes(self) -> np.ndarray | None:
        """Per-sequence modes (int8) of a multimodal dataset, else ``None``."""
        return self.index().modes


class MegatronFormat:
    """A ``.bin`` beside a ``<stem>.idx`` (FORMATS §1)."""

    name = "megatron"
    has_documents = True

    def sniff(self, path: str, head: bytes, siblings: frozenset[str]) -> bool:
        name = path.rsplit("/", 1)[-1]
        return name.endswith(".bin") and _index_path(name) in siblings

    def describe(self, fs: Any, file: ListedFile, options: ReadOptions) -> ShardInfo:
        if not file.path.endswith(".bin"):
            raise FormatError(
                f"{file.path}: format = 'megatron' reads the .bin of a dataset prefix; give the "
                "prefix (data/x_text_document) or its .bin"
            )
        idx_path = _index_path(file.path)
        index, complete = read_index(idx_path, file.size, fs=fs)
        header = index.header
        dtype = check_token_dtype(header.dtype, idx_path)
        what = f"index says dtype {dtype.name} (code {header.dtype_code})"
        check_configured_dtype(options.dtype, dtype, idx_path, what)
        documents = header.document_entries - 1 if complete else header.sequences
        meta = {
            "layout": header.layout,
            "dtype_code": header.dtype_code,
            "sequences": header.sequences,
            "documents": documents,
            "documents_from": "index" if complete else "sequences",
            "multimodal": header.multimodal,
            "index_size": header.size,
        }
        num_tokens = file.size // dtype.itemsize
        return ShardInfo(
            file.path, file.relpath, file.size, self.name, dtype.str, 0, num_tokens, idx_path, meta
        )

    def open(self, info: ShardInfo) -> MegatronShard:
        return MegatronShard(info)


FORMAT = MegatronFormat()


class MegatronWriter:
    """Write a Megatron dataset ``prefix.bin`` + ``prefix.idx`` like ``IndexedDatasetBuilder``.

    Tokens stream to a temporary ``.bin``; the index arrays stay in RAM (4 bytes per sequence,
    8 per document); :meth:`close` writes the ``.idx`` and renames both into place. As a
    :class:`~streamload.formats.base.DocumentWriter`, ``add_document(tokens)`` writes one
    sequence (none when empty) and ends the document, as ``preprocess_data.py`` does.

    Args:
        prefix: Output path prefix (``data/web_text_document``).
        dtype: Token dtype (uint16 for vocab < 65500, else int32; also uint8/int8/int16/int64).
        multimodal: Record a mode per sequence (``sequence_modes``).

    Example:
        >>> with MegatronWriter("/tmp/x_text_document", np.uint16) as w:  # doctest: +SKIP
        ...     w.add_document(np.array([10, 11, 0]))
    """

    def __init__(
        self, prefix: str | os.PathLike[str], dtype: Any = np.int32, multimodal: bool = False
    ) -> None:
        self.prefix = os.fspath(prefix)
        self.dtype = np.dtype(dtype).newbyteorder("<")
        code_of_dtype(self.dtype)
        self.multimodal = multimodal
        self._lengths = array("i")
        self._documents = array("q", [0])
        self._modes = array("b")
        self._bin_tmp = temp_beside(self.prefix + ".bin")
        self._bin = open(self._bin_tmp, "wb")  # noqa: SIM115 - closed by close()/abort()
        self._closed = False

    def _tokens(self, tokens: Any) -> np.ndarray:
        arr = np.asarray(tokens).reshape(-1)
        if arr.size == 0:
            return arr.astype(self.dtype)
        if arr.dtype.kind not in "iu":
            raise ConfigError(f"{self.prefix}: tokens have dtype {arr.dtype}, expected integers")
        info = np.iinfo(self.dtype)
        lo, hi = int(arr.min()), int(arr.max())
        if lo < info.min or hi > info.max:
            raise ConfigError(
                f"{self.prefix}: token {lo if lo < info.min else hi} does not fit "
                f"{self.dtype.name} [{info.min}, {info.max}]; choose a wider dtype"
            )
        return arr.astype(self.dtype, copy=False)

    def _check_open(self) -> None:
        if self._closed:
            raise ValueError(f"{self.prefix}: writer is closed")

    def _add_modes(self, modes: Sequence[int] | None, count: int) -> None:
        if not self.multimodal:
            if modes is not None:
                raise ConfigError(f"{self.prefix}: modes given but the writer is not multimodal")
            return
        modes = [0] * count if modes is None else [int(m) for m in modes]
        if len(modes) != count or any(not -128 <= m < 128 for m in modes):
            raise ConfigError(f"{self.prefix}: modes {modes} are not {count} int8 values")
        self._modes.extend(modes)

    def add_item(self, tokens: Any, mode: int = 0) -> None:
        """Append one sequence of the current document (``mode`` when multimodal)."""
        self._check_open()
        arr = self._tokens(tokens)
        if arr.size > np.iinfo(np.int32).max:
            raise ConfigError(f"{self.prefix}: a sequence of {arr.size} tokens exceeds int32")
        self._add_modes([mode] if self.multimodal else None, 1)
        self._bin.write(arr.tobytes())
        self._lengths.append(arr.size)

    def end_document(self) -> None:
        """End the current document at the current sequence count."""
        self._check_open()
        self._documents.append(len(self._lengths))

    def add_document(
        self,
        tokens: Any,
        lengths: Sequence[int] | None = None,
        modes: Sequence[int] | None = None,
    ) -> None:
        """Append a whole document: its sequences have ``lengths`` (default: one sequence,
        none for an empty document) and optional ``modes``; then end the document."""
        self._check_open()
        arr = self._tokens(tokens)
        if lengths is None:
            lengths = [arr.size] if arr.size else []
        lengths = [int(n) for n in lengths]
        if any(n < 0 or n > np.iinfo(np.int32).max for n in lengths) or sum(lengths) != arr.size:
            raise ConfigError(
                f"{self.prefix}: sequence lengths {lengths} must be int32 >= 0 and add up to the "
                f"document's {arr.size} tokens"
            )
        self._add_modes(modes, len(lengths))
        self._bin.write(arr.tobytes())
        self._lengths.extend(lengths)
        self.end_document()

    def add_index(self, other_prefix: str | os.PathLike[str]) -> None:
        """Append a whole dataset (its sequences, documents and tokens), as ``add_index``.

        Raises:
            FormatError: the other dataset is corrupt, of another dtype, or multimodal when
                this one is not (or the reverse).
        """
        self._check_open()
        other = os.fspath(other_prefix)
        bin_path = other + ".bin"
        if not os.path.isfile(bin_path):
            raise FormatError(f"{bin_path}: missing; a dataset prefix needs its .bin and .idx")
        index, complete = read_index(other + ".idx", os.path.getsize(bin_path))
        header = index.header
        if header.dtype != self.dtype:
            raise FormatError(
                f"{other}.idx: dtype {header.dtype.name} differs from this writer's "
                f"{self.dtype.name}; datasets of different dtypes cannot be merged"
            )
        if header.multimodal != self.multimodal:
            raise FormatError(
                f"{other}.idx: multimodal = {header.multimodal} but the writer has multimodal = "
                f"{self.multimodal}"
            )
        docs = index.document_indices if complete else None
        docs = np.arange(header.sequences + 1) if docs is None else docs
        offset = len(self._lengths)
        self._lengths.frombytes(index.lengths.astype(np.intc).tobytes())
        self._documents.frombytes((docs[1:] + offset).astype(np.longlong).tobytes())
        if index.modes is not None:
            self._modes.frombytes(index.modes.astype(np.int8).tobytes())
        with open(bin_path, "rb") as fh:
            shutil.copyfileobj(fh, self._bin)

    def finalize(self) -> None:
        """Same as :meth:`close` (the builder's name)."""
        self.close()

    def close(self) -> None:
        """Write the ``.idx`` and rename both files into place.

        Raises:
            ConfigError: sequences were added after the last ``end_document()`` (call it first;
                the writer stays open).
        """
        if self._closed:
            return
        pending = len(self._lengths) - self._documents[-1]
        if pending:
            raise ConfigError(
                f"{self.prefix}: {pending} sequences were added after the last end_document(); "
                "call end_document() before close()"
            )
        self._bin.close()
        self._closed = True
        idx_tmp = temp_beside(self.prefix + ".idx")
        try:
            write_index(
                idx_tmp,
                self.dtype,
                np.frombuffer(self._lengths, dtype=np.intc),
                np.frombuffer(self._documents, dtype=np.longlong),
                np.frombuffer(self._modes, dtype=np.int8) if self.multimodal else None,
            )
            os.replace(self._bin_tmp, self.prefix + ".bin")
            os.replace(idx_tmp, self.prefix + ".idx")
        except BaseException:
            for tmp in (self._bin_tmp, idx_tmp):
                with contextlib.suppress(OSError):
                    os.unlink(tmp)
            raise

    def abort(self) -> None:
        """Discard the output (nothing is renamed into place)."""
        self._closed = True
        self._bin.close()
        with contextlib.suppress(OSError):
            os.unlink(self._bin_tmp)

    def __enter__(self) -> MegatronWriter:
        return self

    def __exit__(self, exc_type: object, *exc: object) -> None:
        if exc_type is not None:
            self.abort()
            return
        try:
            self.close()
        except BaseException:
            self.abort()
            raise


def _prefix(path: str | os.PathLike[str]) -> str:
    path = os.fspath(path)
    if path.endswith((".bin", ".idx")) and not os.path.exists(path + ".idx"):
        return path[:-4]
    return path


def merge_megatron(
    prefixes: Sequence[str | os.PathLike[str]], out_prefix: str | os.PathLike[str]
) -> None:
    """Concatenate Megatron datasets into ``out_prefix`` (``tools/merge_datasets.py``).

    The dtype and multimodality come from the first input; the others must match. The
    output may replace an input: it is written under temporary names and renamed at the end.

    Raises:
        ConfigError: no inputs.
        FormatError: an input is missing, corrupt, or of another dtype or multimodality.
    """
    if not prefixes:
        raise ConfigError("merge_megatron needs at least one input prefix")
    inputs = [_prefix(p) for p in prefixes]
    first = inputs[0] + ".idx"
    header = map_index(load_buffer(first), first).header
    with MegatronWriter(out_prefix, header.dtype, header.multimodal) as writer:
        for prefix in inputs:
            writer.add_index(prefix)
