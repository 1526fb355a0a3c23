"""A headerless file read at the wrong width, caught without ``vocab_size`` (issue 36, item 8).

A headerless file does not record its token width, so a wrong ``dtype`` reads other ids,
silently: a uint16 file read as uint32 joins each pair of ids into one (``a + 65536 * b``),
ids in the millions. No tokenizer in use has over ~2**21 ids, so an id at or above
:data:`MAX_PLAUSIBLE_ID` (or a negative one) means the width is wrong. With ``vocab_size``
set, every id is checked against it where it is read, and this check is not needed.

It is cheap: at describe time it reads a bounded sample, the first and last
:data:`SAMPLE_TOKENS` tokens of the file (two reads of at most 64 KiB each), never the whole
file; ``streamload validate`` reads every token. The width that fits is the widest unsigned
one, narrower than the configured one, whose reading of the same bytes is plausible.

Example: uint16 tokens ``[17, 299, 5, 0]`` read as uint32 are ``[19595281, 5]``: refused,
"the file looks like uint16". A uint32 file read as uint16 reads plausible ids (``[17, 0,
299, 0]``) and is not caught here: set ``vocab_size``, or check what ``streamload docs``
prints.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from streamload.errors import FormatError
from streamload.formats.base import ShardInfo, open_head

__all__ = [
    "MAX_PLAUSIBLE_ID",
    "SAMPLE_TOKENS",
    "check_plausible_ids",
    "fitting_dtype",
    "implausible_ids",
    "sample_bytes",
]

MAX_PLAUSIBLE_ID = 1 << 21
"""No tokenizer in use has this many ids (the largest have ~2**18); above it, the width is
wrong (or the ids are real: then ``vocab_size`` says so and this check is skipped)."""

SAMPLE_TOKENS = 4096
"""Tokens read at each end of a file for the check."""

_UNSIGNED = ("uint64", "uint32", "uint16", "uint8")


def sample_bytes(fs: Any, info: ShardInfo, count: int = SAMPLE_TOKENS) -> bytes:
    """The bytes of the first and last ``count`` tokens of ``info`` (all of them when the
    file holds fewer than ``2 * count``), each part a whole number of tokens."""
    itemsize = np.dtype(info.dtype).itemsize
    total = info.num_tokens * itemsize
    part = count * itemsize
    with open_head(fs, info.path) as fh:
        fh.seek(info.offset)
        if total <= 2 * part:
            return bytes(fh.read(total))
        head = fh.read(part)
        fh.seek(info.offset + total - part)
        return bytes(head) + bytes(fh.read(part))


def implausible_ids(ids: np.ndarray, bound: int = MAX_PLAUSIBLE_ID) -> str | None:
    """What is implausible about ``ids`` (``"ids up to 19,595,281, more than any vocabulary
    (2**21)"``), or ``None``."""
    if ids.size == 0:
        return None
    high, low = int(ids.max()), int(ids.min())
    if high >= bound:
        return f"ids up to {high:,}, more than any vocabulary (2**{bound.bit_length() - 1})"
    return f"ids down to {low:,}, and no id is negative" if low < 0 else None


def fitting_dtype(data: bytes, dtype: np.dtype, bound: int = MAX_PLAUSIBLE_ID) -> str | None:
    """The widest unsigned dtype, other than ``dtype`` and no wider, that reads ``data`` as
    plausible ids (every one below ``bound``); ``None`` when none does."""
    for name in _UNSIGNED:
        candidate = np.dtype(name)
        if candidate.itemsize > dtype.itemsize or candidate == dtype.newbyteorder("="):
            continue
        ids = np.frombuffer(data, dtype=candidate.newbyteorder("<"))
        if implausible_ids(ids, bound) is None:
            return name
    return None


def check_plausible_ids(fs: Any, info: ShardInfo, meta_dtype: str | None) -> None:
    """Refuse a headerless shard whose sampled ids no vocabulary has (module docstring).

    Args:
        fs: The file system of ``info.path``.
        info: The described shard (its dtype from the config, or from tatm metadata).
        meta_dtype: The dtype a tatm ``metadata.yaml`` beside the file declares, if any: the
            message then says to correct it there.

    Raises:
        FormatError: naming the file, the dtype, the largest (or negative) id read and the
            dtype that reads plausible ids.
    """
    data = sample_bytes(fs, info)
    dtype = np.dtype(info.dtype)
    ids = np.frombuffer(data, dtype=dtype)
    found = implausible_ids(ids)
    if found is None:
        return
    fit = fitting_dtype(data, dtype)
    if fit is None:
        hint = "the dtype is wrong or this is not a token file"
    elif meta_dtype is not None:
        hint = (
            f"the file looks like {fit}: the tokenized_info.dtype {meta_dtype!r} of the tatm "
            f"metadata.yaml beside it is wrong; set it to {fit}"
        )
    else:
        hint = f"the file looks like {fit}: set dtype = {fit!r}"
    if int(ids.max()) >= MAX_PLAUSIBLE_ID:
        hint += " (if ids this large are real, set vocab_size)"
    raise FormatError(f"{info.path}: reads as {dtype.name} {found}; {hint}")
