"""Headerless token files: tatm/KempnerForge ``.bin`` and Dolma-style headerless ``.npy``.

The width is not stored in the file, so it comes from the config or from a tatm
``metadata.yaml`` beside the file; it is never guessed from the file size (KempnerForge's
``size % 4`` rule silently misreads half of all uint16 files, FORMATS §5.1).

tatm zero tails: ``tatm tokenize`` pre-allocates every ``.bin`` and never truncates it, so each
file ends in a run of token-0 padding (FORMATS §5.2); tatm records the true token count
nowhere (its ``metadata.yaml`` is written before tokenizing). When a tatm ``metadata.yaml``
declares the folder's dtype (``ReadOptions.meta_dtype`` is set), the trailing run of zero
tokens is found by reading the file backwards from its end and excluded from the shard, with
a warning naming the file and the count; except that when the config's ``eos_token_id`` is 0,
the first zero of that run is kept: it is the EOS that ends the last document
(:func:`padding_tokens`). Example: ``[5, 6, 0, 7, 0, 0, 0]`` reads as ``[5, 6, 0, 7, 0]`` with
``eos_token_id = 0`` and as ``[5, 6, 0, 7]`` without it (or with another EOS). A last
document that truly ends in more than one 0 (a real token 0 before an EOS 0) still loses all
but one; a file of nothing but zeros holds no document and is refused.

Without ``vocab_size``, a wrong width is caught on a bounded sample of each file: ids no
vocabulary has (a uint16 file read as uint32) are refused, naming the dtype that fits
(:mod:`streamload.formats.numpy.plausible_ids`).
"""

from __future__ import annotations

import dataclasses
import warnings
from typing import Any

import numpy as np

from streamload.errors import FormatError
from streamload.formats.base import (
    ListedFile,
    MemmapShard,
    ReadOptions,
    ShardInfo,
    TokenShard,
    check_token_dtype,
    open_head,
)
from streamload.formats.numpy.plausible_ids import check_plausible_ids
from streamload.formats.tatm_metadata import TATM_METADATA, tatm_dtype  # re-exported

__all__ = [
    "FORMAT",
    "TATM_METADATA",
    "RawFormat",
    "describe_raw",
    "padding_tokens",
    "raw_dtype",
    "tatm_dtype",
    "without_zero_tail",
    "zero_tail_tokens",
]

_FIRST_TAIL_BLOCK = 1 << 16
_MAX_TAIL_BLOCK = 1 << 26
"""Bytes read per step when scanning a tail backwards (doubling from the first size)."""


def raw_dtype(path: str, options: ReadOptions) -> str:
    """The dtype of a headerless file: the config's, else tatm metadata's; they must agree."""
    dtype, meta = options.dtype, options.meta_dtype
    if dtype != "auto" and meta is not None and dtype != meta:
        raise FormatError(
            f"{path}: the config says dtype = {dtype!r} but {TATM_METADATA} beside it says "
            f"{meta!r}; one of them is wrong"
        )
    return meta if dtype == "auto" and meta is not None else dtype


def describe_raw(path: str, relpath: str, size: int, dtype: str, why: str = "") -> ShardInfo:
    """Describe a raw shard of ``size`` bytes holding tokens of ``dtype``.

    Raises:
        FormatError: no dtype known, or a size that is not a multiple of the item size.
    """
    if dtype == "auto":
        raise FormatError(
            f"{path}: {why or 'a headerless token file'} does not record its token width; "
            'set dtype (e.g. dtype = "uint16") in this source\'s config'
        )
    np_dtype = check_token_dtype(np.dtype(dtype).newbyteorder("<"), path)
    if size % np_dtype.itemsize:
        raise FormatError(
            f"{path}: file size {size} bytes is not a multiple of the {np_dtype.name} item size "
            f"{np_dtype.itemsize}; the dtype is wrong or the file is truncated"
        )
    return ShardInfo(path, relpath, size, "raw", np_dtype.str, 0, size // np_dtype.itemsize)


def zero_tail_tokens(fs: Any, path: str, size: int, itemsize: int) -> int:
    """Tokens of value 0 at the end of a headerless file of ``size`` bytes.

    Reads backwards from the end in blocks that double from 64 KiB to 64 MiB, so a file with a
    short tail costs one small read and a long tail is scanned at disk speed; each block is
    checked in C (``bytes.rstrip``). A token is zero when all its bytes are.
    """
    zero_bytes, end, block = 0, size - size % itemsize, _FIRST_TAIL_BLOCK
    with open_head(fs, path) as fh:
        while end > 0:
            start = max(0, end - block - (end - block) % itemsize)
            fh.seek(start)
            data = fh.read(end - start)
            kept = len(data.rstrip(b"\0"))
            zero_bytes += len(data) - kept
            if kept:
                break
            end, block = start, min(2 * block, _MAX_TAIL_BLOCK)
    return zero_bytes // itemsize


def padding_tokens(zero_tail: int, num_tokens: int, eos_token_id: int | None) -> int:
    """How many of a tatm file's ``zero_tail`` trailing zero tokens are padding.

    All of them, except the first when ``eos_token_id`` is 0 and a non-zero token precedes
    the run: that zero is the EOS ending the last document (module docstring).
    """
    if eos_token_id == 0 and 0 < zero_tail < num_tokens:
        return zero_tail - 1
    return zero_tail


def without_zero_tail(fs: Any, info: ShardInfo, eos_token_id: int | None) -> ShardInfo:
    """``info`` less the zero padding tatm leaves at the end of a file, with a warning
    naming the file and the count (module docstring)."""
    zeros = zero_tail_tokens(fs, info.path, info.size, np.dtype(info.dtype).itemsize)
    tail = padding_tokens(zeros, info.num_tokens, eos_token_id)
    if tail:
        kept = (
            "the first trailing zero is kept: it is the EOS (eos_token_id = 0) ending the "
            "last document"
            if tail < zeros
            else "a real final token 0 cannot be told apart and is excluded too (with "
            "eos_token_id = 0 configured, a final EOS 0 is kept)"
        )
        warnings.warn(
            f"{info.path}: excluded {tail} trailing zero tokens (the zero padding tatm "
            f"leaves at the end of its files; {TATM_METADATA} beside it marks it as tatm "
            f"output); {kept}",
            stacklevel=3,
        )
    meta = {**info.meta, "zero_tail": tail}
    return dataclasses.replace(info, num_tokens=info.num_tokens - tail, meta=meta)


class RawFormat:
    """Flat little-endian tokens with no header (the fallback of ``format = "auto"``)."""

    name = "raw"
    has_documents = False

    def sniff(self, path: str, head: bytes, siblings: frozenset[str]) -> bool:
        return True

    def describe(self, fs: Any, file: ListedFile, options: ReadOptions) -> ShardInfo:
        why = (
            "a .npy file without the \\x93NUMPY magic (a headerless raw dump, e.g. Dolma)"
            if file.path.endswith(".npy")
            else "a headerless token file"
        )
        dtype = raw_dtype(file.path, options)
        info = describe_raw(file.path, file.relpath, file.size, dtype, why)
        if options.meta_dtype is not None:
            info = without_zero_tail(fs, info, options.eos_token_id)
        if options.vocab_size is None:  # with it, every id is checked where it is read
            check_plausible_ids(fs, info, options.meta_dtype)
        return info

    def open(self, info: ShardInfo) -> TokenShard:
        return MemmapShard(info)


FORMAT = RawFormat()
