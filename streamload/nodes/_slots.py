"""Reused shared-memory slots for process workers' results.

Fresh shared memory per result is slow: every chunk pays for a new segment and for faulting
in and zeroing its pages (about 18 ms per 16 MiB chunk here, more than computing it). A
fixed pool of slots is allocated once, before the workers start; a worker writes its result
into the slot the consumer assigned to the task and sends only the slot number and layout.
The consumer hands out views of the slot, not copies (a copy of every chunk on the training
thread was the largest part of process workers' cost to the step): the slot is *leased*
until the last tensor viewing it is freed, as torch's own shared-memory tensors live as long
as a view of them does, and only then goes back to the pool (:class:`SlotPool`), so a
delivered batch never aliases memory a later chunk overwrites. A batch the training loop
keeps only keeps its slot out of the pool: when no slot is free, a result falls back to the
ordinary pickled hand-off (slower, never wrong, never a hang).
"""

from __future__ import annotations

import weakref
from typing import Any

import numpy as np
import torch

__all__ = ["SlotPool", "SlotRef", "read_slot", "write_slot"]

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


def read_slot(ref: SlotRef, slots: list[torch.Tensor], pool: SlotPool) -> dict[str, torch.Tensor]:
    """Views of the tensors a worker stored in a slot; the slot stays leased from ``pool``
    until every one of them (and every view of them) is freed."""
    buffer = slots[ref.slot].numpy()  # a fresh array: the base of every view below
    out = {}
    for key, dtype, shape, offset in ref.layout:
        nbytes = int(np.prod(shape, dtype=np.int64)) * np.dtype(dtype).itemsize
        array = buffer[offset : offset + nbytes].view(np.dtype(dtype)).reshape(shape)
        out[key] = torch.from_numpy(array)
    pool.lease(ref.slot, buffer)
    return out


class SlotPool:
    """Which of ``count`` slots the next item may take: those neither assigned to an item in
    flight nor leased to a delivered result.

    A result's tensors view arrays whose base is one fresh array of the slot's buffer, kept
    alive by every tensor storage (and every view) made from them; its finalizer ends the
    lease in whichever thread frees the last one. Only set updates happen there (atomic
    under the GIL), and the free slots are derived when asked, so no update is lost.
    """

    def __init__(self) -> None:
        self.count = 0
        self.assigned: set[int] = set()
        self.leased: set[int] = set()

    def reset(self, count: int) -> None:
        """A new run over ``count`` slots: nothing in flight; leases of results still alive
        stand."""
        self.count = count
        self.assigned.clear()

    def free(self) -> list[int]:
        """The slots the next items may take."""
        return [s for s in range(self.count) if s not in self.assigned and s not in self.leased]

    def take(self) -> int | None:
        """A free slot for the next item, or ``None`` (the item is handed over pickled)."""
        for slot in self.free()[:1]:
            self.assigned.add(slot)
            return slot
        return None

    def give_back(self, slot: int) -> None:
        """Return a slot whose result was not a slot's (a fallback or a failure)."""
        self.assigned.discard(slot)

    def lease(self, slot: int, base: np.ndarray) -> None:
        """Keep ``slot`` out of the pool until ``base`` (and so every view of it) is freed."""
        self.leased.add(slot)  # before it leaves ``assigned``: never seen free meanwhile
        self.assigned.discard(slot)
        weakref.finalize(base, self.leased.discard, slot)
