"""What each format ``streamload convert`` writes needs: its destination, its entries in
publishing order, its options, and its writer.

Destination rules (every target; :mod:`streamload.tools.convert` publishes the entries):

* ``megatron``: a path prefix (``out/web_text_document``; a trailing ``.bin``/``.idx`` is
  dropped), written as ``PREFIX.bin`` + ``PREFIX.idx``;
* ``modalities``, ``dolma``, ``datatrove``: a file whose name ends in the format's suffix
  (``.pbin``, ``.npy``, ``.ds``), which is how readers (and folder listings) recognise the
  format; another name is refused (:class:`ConfigError` naming the suffix), never silently
  renamed; an existing folder receives the format's default name;
* ``parquet``: a file ending in ``.parquet``, or a folder (one that exists, a path ending in
  ``/``, or a name without a suffix) of Hub-sized files ``train-00000-of-0000N.parquet``
  (:mod:`streamload.formats.arrow.parquet_folder`); a name with another suffix is refused;
* ``numpy``, ``mds``, ``litdata``, ``arrow``: a folder (``shard_00000.npy``…; ``index.json`` +
  ``shard.00000.mds``…; ``index.json`` + ``chunk-0-0.bin``…; a ``datasets.save_to_disk``
  folder, ``data-00000-of-0000N.arrow`` + ``dataset_info.json`` + ``state.json``,
  :mod:`streamload.formats.arrow.folder`);
* a folder output must not exist, or be empty; nothing is ever replaced; an ``arrow``
  folder named ``*.arrow`` is refused.

Options (:class:`WriteOptions`) belong to one target each and are refused elsewhere:
``--compression`` and ``--size-limit`` to ``mds``, ``--chunk-bytes`` to ``litdata``,
``--max-file-size`` to a ``parquet`` folder and to ``arrow``.

Loss masks (:func:`writes_own_masks`): a ``labels_mask`` column in ``parquet`` (file or
folder) and ``arrow`` output, as the readers find it by name; datatrove's own ``.ds.loss``;
a mask file beside each token file elsewhere.
"""

from __future__ import annotations

import dataclasses
import os
import re
from dataclasses import dataclass

import numpy as np

from streamload.errors import ConfigError
from streamload.formats.base import DocumentWriter
from streamload.formats.dolma.dolma import CSV_SUFFIX
from streamload.formats.mask_names import mask_path_for
from streamload.tools.convert_names import TARGETS

__all__ = [
    "FOLDER_TARGETS",
    "MASK_COLUMN_TARGETS",
    "SUFFIXES",
    "TARGETS",
    "WriteOptions",
    "check_dtype",
    "check_options",
    "default_destination",
    "format_writer",
    "is_folder_output",
    "output_paths",
    "parse_size",
    "replace_options",
    "writes_own_masks",
]

SUFFIXES = {"modalities": ".pbin", "dolma": ".npy", "datatrove": ".ds", "parquet": ".parquet"}
"""The suffix a single-file target's name must end in (readers recognise the format by it)."""

FOLDER_TARGETS = ("numpy", "mds", "litdata", "arrow")
"""Targets whose output is always a folder (a ``parquet`` one is when not named ``.parquet``)."""

MASK_COLUMN_TARGETS = ("arrow", "parquet")
"""Targets whose files hold the loss masks as a ``labels_mask`` column (no mask file)."""

_DEFAULT_NAMES = {
    "megatron": "data_text_document",
    "modalities": "data.pbin",
    "dolma": "part-0-00000.npy",
    "datatrove": "data_00000_unshuffled.ds",
}
"""The name written inside a folder given as the destination of a single-file target."""

_SIZE = re.compile(r"^([0-9]+)\s*(b|kb|mb|gb|tb|kib|mib|gib|tib)?$", re.IGNORECASE)
_UNITS = {"b": 1, "kb": 10**3, "mb": 10**6, "gb": 10**9, "tb": 10**12,
          "kib": 1 << 10, "mib": 1 << 20, "gib": 1 << 30, "tib": 1 << 40}  # fmt: skip


@dataclass(frozen=True, kw_only=True)
class WriteOptions:
    """Options of one target each (``None``: the target's default).

    Attributes:
        tokenizer_name: Recorded by formats that store it (datatrove).
        compression: ``mds``: ``"zstd"`` or ``"zstd:LEVEL"`` (``--compression``).
        size_limit: ``mds``: shard size limit in bytes (``--size-limit``; MDSWriter's 64 MiB).
        chunk_bytes: ``litdata``: token bytes per chunk (``--chunk-bytes``; 64 MB).
        max_file_bytes: ``parquet`` folder, ``arrow``: Arrow bytes of rows per file
            (``--max-file-size``; 500 MB).
    """

    tokenizer_name: str | None = None
    compression: str | None = None
    size_limit: int | None = None
    chunk_bytes: int | None = None
    max_file_bytes: int | None = None


