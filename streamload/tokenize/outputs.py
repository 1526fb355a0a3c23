"""Output files of one group: the token dtype, and a writer that rolls files at ``max_size``.

A group writes ``part-{G}-{M:05d}`` files (``G`` zero-padded to the digits of the group
count, as dolma names them) through the format writers of :mod:`streamload.formats`. A
document is written whole into the current file if ``written + len < max_size``; otherwise
the file is closed and the next one started, so every file holds fewer than ``max_size``
tokens and no document is ever split (dolma's rule). A document of ``max_size`` tokens or
more is an error naming it.

Each part is written into the group's staging folder under its final name; when its writer
closes, every file the format makes (:data:`PART_SUFFIXES`) must be there, else the run
fails naming the missing one (a writer that put its output elsewhere is never skipped over).
:attr:`PartWriter.files` lists them for publishing, each part's token file after its
companions.

With loss masks (``--loss-spans-field``) each part also gets its mask, one byte per token:
datatrove's own ``.ds.loss``, for the other formats the file
:func:`~streamload.formats.mask_names.mask_path_for` names (``part-0-00000.npy.loss``).
"""

from __future__ import annotations

import os
from typing import Any

import numpy as np

from streamload.errors import ConfigError, FormatError
from streamload.formats.base import DocumentWriter
from streamload.formats.loss_mask import LossMaskWriter
from streamload.formats.mask_names import mask_name_for
from streamload.tokenize.config import OutputFormat
from streamload.tokenize.inputs import InputDocument

__all__ = ["PART_SUFFIXES", "PartWriter", "choose_dtype", "part_files", "part_stem"]

PART_SUFFIXES = {
    OutputFormat.DOLMA: (".npy", ".csv.gz"),
    OutputFormat.MEGATRON: (".bin", ".idx"),
    OutputFormat.MODALITIES: (".pbin",),
    OutputFormat.NUMPY: (".npy",),
    OutputFormat.DATATROVE: (".ds", ".ds.index", ".ds.metadata"),
}
"""The files one part of each format is made of (``part-G-MMMMM`` + suffix), token file
first."""


def part_files(fmt: OutputFormat, part: str, masks: bool) -> list[str]:
    """The file names of one part in publishing order: companions, the loss mask (with
    ``masks``), then the token file a listing takes for the shard."""
    token, *companions = (part + suffix for suffix in PART_SUFFIXES[fmt])
    mask = [mask_name_for(token)] if masks else []
    return [*companions, *mask, token]


_UNSIGNED_WIDTHS = {OutputFormat.MODALITIES: (1, 2, 4), OutputFormat.DATATROVE: (2, 4)}
"""Formats that store unsigned tokens of fixed widths only."""


def _default_dtype(fmt: OutputFormat, vocab_size: int) -> np.dtype:
    """Each tool's own default: the smallest width its readers accept for the vocabulary."""
    if fmt is OutputFormat.MEGATRON:  # megatron-core DType.optimal_dtype
        return np.dtype(np.uint16 if vocab_size < 65500 else np.int32)
    if fmt is OutputFormat.MODALITIES:
        from streamload.formats.modalities.modalities import token_size_for_vocab

        return np.dtype({1: np.uint8, 2: np.uint16, 4: np.uint32}[token_size_for_vocab(vocab_size)])
    if fmt is OutputFormat.DATATROVE:
        return np.dtype(np.uint16 if vocab_size <= 65536 else np.uint32)
    return np.dtype(np.min_scalar_type(max(vocab_size - 1, 0)))  # dolma, numpy


def choose_dtype(
    fmt: OutputFormat, dtype: str, vocab_size: int, special_ids: dict[str, int | None]
) -> np.dtype:
    """The output token dtype, checked before any work.

    Args:
        fmt: Output format.
        dtype: ``auto`` or a numpy integer dtype name.
        vocab_size: Ids the tokenizer can produce (``0 .. vocab_size - 1``).
        special_ids: BOS/EOS/PAD ids by option name (``None`` when unset).

    Raises:
        ConfigError: not an integer dtype, too small for the vocabulary or a special id, or
            not storable by the format.
    """
    if dtype == "auto":
        chosen = _default_dtype(fmt, vocab_size)
    else:
        try:
            chosen = np.dtype(dtype)
        except TypeError:
            raise ConfigError(f"--dtype {dtype!r} is not a numpy dtype") from None
        if chosen.kind not in "ui":
            raise ConfigError(f"--dtype {dtype} cannot hold token ids; expected an integer dtype")
    top = np.iinfo(chosen).max
    if vocab_size - 1 > top:
        raise ConfigError(
            f"--dtype {chosen.name} holds ids up to {top} but the tokenizer has {vocab_size} ids "
            f"(up to {vocab_size - 1}); use a wider dtype or --dtype auto"
        )
    for name, value in special_ids.items():
        if value is not None and value > top:
            raise ConfigError(f"--{name.replace('_', '-')} {value} does not fit {chosen.name}")
    widths = _UNSIGNED_WIDTHS.get(fmt)
    if widths is not None and (chosen.kind != "u" or chosen.itemsize not in widths):
        raise ConfigError(
            f"{fmt.value} stores unsigned tokens of {' or '.join(map(str, widths))} bytes; "
            f"--dtype {chosen.name} does not fit"
        )
    if fmt is OutputFormat.MEGATRON:
        from streamload.formats.megatron.megatron import code_of_dtype

        code_of_dtype(chosen)
    return chosen


def part_stem(group: int, num_groups: int) -> str:
    """``part-{group}`` zero-padded to ``ceil(log10(num_groups + 1))`` digits (dolma)."""
    digits = len(str(num_groups)) if num_groups > 0 else 1
    return f"part-{group:0{digits}d}"


