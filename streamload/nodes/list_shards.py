"""Stage 1: list a source's shards through fsspec, in the documented order."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from torchdata.nodes import BaseNode

from streamload.catalog.sources import describe_source
from streamload.config import SourceConfig, StorageConfig
from streamload.errors import StateError
from streamload.formats.base import ShardInfo
from streamload.streams.cursor import state_int, state_mapping

__all__ = ["ListShards"]


class ListShards(BaseNode[ShardInfo]):
    """Yield the described shards of a source (listing and headers only; no token data).

    A restored index must be an integer from 0 to the number of shards (else
    ``StateError``).

    Args:
        source: The source.
        eos_token_id: The config's EOS id: describing needs it (a tatm file's trailing zeros
            keep a final EOS 0; issue 36: without it the last document lost its EOS).
        vocab_size: The config's ``vocab_size`` (a width chosen by it; headerless files are
            checked against it where read instead of on a sample at describe time).
        storage: The config's ``[storage]`` (remote sources).

    Example:
        ``ListShards(cfg.sources[0], eos_token_id=cfg.eos_token_id,
        vocab_size=cfg.vocab_size, storage=cfg.storage)`` describes the source as the
        loader does.

    State:
        ``index``: how many shards were yielded.
    """

    INDEX_KEY = "index"

    def __init__(
        self,
        source: SourceConfig,
        *,
        eos_token_id: int | None = None,
        vocab_size: int | None = None,
        storage: StorageConfig | None = None,
    ) -> None:
        super().__init__()
        self.source = source
        self.eos_token_id = eos_token_id
        self.vocab_size = vocab_size
        self.storage = storage
        self._shards: Sequence[ShardInfo] = ()
        self._index = 0

    def reset(self, initial_state: dict[str, Any] | None = None) -> None:
        super().reset(initial_state)
        self._shards = describe_source(
            self.source, self.vocab_size, self.storage, eos_token_id=self.eos_token_id
        ).shards
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
