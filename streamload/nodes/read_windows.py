"""Stages 2–4 (read, carve, shuffle): sample ids → window tokens, one block per chunk."""

from __future__ import annotations

from torchdata.nodes import BaseNode

from streamload.nodes._map import MapStage
from streamload.nodes.types import ChunkPlan, TokenChunk
from streamload.stream import SampleStream

__all__ = ["ReadWindows", "WindowReader"]


class WindowReader:
    """Picklable map ``ChunkPlan → TokenChunk`` (the stream's shards open lazily per process).

    Args:
        stream: The sample stream.
        documents: Also find document starts (the format's index, else EOS) for masks.
    """

    def __init__(self, stream: SampleStream, documents: bool = False) -> None:
        self.stream = stream
        self.documents = documents

    def __call__(self, plan: ChunkPlan) -> TokenChunk:
        return self.stream.read_chunk(plan, self.documents)


class ReadWindows(MapStage[ChunkPlan, TokenChunk]):
    """Read the windows of each chunk plan.

    State:
        The source's state (this stage holds nothing).
    """

    def __init__(
        self, source: BaseNode[ChunkPlan], stream: SampleStream, documents: bool = False
    ) -> None:
        super().__init__(source, WindowReader(stream, documents))
