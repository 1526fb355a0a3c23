"""Checks shared by the format writers on the documents they are given."""

from __future__ import annotations

import numpy as np

__all__ = ["as_document", "token_dtype"]


def token_dtype(dtype: object, where: str) -> np.dtype:
    """``dtype`` as a little-endian integer dtype, or a ``ValueError`` naming ``where``."""
    try:
        np_dtype = np.dtype(dtype)  # type: ignore[call-overload]
    except TypeError:
        raise ValueError(f"{where}: dtype {dtype!r} is not a numpy dtype") from None
    if np_dtype.kind not in "ui" or np_dtype.itemsize > 8:
        raise ValueError(f"{where}: dtype {np_dtype} cannot hold token ids; expected an integer")
    return np_dtype.newbyteorder("<")


def as_document(tokens: object, dtype: np.dtype, where: str) -> np.ndarray:
    """One document as a contiguous 1-D array of ``dtype``.

    Raises:
        ValueError: not 1-D integers, or a token outside the range of ``dtype`` (naming the
            value and the range), so a writer never wraps ids silently.
    """
    arr = np.asarray(tokens)
    if arr.ndim != 1 or (arr.size and arr.dtype.kind not in "ui"):
        raise ValueError(
            f"{where}: a document must be a 1-D array of integer token ids, got shape "
            f"{arr.shape} of {arr.dtype}"
        )
    if arr.size and not np.can_cast(arr.dtype, dtype, "safe"):  # else every id fits
        info = np.iinfo(dtype)
        lo, hi = int(arr.min()), int(arr.max())
        if lo < info.min or hi > info.max:
            bad = lo if lo < info.min else hi
            raise ValueError(
                f"{where}: token id {bad} does not fit {dtype.name} (range {info.min}..{info.max})"
            )
    return np.ascontiguousarray(arr, dtype=dtype)
