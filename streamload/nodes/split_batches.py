"""Split chunk dicts (leading ``[batches, ...]``) into one dict per batch, zero-copy."""

from __future__ import annotations

import copy
from typing import Any

import torch
from torchdata.nodes import BaseNode

from streamload.errors import StateError
from streamload.streams.cursor import state_int, state_mapping

__all__ = ["SplitBatches"]

Batch = dict[str, torch.Tensor]


class SplitBatches(BaseNode[Batch]):
    """Yield ``{k: v[i]}`` for each batch i of each chunk (views of the chunk's tensors).

    Restoring re-reads from the source state before the chunk in progress and skips the
    batches already delivered — a recomputation from the last simple point, no buffer in the
    state.

    A restored state is echoed: ``get_state()`` returns it as given until the next batch
    (a position has several equivalent forms, e.g. the last batch of a chunk delivered or
    the next chunk not begun; the one given is the one reported).

    State:
        ``source``: the source state before the chunk in progress; ``offset``: batches of it
        already delivered.
    """

    SOURCE_KEY = "source"
    OFFSET_KEY = "offset"

    def __init__(self, source: BaseNode[Batch]) -> None:
        super().__init__()
        self.source = source
        self._chunk: list[Batch] | None = None  # the chunk in progress, split into batches
        self._chunk_state: dict[str, Any] | None = None
        self._offset = 0
        self._restored: dict[str, Any] | None = None

    def reset(self, initial_state: dict[str, Any] | None = None) -> None:
        super().reset(initial_state)
        self._chunk, self._offset, self._restored = None, 0, None
        if initial_state is None:
            self.source.reset(None)
            self._chunk_state = self.source.state_dict()
            return
        state = state_mapping(initial_state, "SplitBatches", (self.SOURCE_KEY, self.OFFSET_KEY))
        offset = skip = state_int(state[self.OFFSET_KEY], f"SplitBatches.{self.OFFSET_KEY}")
        self.source.reset(state[self.SOURCE_KEY])
        self._chunk_state = state[self.SOURCE_KEY]
        # Batches are a pure function of the cursor, so they are skipped by count, whatever
        # the chunk sizes are now (the planner may cut chunks differently after a restore).
        while skip:
            self._chunk_state = self.source.state_dict()
            try:
                self._chunk = _split(next(self.source))
            except StopIteration:
                raise StateError(
                    f"state SplitBatches.offset = {offset} skips past the end "
                    "of the pass; the state was edited or is corrupt"
                ) from None
            self._offset = min(skip, len(self._chunk))
            skip -= self._offset
        source_state = copy.deepcopy(state[self.SOURCE_KEY])
        self._restored = {self.SOURCE_KEY: source_state, self.OFFSET_KEY: int(offset)}

    def next(self) -> Batch:
        if self._chunk is None or self._offset >= len(self._chunk):
            self._chunk_state = self.source.state_dict()
            self._chunk, self._offset = _split(next(self.source)), 0
        batch = self._chunk[self._offset]
        self._offset += 1
        self._restored = None
        return batch

    def get_state(self) -> dict[str, Any]:
        if self._restored is not None:
            return copy.deepcopy(self._restored)
        if self._chunk is not None and self._offset >= len(self._chunk):
            return {self.SOURCE_KEY: self.source.state_dict(), self.OFFSET_KEY: 0}
        return {self.SOURCE_KEY: self._chunk_state, self.OFFSET_KEY: self._offset}


def _split(chunk: Batch) -> list[Batch]:
    """The chunk's batches: one dict of views per index of the leading dimension (one
    ``unbind`` per key and chunk, not an indexing call per key and batch)."""
    keys = list(chunk)
    columns = [value.unbind(0) for value in chunk.values()]  # every key: [batches, ...]
    return [dict(zip(keys, views, strict=True)) for views in zip(*columns, strict=True)]
