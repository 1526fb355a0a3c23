"""Stage 1: list a source's shards through fsspec, in the documented order."""

from __future__ import annotations

from typing import Any

from torchdata.nodes import BaseNode

from streamload.catalog.sources import describe_source
from streamload.config import SourceConfig
from streamload.errors import StateError
from streamload.formats.base import ShardInfo
from streamload.streams.cursor import state_int, state_mapping

__all__ = ["ListShards"]


class ListShards(BaseNode[ShardInfo]):
    """Yield the described shards of a source (listing and headers only; no token data).

    A restored index must be an integer from 0 to the number of shards (else
    ``StateError``).

    State:
        ``index``: how many shards were yielded.
    """

    INDEX_KEY = "index"

    def __init__(self, source: SourceConfig) -> None:
        super().__init__()
        self.source = source
        self._shards: tuple[ShardInfo, ...] = ()
        self._index = 0

    def reset(self, initial_state: dict[str, Any] | None = None) -> None:
        super().reset(initial_state)
        self._shards = describe_source(self.source).shards
        self._index = 0
        if initial_state is not None:
            state = state_mapping(initial_state, "ListShards", (self.INDEX_KEY,))
            index = state_int(state[self.INDEX_KEY], f"ListShards.{self.INDEX_KEY}")
            if index > len(self._shards):
                raise StateError(
                    f"state ListShards.index = {index} lies beyond the {len(self._shards)} "
                    f"shards of source {self.source.name!r}"
                )
            self._index = index

    def next(self) -> ShardInfo:
        if self._index >= len(self._shards):
            raise StopIteration
        self._index += 1
        return self._shards[self._index - 1]

    def get_state(self) -> dict[str, Any]:
        return {self.INDEX_KEY: self._index}
