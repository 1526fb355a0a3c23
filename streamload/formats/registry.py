"""The formats streamload reads, in the order ``format = "auto"`` tries them (FORMATS §9.1).

Formats with a companion file or a magic number come first; the headerless ``raw`` format
is the fallback and needs a dtype.
"""

from __future__ import annotations

import importlib

from streamload.errors import FormatError
from streamload.formats.base import FORMAT_ALIASES, ShardFormatSpec, ShardInfo, TokenShard

__all__ = [
    "FORMATS",
    "FORMAT_ALIASES",
    "canonical_name",
    "get_format",
    "open_only_format",
    "open_shard",
    "sniff_format",
]

_MODULES = (
    "megatron.megatron", "modalities.modalities", "datatrove.datatrove", "dolma.dolma",
    "mds.mds", "litdata.litdata", "arrow.arrow", "arrow.parquet", "jsonl.jsonl", "numpy.npy",
    "numpy.raw",
)  # fmt: skip
"""Format modules in sniffing order, as ``family.module`` under :mod:`streamload.formats`;
each exposes ``FORMAT``, its ``ShardFormatSpec`` (a module not yet written is left out)."""

_OPEN_ONLY = ("loss_mask", "arrow.jsonl_rows")
"""Modules of what is opened like a shard but never sniffed, listed or configured (a token
file's loss mask, :mod:`streamload.formats.loss_mask`; the reader of JSONL rows of token
ids, to which the ``jsonl`` format hands such files,
:mod:`streamload.formats.arrow.jsonl_rows`)."""


def _load(modules: tuple[str, ...] = _MODULES) -> dict[str, ShardFormatSpec]:
    formats = {}
    for name in modules:
        try:
            module = importlib.import_module(f"streamload.formats.{name}")
        except ModuleNotFoundError as exc:
            if exc.name != f"streamload.formats.{name}":
                raise
            continue
        spec = module.FORMAT
        formats[spec.name] = spec
    return formats


FORMATS: dict[str, ShardFormatSpec] = _load()
"""Registered formats by name, in sniffing order."""

_OPENABLE: dict[str, ShardFormatSpec] = {**FORMATS, **_load(_OPEN_ONLY)}


def canonical_name(name: str) -> str:
    """The one name of a format, given it or a former name (``"npy"`` → ``"numpy"``)."""
    return FORMAT_ALIASES.get(name, name)


def get_format(name: str) -> ShardFormatSpec:
    """The format called ``name`` (or a former name of it, :data:`FORMAT_ALIASES`).

    Raises:
        FormatError: no such format.
    """
    try:
        return FORMATS[canonical_name(name)]
    except KeyError:
        raise FormatError(
            f"format {name!r} is not readable; known formats: {', '.join(FORMATS)}"
        ) from None


def sniff_format(path: str, head: bytes, siblings: frozenset[str]) -> ShardFormatSpec:
    """The first registered format that recognises the file."""
    for spec in FORMATS.values():
        if spec.sniff(path, head, siblings):
            return spec
    raise FormatError(f"{path}: not a token file of any known format")  # pragma: no cover


def open_only_format(name: str) -> ShardFormatSpec:
    """An open-only format by name (:data:`_OPEN_ONLY`): how a format hands some of its
    files to a reader of another family, which it may not import.

    Raises:
        FormatError: no such format.
    """
    if name in FORMATS or name not in _OPENABLE:
        raise FormatError(f"{name!r} is not an open-only format")
    return _OPENABLE[name]


def open_shard(info: ShardInfo) -> TokenShard:
    """Open a described shard with its format's reader (also a loss mask's, described by
    :func:`streamload.formats.loss_mask.mask_shard`)."""
    spec = _OPENABLE.get(info.format)
    return (spec or get_format(info.format)).open(info)
