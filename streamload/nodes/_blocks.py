"""Reused output memory for the chunks a process builds.

A chunk's outputs in fresh memory pay, every chunk, a page fault and the kernel's zeroing per
4 KiB page they are written to (a chunk of int64 ``input_ids`` and ``labels`` is 16 MiB): with
0 workers that was about half the time of the default layout, and more with masks (issue 35,
``benchmarks/throughput.py``). A :class:`BlockPool` hands out blocks that stay mapped: a
chunk's outputs are carved from one block, and the block goes back to the pool only when the
last tensor viewing it is freed — as :mod:`streamload.nodes._slots` leases its slots — so a
batch the training loop keeps, or writes into, never shares memory with a later chunk.

Each key of a chunk is its own region of the block, so writing one (``labels[labels == pad]
= -100``) never changes another (``input_ids``).
"""

from __future__ import annotations

import contextlib
import weakref
from typing import Any

import numpy as np
import torch

__all__ = ["BlockCarver", "BlockPool"]

_ALIGN = 64
_KEEP = 4
"""Free blocks kept: the chunk being split, the batch the step holds, and the chunks in
flight of two thread workers; more only keep memory nobody asks for."""


class BlockPool:
    """Blocks of at least a given size, each reused once every view of its last use is freed.

    Lock-free: a block is taken with ``list.pop`` and given back with ``list.append`` (both
    atomic under the GIL), so thread workers share one pool, and a finalizer — which runs in
    whichever thread frees the last view, possibly inside a ``take`` — never waits on a lock.
    Pickled (to a process worker) as an empty pool.
    """

    def __init__(self, keep: int = _KEEP) -> None:
        self.keep = keep
        self._free: list[torch.Tensor] = []

    def __getstate__(self) -> dict[str, Any]:
        return {"keep": self.keep}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(state["keep"])  # type: ignore[misc]

    def take(self, nbytes: int) -> np.ndarray:
        """A ``uint8`` array of at least ``nbytes`` bytes, 64-byte aligned, leased until the
        array and every view of it are freed."""
        store = None
        with contextlib.suppress(IndexError):  # another thread took the last one
            store = self._free.pop()
        if store is None or store.numel() < nbytes:  # too small: dropped, a new one made
            store = torch.empty(max(nbytes, 1), dtype=torch.uint8)
        # A fresh array whose base is the tensor (not an array), so every numpy view and
        # ``torch.from_numpy`` made from it keeps *it* alive: it dies with the last one.
        block = store.numpy()
        weakref.finalize(block, self._give_back, store)
        return block

    def _give_back(self, store: torch.Tensor) -> None:
        self._free.append(store)
        while len(self._free) > self.keep:
            with contextlib.suppress(IndexError):
                self._free.pop(0)


class BlockCarver:
    """Consecutive 64-byte-aligned arrays carved from one block.

    Args:
        pool: Where the block comes from (``None``: fresh memory, as ``np.empty``).
        shapes: ``(dtype, shape)`` of every array to carve, in order: sizes the block.
    """

    def __init__(
        self, pool: BlockPool | None, shapes: list[tuple[np.dtype[Any], tuple[int, ...]]]
    ) -> None:
        sizes = [
            _aligned(int(np.prod(shape)) * np.dtype(dtype).itemsize) for dtype, shape in shapes
        ]
        total = sum(sizes)
        self.block = np.empty(total, dtype=np.uint8) if pool is None else pool.take(total)
        self.offset = 0

    def array(self, dtype: Any, shape: tuple[int, ...]) -> np.ndarray:
        """The next array (uninitialised)."""
        dtype = np.dtype(dtype)
        nbytes = int(np.prod(shape)) * dtype.itemsize
        start = self.offset
        self.offset += _aligned(nbytes)
        return self.block[start : start + nbytes].view(dtype).reshape(shape)


def _aligned(nbytes: int) -> int:
    return -(-nbytes // _ALIGN) * _ALIGN
