"""Reused shared-memory slots for process workers' results.

Fresh shared memory per result is slow: every chunk pays for a new segment and for faulting
in and zeroing its pages (about 18 ms per 16 MiB chunk here, more than computing it). A
fixed pool of slots is allocated once, before the workers start; a worker writes its result
into the slot the consumer assigned to the task and sends only the slot number and layout.
The consumer copies the chunk out of the slot at once (one large copy is about three times
cheaper than one copy per batch: fresh large allocations are faulted in in bulk) and returns
the slot immediately, so delivered batches never alias memory a later chunk overwrites.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

__all__ = ["SlotRef", "read_slot", "write_slot"]

_ALIGN = 64


class SlotRef:
    """A result stored in slot ``slot``: ``(key, dtype, shape, offset)`` per tensor."""

    def __init__(self, slot: int, layout: list[tuple[str, str, tuple[int, ...], int]]) -> None:
        self.slot = slot
        self.layout = layout


def write_slot(value: Any, slots: list[torch.Tensor], slot: int | None) -> Any:
    """Store a dict of tensors in ``slots[slot]`` and return a :class:`SlotRef`, or return the
    value itself when it is not such a dict, no slot was assigned, or it does not fit."""
    if slot is None or not isinstance(value, dict):
        return value
    if not all(isinstance(v, torch.Tensor) for v in value.values()):
        return value
    buffer = slots[slot].numpy()
    layout, offset = [], 0
    for key, tensor in value.items():
        array = tensor.numpy()
        if offset + array.nbytes > buffer.nbytes:
            return value
        target = buffer[offset : offset + array.nbytes].view(array.dtype).reshape(array.shape)
        np.copyto(target, array)
        layout.append((key, array.dtype.str, array.shape, offset))
        offset += -(-array.nbytes // _ALIGN) * _ALIGN
    return SlotRef(slot, layout)


def read_slot(ref: SlotRef, slots: list[torch.Tensor]) -> dict[str, torch.Tensor]:
    """Copies of the tensors a worker stored in a slot (the slot may be reused at once)."""
    buffer = slots[ref.slot].numpy()
    out = {}
    for key, dtype, shape, offset in ref.layout:
        nbytes = int(np.prod(shape, dtype=np.int64)) * np.dtype(dtype).itemsize
        array = buffer[offset : offset + nbytes].view(np.dtype(dtype)).reshape(shape)
        out[key] = torch.from_numpy(array).clone()
    return out