_OPTION_TARGETS = {
    "compression": ("--compression", ("mds",)),
    "size_limit": ("--size-limit", ("mds",)),
    "chunk_bytes": ("--chunk-bytes", ("litdata",)),
    "max_file_bytes": ("--max-file-size", ("parquet", "arrow")),
}
"""Each target option: its flag and the targets that take it (as folders)."""


def parse_size(text: str, flag: str) -> int:
    """A byte size given as ``67108864``, ``64MB`` (10**6) or ``64MiB`` (2**20), at least 1.

    Raises:
        ConfigError: anything else (naming ``flag``).
    """
    found = _SIZE.match(text.strip())
    value = int(found[1]) * _UNITS[(found[2] or "b").lower()] if found else 0
    if value < 1:
        raise ConfigError(
            f"{flag} {text!r} is not a size in bytes; give e.g. 67108864, 64MB or 64MiB (>= 1)"
        )
    return value


def is_folder_output(fmt: str, destination: str) -> bool:
    """Whether ``fmt`` at ``destination`` is a folder output (module docstring)."""
    if fmt in FOLDER_TARGETS:
        return True
    return fmt == "parquet" and not destination.endswith(SUFFIXES["parquet"])


def check_options(fmt: str, destination: str, options: WriteOptions) -> None:
    """Refuse options that do not belong to ``fmt`` (or to a single ``.parquet`` file), and
    an MDS compression that is not written.

    Raises:
        ConfigError: naming the flag and the target that takes it.
    """
    for name, (flag, targets) in _OPTION_TARGETS.items():
        if getattr(options, name) is None:
            continue
        if fmt not in targets or not is_folder_output(fmt, destination):
            where = " or ".join(
                "a folder of --to parquet" if target == "parquet" else f"--to {target}"
                for target in targets
            )
            raise ConfigError(f"{flag} applies to {where} only, not to --to {fmt} {destination}")
    if options.compression is not None:
        _check_compression(options.compression)


def _check_compression(compression: str) -> None:
    """An MDS compression streamload writes, with the package it needs installed."""
    from streamload.formats.mds.write import zstd_level

    try:
        zstd_level(compression)
    except ValueError as exc:
        raise ConfigError(f"--compression: {exc}; streamload writes no other") from None
    try:
        import zstandard  # noqa: F401
    except ImportError:
        raise ConfigError(
            f"--compression {compression} needs the zstandard package: pip install "
            "'streamload[mds]'"
        ) from None


def default_destination(fmt: str, destination: str) -> str:
    """Name a file inside ``destination`` when a folder (an existing one, or a path ending in
    ``/``) is given for a single-file format."""
    if fmt not in _DEFAULT_NAMES:
        return destination
    if os.path.isdir(destination) or destination.endswith(("/", os.sep)):
        return os.path.join(destination, _DEFAULT_NAMES[fmt])
    return destination


def _check_name(fmt: str, destination: str) -> None:
    if fmt == "arrow" and destination.rstrip("/" + os.sep).endswith(".arrow"):
        raise ConfigError(
            f"{destination}: --to arrow writes a save_to_disk folder, not an .arrow file (a "
            "folder listing would take a folder named .arrow for a file); name it without "
            "the suffix"
        )
    suffix = SUFFIXES.get(fmt)
    if suffix is None or destination.endswith(suffix):
        return
    base = os.path.basename(destination)
    if fmt == "parquet" and (not base or "." not in base or os.path.isdir(destination)):
        return  # a folder of Parquet files
    stem = os.path.splitext(destination)[0] if base else "out"
    folder = " (or a folder: a name without a suffix)" if fmt == "parquet" else ""
    raise ConfigError(
        f"{destination}: --to {fmt} writes a file whose name must end in {suffix} (readers "
        f"recognise the format by it){folder}; name it e.g. {stem}{suffix}"
    )


def output_paths(fmt: str, destination: str, *, masks: bool = False) -> list[str]:
    """The entries an output of ``fmt`` at ``destination`` consists of, in publishing order:
    companions first (with ``masks``, the loss mask last of them), the file a listing takes
    for the shard last. A folder output holds its files' masks.

    Raises:
        ConfigError: an unknown format, or a file name without the format's suffix.
    """
    if fmt not in TARGETS:
        raise ConfigError(f"--to {fmt!r} is not a format streamload writes ({', '.join(TARGETS)})")
    _check_name(fmt, destination)
    if is_folder_output(fmt, destination):
        return [destination.rstrip("/" + os.sep) or destination]
    if fmt == "megatron":
        prefix = destination.removesuffix(".bin").removesuffix(".idx")
        paths = [prefix + ".idx", prefix + ".bin"]
    elif fmt == "dolma":
        paths = [destination.removesuffix(".npy") + CSV_SUFFIX, destination]
    elif fmt == "datatrove":
        paths = [destination + ".index", destination + ".metadata", destination]
    else:
        paths = [destination]
    beside = masks and fmt not in MASK_COLUMN_TARGETS  # datatrove's own .ds.loss too
    return [*paths[:-1], mask_path_for(paths[-1]), paths[-1]] if beside else paths


