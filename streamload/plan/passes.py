"""Passes, epochs and the sample → window map of one source.

A *pass* is what one ``iter(loader)`` walks through. With ``num_samples = N`` a pass is the
first N samples of the endless sequence of epochs (sample g is slot ``g % n`` of epoch
``g // n``) and every pass is the same; without it, pass ``p`` is epoch ``p``.

Example (n = 3 windows, N = 7): pass samples 0..6 are epochs 0,0,0,1,1,1,2 and slots
0,1,2,0,1,2,0; each epoch applies its own permutation to the slots.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from streamload.plan.block_shuffle import block_shuffle
from streamload.plan.permutation import KeyedPermutation, derive_key

__all__ = ["PassPlan"]


@dataclass(frozen=True)
class PassPlan:
    """The order of windows of one source.

    Args:
        name: Source name (part of every permutation key).
        num_windows: n, windows per epoch (>= 1).
        seed: Global seed.
        shuffle: Permute windows per epoch.
        num_samples: Pass length, or ``None`` for one epoch per pass.
        shuffle_block: Windows per shuffle block (:mod:`streamload.plan.block_shuffle`);
            0, or at least ``num_windows``: one uniform permutation per epoch.
    """

    name: str
    num_windows: int
    seed: int
    shuffle: bool
    num_samples: int | None
    shuffle_block: int = 0

    @property
    def pass_length(self) -> int:
        """Samples in one pass."""
        return self.num_samples if self.num_samples is not None else self.num_windows

    def epochs_and_slots(
        self, pass_index: int, samples: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray]:
        """Epoch and slot of pass-relative sample indices."""
        j = np.asarray(samples, dtype=np.int64)
        if self.num_samples is None:
            j = j + pass_index * self.num_windows
        return j // self.num_windows, j % self.num_windows

    def window_ids(self, pass_index: int, samples: np.ndarray) -> np.ndarray:
        """Window id of each pass-relative sample index (vectorized)."""
        epochs, slots = self.epochs_and_slots(pass_index, samples)
        if not self.shuffle:
            return slots
        out = np.empty_like(slots)
        for epoch in np.unique(epochs):
            where = epochs == epoch
            out[where] = self._permute(int(epoch), slots[where])
        return out

    def _permute(self, epoch: int, slots: np.ndarray) -> np.ndarray:
        n, block = self.num_windows, self.shuffle_block
        if block == 0 or block >= n:
            key = derive_key(seed=self.seed, epoch=epoch, stream=self.name)
            return KeyedPermutation(n, key)(slots)

        def part_key(part: str) -> bytes:
            stream = f"{self.name}/shuffle_block={block}/{part}"
            return derive_key(seed=self.seed, epoch=epoch, stream=stream)

        return block_shuffle(slots, n, block, part_key)