class PartWriter:
    """Write one group's documents into ``{stem}-{M:05d}`` files in ``folder``.

    Args:
        fmt: Output format.
        folder: Where the files go (a group's staging folder).
        stem: ``part-{G}``.
        dtype: Token dtype.
        max_size: Each file holds fewer tokens than this.
        tokenizer_name: Recorded by datatrove.
        masks: Write each part's loss mask (:meth:`add` takes one per document).

    Use as a context manager: an exception discards the files being written.
    """

    def __init__(
        self,
        fmt: OutputFormat,
        folder: str,
        stem: str,
        dtype: np.dtype,
        max_size: int,
        tokenizer_name: str,
        *,
        masks: bool = False,
    ) -> None:
        self.fmt = fmt
        self.masks = masks
        self.folder = folder
        self.stem = stem
        self.dtype = dtype
        self.max_size = max_size
        self.tokenizer_name = tokenizer_name
        self.parts = 0
        self.files: list[str] = []
        """Names of the complete files written so far, in ``folder``."""
        self._writer: DocumentWriter | None = None
        self._mask: LossMaskWriter | None = None
        self._written = 0

    def _part(self, number: int) -> str:
        return f"{self.stem}-{number:05d}"

    def _open(self) -> DocumentWriter:
        name = os.path.join(self.folder, self._part(self.parts))
        self.parts += 1
        self._written = 0
        fmt, dtype = self.fmt, self.dtype
        if self.masks and fmt is not OutputFormat.DATATROVE:  # datatrove writes its own
            token = name + PART_SUFFIXES[fmt][0]
            self._mask = LossMaskWriter(os.path.join(self.folder, mask_name_for(token)))
        if fmt is OutputFormat.DOLMA:
            from streamload.formats.dolma.dolma import DolmaWriter

            return DolmaWriter(name + ".npy", dtype, mtime=0)  # fixed gzip time: same bytes
        if fmt is OutputFormat.MEGATRON:
            from streamload.formats.megatron.megatron import MegatronWriter

            return MegatronWriter(name, dtype)
        if fmt is OutputFormat.MODALITIES:
            from streamload.formats.modalities.modalities import ModalitiesWriter

            return ModalitiesWriter(name + ".pbin", dtype.itemsize)
        if fmt is OutputFormat.DATATROVE:
            from streamload.formats.datatrove.datatrove import DatatroveWriter

            return DatatroveWriter(
                name + ".ds", self.tokenizer_name, dtype.itemsize, save_loss_metadata=self.masks
            )
        from streamload.formats.numpy.folder import NumpyShardWriter

        # one shard per part (the part rolls before the shard limit): renamed at close. The
        # prefix is a file name: the folder is the writer's own argument, given once.
        prefix = f"{self._part(self.parts - 1)}."
        return NumpyShardWriter(self.folder, dtype, self.max_size, prefix=prefix)

    def _finish(self) -> None:
        writer, self._writer = self._writer, None
        if writer is None:
            return
        writer.close()
        mask, self._mask = self._mask, None
        if mask is not None:
            mask.close()
        part = self._part(self.parts - 1)
        if self.fmt is OutputFormat.NUMPY:
            shard = self._require(f"{part}.00000.npy")
            os.replace(shard, os.path.join(self.folder, f"{part}.npy"))
        names = part_files(self.fmt, part, self.masks)
        for name in names:
            self._require(name)
        self.files.extend(names)

    def _require(self, name: str) -> str:
        """The path of ``name`` in the folder; fails unless the writer that just closed
        left it there."""
        path = os.path.join(self.folder, name)
        if not os.path.isfile(path):
            raise FormatError(
                f"{path}: the {self.fmt.value} writer closed but this file is missing (it was "
                "written elsewhere or removed); the group is not published"
            )
        return path

    def add(self, tokens: np.ndarray, doc: InputDocument, mask: np.ndarray | None = None) -> None:
        """Write one document (and with ``masks`` its loss mask, one flag per token),
        starting the next file when it does not fit this one."""
        n = int(tokens.size)
        if n >= self.max_size:
            raise FormatError(
                f"{doc.src}: line {doc.loc} (id {doc.id!r}) has {n} tokens; a file holds fewer "
                f"than --max-size {self.max_size} and documents are never split"
            )
        if self._writer is not None and self._written + n >= self.max_size:
            self._finish()
        if self._writer is None:
            self._writer = self._open()
        if self.masks and (mask is None or mask.shape != tokens.shape):
            got = "none" if mask is None else f"shape {mask.shape}"
            raise ValueError(f"{doc.src}: line {doc.loc}: loss mask {got} for {n} tokens")
        if self.fmt is OutputFormat.DOLMA:
            self._writer.add_document(tokens, doc_id=doc.id, src=doc.src, loc=doc.loc)  # type: ignore[call-arg]
        elif self.fmt is OutputFormat.DATATROVE and self.masks:
            self._writer.add_document(tokens, loss_mask=mask)  # type: ignore[call-arg]
        else:
            self._writer.add_document(tokens)
        if self._mask is not None:
            self._mask.add(mask)
        self._written += n

    def close(self) -> None:
        """Finish the last file."""
        self._finish()

    def __enter__(self) -> PartWriter:
        return self

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        if exc_type is None:
            self.close()
        else:
            writer, self._writer = self._writer, None
            mask, self._mask = self._mask, None
            for open_writer in (writer, mask):
                if open_writer is not None:
                    open_writer.__exit__(exc_type, exc, tb)
