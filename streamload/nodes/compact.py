"""Compact batches (``packing.compact``): one token block per batch, shifted on the device.

A full batch holds ``input_ids`` and ``labels``, int64 ``[b, L]`` each: 16 bytes per token. A
compact batch holds ``tokens`` ``[b, L + 1]`` in the data's own width — 1, 2 or 4 bytes per
token — and the training step makes the two views on the device::

    tokens = batch["tokens"].to(device, non_blocking=True).long()
    input_ids, labels = tokens[:, :-1], tokens[:, 1:]

Where the config can mask a label (:func:`can_mask_labels`), ``label_mask`` (bool
``[b, L]``, aligned with ``labels``) says which labels are trained, and
``labels = labels.masked_fill(~batch["label_mask"].to(device), -100)`` gives the full batch's
labels exactly.

Width: a chunk whose tokens are 1 or 2 bytes wide keeps its dtype (``uint8``, ``uint16``,
``int8``, ``int16``; torch supports ``uint16`` for copies and ``.long()``, not for
arithmetic); wider tokens become ``int32`` (a ``uint32`` block is viewed as ``int32`` without a
copy; an id of 2**31 or more is refused, it cannot be a token of any vocabulary).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from streamload.config.source import OnError
from streamload.errors import FormatError
from streamload.streams.chunks import TokenChunk

__all__ = ["can_mask_labels", "compact_dtype", "compact_tokens", "stream_dtype"]


def compact_dtype(dtype: np.dtype[Any]) -> np.dtype[Any]:
    """The dtype of a compact ``tokens`` block for tokens of ``dtype``."""
    dtype = np.dtype(dtype)
    return dtype if dtype.itemsize <= 2 else np.dtype(np.int32)


def stream_dtype(stream: Any) -> np.dtype[Any]:
    """The compact dtype of every batch of ``stream``: that of its sources' common token
    dtype (one dtype for the whole run, whatever a chunk holds: Megatron's padded chunks are
    int64)."""
    return compact_dtype(np.result_type(*[source.shards.dtype for source in stream.sources]))


def compact_tokens(chunk: TokenChunk, dtype: np.dtype[Any]) -> np.ndarray:
    """The chunk's tokens (no negative left) in ``dtype``: the chunk's own array when it
    already is, a view when ``uint32`` becomes ``int32``; ids that do not fit are refused."""
    tokens = chunk.tokens
    if tokens.dtype == dtype:
        return tokens
    if tokens.dtype == np.uint32 and dtype == np.int32:
        view = tokens.view(np.int32)
        if view.size and int(view.min()) < 0:  # ids of 2**31 or more wrap to negatives
            _refuse(chunk, np.flatnonzero(view.ravel() < 0)[0], tokens, dtype)
        return view
    top = np.iinfo(dtype).max
    if tokens.size and np.iinfo(tokens.dtype).max > top and int(tokens.max()) > top:
        _refuse(chunk, np.flatnonzero(tokens.ravel() > top)[0], tokens, dtype)
    return tokens.astype(dtype)


def _refuse(chunk: TokenChunk, flat: int, tokens: np.ndarray, dtype: np.dtype[Any]) -> None:
    row, col = divmod(int(flat), tokens.shape[1])
    sample = int(chunk.plan.sample_ids.ravel()[row])
    raise FormatError(
        f"sample {sample}, token {col}: id {int(tokens.ravel()[flat])} does not fit the "
        f"{np.dtype(dtype).name} tokens of packing.compact = true (at most "
        f"{np.iinfo(dtype).max}; set vocab_size to have ids checked where they are read, or "
        "set packing.compact = false)"
    )


def can_mask_labels(stream: Any) -> bool:
    """Whether a label of ``stream``'s batches can be -100, so a compact batch needs
    ``label_mask``: padding (a mode whose layout pads, evaluation loaders), loss-mask files,
    ``on_error = "skip"``, or packing masks with ``eod_mask_loss``."""
    config = stream.config
    if stream.layout.label_padding:
        return True  # evaluation pads its last batch; whole documents and Megatron pad
    if config.packing.flags[2]:  # eod_mask_loss
        return True
    sources = stream.sources
    if any(getattr(source, "loss_masks", None) is not None for source in sources):
        return True
    return any(source.on_error is OnError.SKIP for source in config.sources)
