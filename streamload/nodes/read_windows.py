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
        documents: Also read document starts from the format's index (for packing masks).
    """

    def __init__(self, stream: SampleStream, documents: bool = False) -> None:
        self.stream = stream
        self.documents = documents and stream.has_documents

    def __call__(self, plan: ChunkPlan) -> TokenChunk:
        tokens, starts = self.stream.read(plan.pass_index, plan.sample_ids)
        doc_starts = self.stream.document_starts(starts) if self.documents else None
        return TokenChunk(plan, tokens, starts, doc_starts)


class ReadWindows(MapStage[ChunkPlan, TokenChunk]):
    """Read the windows of each chunk plan.

    State:
        The source's state (this stage holds nothing).
    """

    def __init__(
        self, source: BaseNode[ChunkPlan], stream: SampleStream, documents: bool = False
    ) -> None:
        super().__init__(source, WindowReader(stream, documents))
