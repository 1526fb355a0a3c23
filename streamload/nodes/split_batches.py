"""Split chunk dicts (leading ``[batches, ...]``) into one dict per batch, zero-copy."""

from __future__ import annotations

from typing import Any

import torch
from torchdata.nodes import BaseNode

__all__ = ["SplitBatches"]

Batch = dict[str, torch.Tensor]


class SplitBatches(BaseNode[Batch]):
    """Yield ``{k: v[i]}`` for each batch i of each chunk (views of the chunk's tensors).

    Restoring re-reads from the source state before the chunk in progress and skips the
    batches already delivered — a recomputation from the last simple point, no buffer in the
    state.

    State:
        ``source``: the source state before the chunk in progress; ``offset``: batches of it
        already delivered.
    """

    SOURCE_KEY = "source"
    OFFSET_KEY = "offset"

    def __init__(self, source: BaseNode[Batch]) -> None:
        super().__init__()
        self.source = source
        self._chunk: Batch | None = None
        self._chunk_state: dict[str, Any] | None = None
        self._offset = 0

    def reset(self, initial_state: dict[str, Any] | None = None) -> None:
        super().reset(initial_state)
        self._chunk, self._offset = None, 0
        if initial_state is None:
            self.source.reset(None)
            self._chunk_state = self.source.state_dict()
            return
        self.source.reset(initial_state[self.SOURCE_KEY])
        self._chunk_state = initial_state[self.SOURCE_KEY]
        skip = int(initial_state[self.OFFSET_KEY])
        # Batches are a pure function of the cursor, so they are skipped by count, whatever
        # the chunk sizes are now (the planner may cut chunks differently after a restore).
        while skip:
            self._chunk_state = self.source.state_dict()
            self._chunk = next(self.source)
            self._offset = min(skip, _num_batches(self._chunk))
            skip -= self._offset

    def next(self) -> Batch:
        if self._chunk is None or self._offset >= _num_batches(self._chunk):
            self._chunk_state = self.source.state_dict()
            self._chunk, self._offset = next(self.source), 0
        batch = {key: value[self._offset] for key, value in self._chunk.items()}
        self._offset += 1
        return batch

    def get_state(self) -> dict[str, Any]:
        if self._chunk is not None and self._offset >= _num_batches(self._chunk):
            return {self.SOURCE_KEY: self.source.state_dict(), self.OFFSET_KEY: 0}
        return {self.SOURCE_KEY: self._chunk_state, self.OFFSET_KEY: self._offset}


def _num_batches(chunk: Batch) -> int:
    return int(next(iter(chunk.values())).shape[0])