def writes_own_masks(fmt: str, destination: str) -> bool:
    """Whether the writer of ``fmt`` at ``destination`` keeps the loss masks itself: a
    ``labels_mask`` column (``parquet``, ``arrow``), datatrove's ``.ds.loss``, a folder
    format's masks beside its files; else :class:`~streamload.tools.masks.MaskedWriter`
    writes the mask file beside the token file."""
    return fmt == "datatrove" or fmt in MASK_COLUMN_TARGETS or is_folder_output(fmt, destination)


def check_dtype(fmt: str, dtype: np.dtype) -> None:
    """datatrove (2 or 4 bytes) and Modalities (1, 2 or 4 bytes) store unsigned tokens.

    Raises:
        ConfigError: naming the format and the dtypes it stores.
    """
    if fmt not in ("datatrove", "modalities"):
        return
    widths = (2, 4) if fmt == "datatrove" else (1, 2, 4)
    if dtype.itemsize not in widths:
        raise ConfigError(
            f"{fmt} stores {' or '.join(map(str, widths))}-byte tokens; --dtype {dtype.name} "
            "does not fit: pass --dtype uint16 or uint32"
        )


def format_writer(
    fmt: str, path: str, dtype: np.dtype, options: WriteOptions, masks: bool, shard_tokens: int
) -> DocumentWriter:
    """The format's own writer of ``path`` (inside a staging folder); the folder targets
    (``arrow``: a ``labels_mask`` column) and datatrove with their own loss masks when
    ``masks``; ``shard_tokens`` per NPY shard
    of a ``numpy`` folder."""
    if fmt == "parquet":
        return _parquet_writer(path, dtype, options, masks)
    if fmt in FOLDER_TARGETS:
        return _folder_writer(fmt, path, dtype, options, masks, shard_tokens)
    if fmt == "megatron":
        from streamload.formats.megatron.megatron import MegatronWriter

        return MegatronWriter(path.removesuffix(".bin"), dtype)
    if fmt == "dolma":
        from streamload.formats.dolma.dolma import DolmaWriter

        return DolmaWriter(path, dtype)
    if fmt == "datatrove":
        from streamload.formats.datatrove.datatrove import DatatroveWriter

        name = options.tokenizer_name
        return DatatroveWriter(path, name, dtype.itemsize, save_loss_metadata=masks)
    from streamload.formats.modalities.modalities import ModalitiesWriter

    return ModalitiesWriter(path, dtype.itemsize)


def _folder_writer(
    fmt: str, path: str, dtype: np.dtype, options: WriteOptions, masks: bool, shard_tokens: int
) -> DocumentWriter:
    if fmt == "numpy":
        from streamload.formats.numpy.folder import NumpyShardWriter

        os.mkdir(path)  # published even without documents
        return NumpyShardWriter(path, dtype, shard_tokens, save_loss_masks=masks)
    if fmt == "mds":
        from streamload.formats.mds.mds import MDS_SIZE_LIMIT, MdsWriter

        limit = options.size_limit or MDS_SIZE_LIMIT
        return MdsWriter(
            path, dtype, compression=options.compression, size_limit=limit, save_loss_masks=masks
        )
    if fmt == "litdata":
        from streamload.formats.litdata.litdata import LitdataWriter

        chunk = options.chunk_bytes
        return LitdataWriter(path, dtype, chunk_bytes=chunk, save_loss_masks=masks)
    if fmt == "arrow":
        from streamload.formats.arrow.folder import MAX_FILE_BYTES, ArrowFolderWriter

        limit = options.max_file_bytes or MAX_FILE_BYTES
        return ArrowFolderWriter(path, dtype, max_file_bytes=limit, save_loss_masks=masks)
    raise ConfigError(f"--to {fmt!r} is not a folder format")  # pragma: no cover - checked


def _parquet_writer(
    path: str, dtype: np.dtype, options: WriteOptions, masks: bool
) -> DocumentWriter:
    if path.endswith(SUFFIXES["parquet"]):
        from streamload.formats.arrow.parquet_write import ParquetWriter

        return ParquetWriter(path, dtype, masks=masks)
    from streamload.formats.arrow.parquet_folder import MAX_FILE_BYTES, ParquetFolderWriter

    limit = options.max_file_bytes or MAX_FILE_BYTES
    return ParquetFolderWriter(path, dtype, max_file_bytes=limit, save_loss_masks=masks)


def replace_options(options: WriteOptions | None, tokenizer_name: str | None) -> WriteOptions:
    """``options`` (default: none) with ``tokenizer_name`` when it is given."""
    options = options or WriteOptions()
    if tokenizer_name is None:
        return options
    return dataclasses.replace(options, tokenizer_name=tokenizer_name)
